"""attnlab: scaled dot-product attention over NumPy arrays.

float32 arrays run on attnlab's float32 engine, float64 arrays on its double-precision
reference. Errors are ValueError (bad shapes or values, with attnlab's message) or
TypeError (unsupported dtypes)."""

# The one text of each signature of the extension and its docstring: the bindings
# (python/src/bind_*.cpp) take their parameters, defaults and texts from this file through
# python/src/generate_signatures.py, and python/tests/test_stubs.py checks the built module.

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
) -> FloatArray:
    """softmax(query @ key.T * scale + mask) @ value, with the semantics of
    torch.nn.functional.scaled_dot_product_attention (PyTorch 2.5).

    query [..., L, E], key [..., S, E], value [..., S, Ev] -> [..., L, Ev]. Arrays have 2 to 4
    axes, read as [B, H, L, E] from the right: [L, E] is one head, [H, L, E] is H heads.
    Leading axes broadcast as in NumPy (a size-1 batch or head axis is shared).
    attn_mask: bool (True = attend) or float (added to the scaled scores), broadcastable
    to [B, H, L, S]. is_causal: query i attends to keys j <= i (top-left aligned, as
    PyTorch); it cannot be combined with attn_mask. scale: None = 1/sqrt(E), or a number.
    enable_gqa: H_q may be a multiple of H_kv (query head h reads key/value head
    h // (H_q / H_kv)). dropout_p: each probability is kept with probability 1 - dropout_p
    and the kept ones scaled by 1/(1 - dropout_p), as PyTorch; the mask comes from Philox
    keyed by seed (None: drawn from NumPy's global generator, so np.random.seed makes calls
    reproducible) and the element's (batch, head, row, column).

    Differences from PyTorch: a query row that can see no key returns 0 (PyTorch: NaN);
    NaN/inf in the inputs is a ValueError."""
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
) -> ForwardResult:
    """Attention forward with its log-sum-exp, as needed by attention_backward.

    query [B, Hq, Nq, d], key [B, Hkv, Nk, d], value [B, Hkv, Nk, dv] (or the same without
    the batch axis, or without batch and heads; all three of the same rank). Hq must be a
    multiple of Hkv (grouped-query attention). Returns out [..., Nq, dv] and lse [..., Nq]
    (L = m + log l per row; -inf for a fully masked row, whose output is 0).
    attn_mask: bool (True = attend) or float (added), broadcastable to [B, Hq, Nq, Nk].
    causal: False/'none', True/'top_left' (row i sees keys j <= i, PyTorch), or
    'bottom_right' (row i sees j <= i + Nk - Nq, FlashAttention-2); both may be combined
    with attn_mask. scale: None (1/sqrt(d)), a number, or a policy name: 'inv_sqrt_d',
    'none', 'inv_d', 'entropy_invariant', 'ssmax' or 'ssmax:S'. key_lengths: one int per
    batch; keys j >= key_lengths[b] are padding. diagnostics=True also returns a dict of
    per-row arrays [..., Nq]: 'max_prob', 'entropy' (nats) and 'jacobian_fro_sq'
    (||diag(p) - p p^T||_F^2). threads: engine threads for float32 (0 = all cores).

    Element types: float64 runs on the double-precision reference, float32 on the engine,
    float16 on the engine computing in float32 (out in float16, lse and the diagnostics in
    float32; a float mask is read as float32). dtype="bfloat16": query, key and value are
    uint16 (or int16) arrays of bfloat16 bit patterns (NumPy has no bfloat16; torch:
    t.view(torch.int16).numpy()), computed likewise, out returned as uint16 bit patterns.
    The 16-bit results are the float32 engine's on the converted inputs, rounded once
    (except grouped-heads decoding of 2 to 4 query heads per key/value head, where float32
    takes a fused step of its own; there within the accuracy rule, docs/engine.md).

    Variants (attnlab/attention_variants.hpp; they combine with everything above):
    window_size=(left, right): FlashAttention's sliding window, row i sees keys
    i + Nk - Nq - left <= j <= i + Nk - Nq + right (-1: unbounded on that side).
    softcap=c > 0: scores become c*tanh(s/c) after the scale (Gemma 2). alibi_slopes:
    [Hq] or [n_seq, Hq]; scores minus slope*|i + Nk - Nq - j| (FlashAttention's ALiBi).
    sinks: [Hq], one extra logit per head in every row's softmax with no value row
    (gpt-oss); lse includes it, and a row that sees no key has out 0 and lse = its sink.
    cu_seqlens_q, cu_seqlens_k: packed variable-length sequences (batch 1, offsets from 0
    to the total length, FlashAttention's varlen); attention never crosses a sequence and
    causal, window and ALiBi apply within each. dropout_p in [0, 1) with seed: PyTorch's
    dropout on the probabilities, the mask from Philox keyed by (seed, batch, head, row,
    column); return_dropout_mask=True appends the bool mask applied [..., Nq, Nk] (True:
    the key entered the row's softmax and was kept). Pass attention_backward the same
    options (and seed): it regenerates the mask."""
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
) -> BackwardResult:
    """Gradients of attention given the forward's out and lse (from attention_forward with
    the same arguments) and grad_out = dLoss/dout. dk and dv have key's and value's
    shapes: query heads that share a key/value head sum their gradients. A fully masked
    row passes back zero gradients. Options as in attention_forward; with sinks the result
    also holds dsinks [Hq], the gradient of the loss in each sink. float16 and bfloat16
    (dtype="bfloat16", uint16 bit patterns): out and grad_out of the inputs' type, lse
    float32; the gradients of the inputs' type, accumulated in float32 and rounded once."""
