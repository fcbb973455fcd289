"""Type stubs for the compiled extension attnlab._attnlab (see its docstrings)."""

from typing import Any, Literal, Sequence, overload

import numpy as np
import numpy.typing as npt

ArrayLike = npt.ArrayLike
FloatArray = npt.NDArray[np.floating]
BoolArray = npt.NDArray[np.bool_]
Causal = bool | Literal["none", "top_left", "bottom_right"]
Scale = float | str | None

from ._results import BackwardResult as BackwardResult
from ._results import Diagnostics as Diagnostics
from ._results import ForwardResult as ForwardResult

__version__: str  # CMakeLists.txt's project VERSION

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
def attention_forward(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = None,
    *,
    causal: Causal = False,
    scale: Scale = None,
    key_lengths: Sequence[int] | npt.NDArray[np.integer] | None = None,
    diagnostics: bool = False,
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
    return_dropout_mask: bool = False,
    dtype: Any = None,
) -> ForwardResult: ...
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
    dtype: Any = None,
) -> BackwardResult: ...
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

class KVCache:
    """A paged KV cache for decoding, quantized on write (docs/python.md, "Decoding")."""
    def __init__(self, layers: int, kv_heads: int, head_dim: int, max_tokens: int, key_type: str = "float32",
                 value_type: str = "float32", value_dim: int | None = None, block_tokens: int = 128,
                 key_scales: Sequence[float] = ..., value_scales: Sequence[float] = ...) -> None: ...
    def add_sequence(self) -> int: ...
    def fork(self, seq: int, tokens: int) -> int: ...
    def free(self, seq: int) -> None: ...
    @property
    def sequences(self) -> list[int]: ...
    def length(self, seq: int, layer: int = 0) -> int: ...
    @overload
    def append(self, layer: int, seq: int, k: ArrayLike, v: ArrayLike) -> None: ...
    @overload
    def append(self, layer: int, seq: Sequence[int], k: ArrayLike, v: ArrayLike) -> None: ...
    def gather(self, layer: int, seq: int) -> tuple[FloatArray, FloatArray]: ...
    @overload
    def attention(self, layer: int, seqs: Sequence[int], q: ArrayLike, query_lengths: Sequence[int] | None = None,
                  causal: str = "bottom_right", scale: float | str | None = None,
                  window_size: tuple[int, int] | None = None, softcap: float | None = None,
                  alibi_slopes: Sequence[float] | None = None, sinks: Sequence[float] | None = None,
                  threads: int = 0, return_lse: Literal[False] = False) -> FloatArray: ...
    @overload
    def attention(self, layer: int, seqs: Sequence[int], q: ArrayLike, query_lengths: Sequence[int] | None = None,
                  causal: str = "bottom_right", scale: float | str | None = None,
                  window_size: tuple[int, int] | None = None, softcap: float | None = None,
                  alibi_slopes: Sequence[float] | None = None, sinks: Sequence[float] | None = None,
                  threads: int = 0, *, return_lse: Literal[True]) -> ForwardResult: ...
    def memory(self) -> dict[str, int]: ...
    @property
    def layers(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def value_dim(self) -> int: ...
    @property
    def block_tokens(self) -> int: ...
    @property
    def key_type(self) -> str: ...
    @property
    def value_type(self) -> str: ...
