#pragma once
// Docstrings of the _attnlab functions (the .pyi stubs in python/attnlab repeat the signatures).
namespace attnlab::python::docs {

inline constexpr const char* module = R"(attnlab: scaled dot-product attention over NumPy arrays.

float32 arrays run on attnlab's float32 engine, float64 arrays on its double-precision
reference. Errors are ValueError (bad shapes or values, with attnlab's message) or
TypeError (unsupported dtypes).)";

inline constexpr const char* scaled_dot_product_attention =
    R"(scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *, seed=None) -> ndarray

softmax(query @ key.T * scale + mask) @ value, with the semantics of
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
NaN/inf in the inputs is a ValueError.)";

inline constexpr const char* attention_forward =
    R"(attention_forward(query, key, value, attn_mask=None, *, causal=False, scale=None, key_lengths=None, diagnostics=False, check_finite=True, threads=0, window_size=None, softcap=None, alibi_slopes=None, sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, dropout_p=0.0, seed=0, return_dropout_mask=False, dtype=None) -> (out, lse[, diagnostics][, dropout_mask])

Attention forward with its log-sum-exp, as needed by attention_backward.

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
options (and seed): it regenerates the mask.)";

inline constexpr const char* attention_backward =
    R"(attention_backward(query, key, value, out, lse, grad_out, attn_mask=None, *, causal=False, scale=None, key_lengths=None, check_finite=True, threads=0, window_size=None, softcap=None, alibi_slopes=None, sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, dropout_p=0.0, seed=0, dtype=None) -> (dq, dk, dv) or (dq, dk, dv, dsinks)

Gradients of attention given the forward's out and lse (from attention_forward with
the same arguments) and grad_out = dLoss/dout. dk and dv have key's and value's
shapes: query heads that share a key/value head sum their gradients. A fully masked
row passes back zero gradients. Options as in attention_forward; with sinks the result
also holds dsinks [Hq], the gradient of the loss in each sink. float16 and bfloat16
(dtype="bfloat16", uint16 bit patterns): out and grad_out of the inputs' type, lse
float32; the gradients of the inputs' type, accumulated in float32 and rounded once.)";

inline constexpr const char* softmax = R"(softmax(x) -> ndarray

softmax over the last axis, batched over the leading ones: exp(x - max) / sum.
-inf entries get probability 0; a row of all -inf gives all zeros. NaN and +inf are a ValueError.)";

inline constexpr const char* log_softmax = R"(log_softmax(x) -> ndarray

log(softmax(x)) over the last axis, computed as (x - max) - log(sum exp(x - max)).)";

inline constexpr const char* logsumexp = R"(logsumexp(x) -> ndarray

log(sum(exp(x))) over the last axis; the result has x's leading shape.)";

inline constexpr const char* softmax_jacobian = R"(softmax_jacobian(probs) -> ndarray

The Jacobian diag(s) - s s^T of softmax at probabilities s = softmax(x), for each row of
the last axis: [..., n] -> [..., n, n].)";

inline constexpr const char* softmax_vjp = R"(softmax_vjp(probs, grad) -> ndarray

Back-propagation through softmax: J^T g = s * (g - <g, s>) per row, without forming J.
probs and grad have the same shape [..., n].)";

inline constexpr const char* softmax_cross_entropy =
    R"(softmax_cross_entropy(logits, target) -> (loss, grad)

Cross-entropy of softmax(logits) per row of the last axis. target is either integer
class indices of shape logits.shape[:-1] (loss = logsumexp(x) - x[target]) or a
distribution of logits' shape (loss = -sum y log s). Returns loss [...] and its
gradient d loss / d logits [..., n] = softmax(x) * sum(y) - y.)";

}  // namespace attnlab::python::docs
