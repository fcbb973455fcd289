"""Typed use of attnlab's public functions, checked by mypy (test_typing.py): the stubs must
accept every way the results are used, by position and by name."""

import numpy as np

import attnlab

q = np.zeros((1, 2, 4, 8), dtype=np.float32)
sinks = np.zeros(2, dtype=np.float32)

out, lse = attnlab.attention_forward(q, q, q, causal=True)
out2, lse2, diag = attnlab.attention_forward(q, q, q, diagnostics=True)
result = attnlab.attention_forward(q, q, q, dropout_p=0.1, return_dropout_mask=True)
out_by_name: np.ndarray = result.out
mask = result.dropout_mask
if mask is not None:
    kept: int = int(mask.sum())
if result.diagnostics is not None:
    entropy: np.ndarray = result.diagnostics["entropy"]

dq, dk, dv = attnlab.attention_backward(q, q, q, out, lse, out)
grads = attnlab.attention_backward(q, q, q, out, lse, out, sinks=sinks)
dsinks = grads.dsinks
dq_by_name: np.ndarray = grads.dq
total: float = float(grads.dk.sum() + grads.dv.sum())
