"""Type stubs for the compiled extension attnlab._attnlab (see its docstrings)."""

from typing import Any, Literal, Sequence, TypedDict, overload

import numpy as np
import numpy.typing as npt

ArrayLike = npt.ArrayLike
FloatArray = npt.NDArray[np.floating]
BoolArray = npt.NDArray[np.bool_]
Causal = bool | Literal["none", "top_left", "bottom_right"]
Scale = float | str | None

__version__: str  # CMakeLists.txt's project VERSION

class Diagnostics(TypedDict):
    max_prob: FloatArray
    entropy: FloatArray
    jacobian_fro_sq: FloatArray

def scaled_dot_product_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    seed: int | None = None,
) -> FloatArray: ...
@overload
def attention_forward(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = None,
    *,
    causal: Causal = False,
    scale: Scale = None,
    key_lengths: Sequence[int] | npt.NDArray[np.integer] | None = None,
    diagnostics: Literal[False] = False,
    check_finite: bool = True,
    threads: int = 0,
    window_size: tuple[int, int] | None = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None,
    cu_seqlens_q: Sequence[int] | npt.NDArray[np.integer] | None = None,
    cu_seqlens_k: Sequence[int] | npt.NDArray[np.integer] | None = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    return_dropout_mask: Literal[False] = False,
    bfloat16: bool = False,
) -> tuple[FloatArray, FloatArray]: ...
@overload
def attention_forward(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = None,
    *,
    causal: Causal = False,
    scale: Scale = None,
    key_lengths: Sequence[int] | npt.NDArray[np.integer] | None = None,
    diagnostics: Literal[False] = False,
    check_finite: bool = True,
    threads: int = 0,
    window_size: tuple[int, int] | None = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None,
    cu_seqlens_q: Sequence[int] | npt.NDArray[np.integer] | None = None,
    cu_seqlens_k: Sequence[int] | npt.NDArray[np.integer] | None = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    return_dropout_mask: Literal[True],
    bfloat16: bool = False,
) -> tuple[FloatArray, FloatArray, BoolArray]: ...
@overload
def attention_forward(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = None,
    *,
    causal: Causal = False,
    scale: Scale = None,
    key_lengths: Sequence[int] | npt.NDArray[np.integer] | None = None,
    diagnostics: Literal[True],
    check_finite: bool = True,
    threads: int = 0,
    window_size: tuple[int, int] | None = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None,
    cu_seqlens_q: Sequence[int] | npt.NDArray[np.integer] | None = None,
    cu_seqlens_k: Sequence[int] | npt.NDArray[np.integer] | None = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    return_dropout_mask: Literal[False] = False,
    bfloat16: bool = False,
) -> tuple[FloatArray, FloatArray, Diagnostics]: ...
@overload
def attention_forward(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = None,
    *,
    causal: Causal = False,
    scale: Scale = None,
    key_lengths: Sequence[int] | npt.NDArray[np.integer] | None = None,
    diagnostics: Literal[True],
    check_finite: bool = True,
    threads: int = 0,
    window_size: tuple[int, int] | None = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None,
    cu_seqlens_q: Sequence[int] | npt.NDArray[np.integer] | None = None,
    cu_seqlens_k: Sequence[int] | npt.NDArray[np.integer] | None = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    return_dropout_mask: Literal[True],
    bfloat16: bool = False,
) -> tuple[FloatArray, FloatArray, Diagnostics, BoolArray]: ...
def attention_backward(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    out: ArrayLike,
    lse: ArrayLike,
    grad_out: ArrayLike,
    attn_mask: ArrayLike | None = None,
    *,
    causal: Causal = False,
    scale: Scale = None,
    key_lengths: Sequence[int] | npt.NDArray[np.integer] | None = None,
    check_finite: bool = True,
    threads: int = 0,
    window_size: tuple[int, int] | None = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None,
    cu_seqlens_q: Sequence[int] | npt.NDArray[np.integer] | None = None,
    cu_seqlens_k: Sequence[int] | npt.NDArray[np.integer] | None = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    bfloat16: bool = False,
) -> tuple[FloatArray, FloatArray, FloatArray] | tuple[FloatArray, FloatArray, FloatArray, FloatArray]: ...
def softmax(x: ArrayLike) -> FloatArray: ...
def log_softmax(x: ArrayLike) -> FloatArray: ...
def logsumexp(x: ArrayLike) -> FloatArray: ...
def softmax_jacobian(probs: ArrayLike) -> FloatArray: ...
def softmax_vjp(probs: ArrayLike, grad: ArrayLike) -> FloatArray: ...
def softmax_cross_entropy(logits: ArrayLike, target: ArrayLike) -> tuple[FloatArray, FloatArray]: ...
def engine_target() -> str: ...
def release_cached_memory() -> None: ...
def lab_experiments() -> list[dict[str, Any]]: ...
def lab_run(name: str, config: dict[str, str], seed: int = 0) -> dict[str, Any]: ...
