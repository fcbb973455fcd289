import numpy as np
import attnlab

rng = np.random.default_rng(0)
q = rng.standard_normal((2, 8, 128, 64), dtype=np.float32)  # [batch, heads, seq, head dim]
k = rng.standard_normal((2, 2, 128, 64), dtype=np.float32)  # 2 key/value heads: grouped-query
v = rng.standard_normal((2, 2, 128, 64), dtype=np.float32)

# PyTorch's signature and semantics. float32 runs on the engine, float64 on the reference.
out = attnlab.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

# The forward with its log-sum-exp, then the gradients of a loss L given dL/dout.
out, lse = attnlab.attention_forward(q, k, v, causal=True)
grad_out = np.ones_like(out)
dq, dk, dv = attnlab.attention_backward(q, k, v, out, lse, grad_out, causal=True)
print(out.shape, lse.shape, dq.shape, dk.shape)  # (2, 8, 128, 64) (2, 8, 128) (2, 8, 128, 64) (2, 2, 128, 64)