def softmax(x: ArrayLike) -> FloatArray:
    """softmax over the last axis, batched over the leading ones: exp(x - max) / sum.
    -inf entries get probability 0; a row of all -inf gives all zeros. NaN and +inf are a ValueError."""
def log_softmax(x: ArrayLike) -> FloatArray:
    """log(softmax(x)) over the last axis, computed as (x - max) - log(sum exp(x - max))."""
def logsumexp(x: ArrayLike) -> FloatArray:
    """log(sum(exp(x))) over the last axis; the result has x's leading shape."""
def softmax_jacobian(probs: ArrayLike) -> FloatArray:
    """The Jacobian diag(s) - s s^T of softmax at probabilities s = softmax(x), for each row of
    the last axis: [..., n] -> [..., n, n]."""
def softmax_vjp(probs: ArrayLike, grad: ArrayLike) -> FloatArray:
    """Back-propagation through softmax: J^T g = s * (g - <g, s>) per row, without forming J.
    probs and grad have the same shape [..., n]."""
def softmax_cross_entropy(logits: ArrayLike, target: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Cross-entropy of softmax(logits) per row of the last axis. target is either integer
    class indices of shape logits.shape[:-1] (loss = logsumexp(x) - x[target]) or a
    distribution of logits' shape (loss = -sum y log s). Returns loss [...] and its
    gradient d loss / d logits [..., n] = softmax(x) * sum(y) - y."""
def engine_target() -> str:
    """The SIMD target the float32 engine dispatched to on this machine (e.g. 'AVX2')."""
def release_cached_memory() -> None:
    """Frees the working buffers the engine keeps between calls (at most 32 MiB: its scratch,
    reused so that a loop of calls does not ask the system for the same memory every time)."""
def lab_experiments() -> list[dict[str, Any]]:
    """The registered experiments: name, summary, claims, parameters (name, default, type,
    help), quick overrides."""
def lab_run(name: str, config: dict[str, str], seed: int = 0) -> dict[str, Any]:
    """Runs one experiment with a str -> str configuration; returns experiment, seed, config,
    tables ({table: {column: ndarray}}), verdicts, figures (name, title, caption), notes, setup,
    seconds. Use attnlab.experiments.run."""

class KVCache:
    """A paged KV cache for decoding, quantized on write (docs/python.md, "Decoding").

    Types: "float32", "bfloat16", "float16", "int8" and "int4" (a scale per 32 channels of
    each token and head), "fp8_e4m3" (key_scales/value_scales: one per K/V head, or one for
    all, fixed here; a value beyond 448·scale is a ValueError). The pool of max_tokens positions
    (all layers) is allocated here and never grows.

    For keys with outlier channels (as trained models' are): key_rotation="hadamard" rotates
    each key before it is quantized (value_rotation each value), center_keys=True stores each
    sequence's keys minus their mean over its first rows; both invisible to the caller (gather
    and attention work in the caller's basis). Together they keep int4 and int8 keys usable."""
    def __init__(self, layers: int, kv_heads: int, head_dim: int, max_tokens: int, key_type: str = "float32",
                 value_type: str = "float32", value_dim: int | None = None, block_tokens: int = 128,
                 key_scales: Sequence[float] = (), value_scales: Sequence[float] = (),
                 key_rotation: Literal["none", "hadamard"] = "none",
                 value_rotation: Literal["none", "hadamard"] = "none", center_keys: bool = False) -> None:
        """The cache's configuration (see the class)."""
    def add_sequence(self) -> int:
        """A new empty sequence; returns its id."""
    def fork(self, seq: int, tokens: int) -> int:
        """A new sequence holding the first `tokens` positions of `seq`, sharing its blocks until
        either writes."""
    def free(self, seq: int) -> None:
        """Frees a sequence (its blocks return when no fork holds them)."""
    @property
    def sequences(self) -> list[int]: ...
    def length(self, seq: int, layer: int = 0) -> int:
        """Positions held by `seq` in `layer`."""
    @overload
    def append(self, layer: int, seq: int, k: ArrayLike, v: ArrayLike) -> None:
        """Appends k [kv_heads, n, head_dim] and v [kv_heads, n, value_dim] (or [1, kv_heads, n,
        dim]) to a sequence's layer; with a list of sequences `seq`, k [len(seq), kv_heads, n,
        head_dim] and v [len(seq), kv_heads, n, value_dim] append n positions to each of them:
        to all or, on any error, to none."""
    @overload
    def append(self, layer: int, seq: Sequence[int], k: ArrayLike, v: ArrayLike) -> None: ...
    def gather(self, layer: int, seq: int) -> tuple[FloatArray, FloatArray]:
        """The sequence's K and V of a layer, dequantized: float32 [kv_heads, length, dim] arrays."""
    @overload
    def attention(self, layer: int, seqs: Sequence[int], q: ArrayLike, query_lengths: Sequence[int] | None = None,
                  causal: Causal = "bottom_right", scale: float | str | None = None,
                  window_size: tuple[int, int] | None = None, softcap: float | None = None,
                  alibi_slopes: Sequence[float] | None = None, sinks: Sequence[float] | None = None,
                  threads: int = 0, return_lse: Literal[False] = False) -> FloatArray:
        """Attention of new rows against the cache for the sequences `seqs` (append their K/V first).

        q: [len(seqs), Hq, Nq, head_dim], or [Hq, sum(query_lengths), head_dim] with query_lengths.
        Returns out (q's shape with value_dim); with return_lse a ForwardResult (out, lse), lse
        without the last axis."""
    @overload
    def attention(self, layer: int, seqs: Sequence[int], q: ArrayLike, query_lengths: Sequence[int] | None = None,
                  causal: Causal = "bottom_right", scale: float | str | None = None,
                  window_size: tuple[int, int] | None = None, softcap: float | None = None,
                  alibi_slopes: Sequence[float] | None = None, sinks: Sequence[float] | None = None,
                  threads: int = 0, *, return_lse: Literal[True]) -> ForwardResult: ...
    def memory(self) -> dict[str, int]:
        """The pool's bytes and blocks: pool_bytes, block_bytes, total_blocks, used_blocks,
        shared_blocks, sequences, bytes_per_token."""
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
    @property
    def key_rotation(self) -> str: ...
    @property
    def value_rotation(self) -> str: ...
    @property
    def center_keys(self) -> bool: ...
