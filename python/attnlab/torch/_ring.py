"""Differentiable ring attention over an mpi4py communicator (attnlab.mpi; docs/scale-out.md).

Each rank passes its shard of query, key, value ([B, Hq, n, E], [B, Hkv, n, E],
[B, Hkv, n, Ev]: the rows attnlab.mpi.zigzag_rows names) and gets its shard of the output;
the backward runs the ring's backward, so a model trains with its sequence sharded across
ranks (every rank calls backward). sinks may be a tensor that requires grad (one logit per
query head, the same on every rank): its gradient is the whole sequence's.
"""

from __future__ import annotations

import torch

from ._function import JIT_TRACE
from ._tensors import sinks_tensor


def _numpy(t: torch.Tensor):
    return t.detach().to(torch.float32).contiguous().numpy()


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, sinks, comm, options):  # noqa: D102 (torch's protocol)
        from .. import mpi as am  # only when called: import attnlab.torch needs neither MPI nor mpi4py
        sink_list = None if sinks is None else _numpy(sinks).tolist()
        out, lse = am.ring_attention(comm, _numpy(query), _numpy(key), _numpy(value), sinks=sink_list, **options)
        out_t, lse_t = torch.from_numpy(out), torch.from_numpy(lse)
        ctx.save_for_backward(query, key, value, out_t, lse_t)
        ctx.comm, ctx.options, ctx.sinks = comm, options, sink_list
        return out_t.to(query.dtype)

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102
        from .. import mpi as am
        query, key, value, out, lse = ctx.saved_tensors
        dq, dk, dv, dsinks = am.ring_attention_backward(ctx.comm, _numpy(query), _numpy(key), _numpy(value),
                                                        out.numpy(), lse.numpy(), _numpy(grad_out),
                                                        sinks=ctx.sinks, **ctx.options)
        d_sinks = None if dsinks is None else torch.from_numpy(dsinks)
        return (torch.from_numpy(dq).to(query.dtype), torch.from_numpy(dk).to(key.dtype),
                torch.from_numpy(dv).to(value.dtype), d_sinks, None, None)


def ring_attention(comm, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                   causal: bool | str = False,
                   scale: float | str | None = None, softcap: float | None = None,
                   sinks=None, window_size: tuple[int, int] | None = None,
                   alibi_slopes=None, threads: int | None = None) -> torch.Tensor:
    """This rank's shard of attention over the sequence sharded across comm's ranks, differentiable."""
    if torch.jit.is_tracing():  # the ring's exchange is invisible to the tracer: it would freeze the output
        raise RuntimeError(JIT_TRACE)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 4 or t.device.type != "cpu":
            raise ValueError(f"ring_attention: {name} must be a 4-D CPU tensor [B, H, n, E], got {tuple(t.shape)} "
                             f"on {t.device}")
    slopes = None if alibi_slopes is None else [float(x) for x in torch.as_tensor(alibi_slopes).reshape(-1)]
    options = {"causal": causal, "scale": scale, "softcap": softcap, "window_size": window_size, "alibi_slopes": slopes,
               "threads": torch.get_num_threads() if threads is None else threads}
    return _RingAttention.apply(query, key, value, sinks_tensor(sinks, query), comm, options)
