import torch
import attnlab.torch

q = torch.randn(2, 8, 128, 64, requires_grad=True)  # [batch, heads, seq, head dim]
k = torch.randn(2, 2, 128, 64, requires_grad=True)  # 2 key/value heads: grouped-query
v = torch.randn(2, 2, 128, 64, requires_grad=True)

# torch 2.x's F.scaled_dot_product_attention, also on Debian's torch 1.13: attnlab's
# forward, and attnlab's backward through autograd.
out = attnlab.torch.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
out.square().mean().backward()

# attnlab's own options: bottom-right causal alignment, key padding, scale policies, diagnostics.
out, lse, diag = attnlab.torch.attention(q, k, v, causal="bottom_right", key_lengths=[128, 100], diagnostics=True)
assert q.grad is not None and k.grad is not None  # set by the backward above
print(tuple(out.shape), tuple(q.grad.shape), tuple(k.grad.shape), tuple(diag["entropy"].shape))
# (2, 8, 128, 64) (2, 8, 128, 64) (2, 2, 128, 64) (2, 8, 128)
