"""torch's scaled_dot_product_attention shapes, brought to attnlab's 4-D [B, H, N, E].

torch takes query (..., Hq, L, E), key (..., H, S, E), value (..., H, S, Ev) and a mask
broadcastable to (..., Hq, L, S), with NumPy broadcasting of the leading axes. Everything
here is a torch view operation (unsqueeze, expand) except one case: several leading batch
axes of which some broadcast cannot be merged into one axis without a copy (reshape makes
it). Being torch operations, autograd sums the gradient of anything expanded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SdpaOperands:
    q: torch.Tensor  # [B, Hq, L, E]
    k: torch.Tensor  # [B, Hkv, S, E]; Hq is a multiple of Hkv (grouped-query heads)
    v: torch.Tensor  # [B, Hkv, S, Ev]
    mask: torch.Tensor | None  # at most 4 axes, broadcasting to [B, Hq, L, S]
    out_shape: tuple  # the shape torch's function returns: (..., Hq, L, Ev)


def pad_to_rank(x: torch.Tensor, rank: int) -> torch.Tensor:
    """x with size-1 axes in front, `rank` axes in all (a view)."""
    return x.reshape((1,) * (rank - x.dim()) + tuple(x.shape))


def _broadcast(shapes: dict) -> tuple:
    try:
        return tuple(torch.broadcast_shapes(*shapes.values()))
    except RuntimeError:
        described = ", ".join(f"{name} {tuple(s)}" for name, s in shapes.items())
        raise ValueError(f"the batch axes do not broadcast: {described}") from None


def _heads(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, enable_gqa: bool):
    """The query and key/value tensors with head counts attnlab takes: Hkv divides Hq."""
    Hq, Hk, Hv = query.shape[-3], key.shape[-3], value.shape[-3]
    if Hk != Hv and 1 not in (Hk, Hv):
        raise ValueError(f"key has {Hk} heads and value {Hv}: they do not broadcast")
    Hkv = max(Hk, Hv)
    key = key.expand(*key.shape[:-3], Hkv, *key.shape[-2:])
    value = value.expand(*value.shape[:-3], Hkv, *value.shape[-2:])
    if enable_gqa:
        if Hq % Hkv != 0:
            raise ValueError(f"enable_gqa=True: query's {Hq} heads are not a multiple of key/value's {Hkv}")
    elif Hq != Hkv:
        if Hq == 1:  # one query head broadcast over the key/value heads
            query = query.expand(*query.shape[:-3], Hkv, *query.shape[-2:])
        elif Hkv != 1:
            raise ValueError(f"query has {Hq} heads and key/value {Hkv}: they do not broadcast "
                             "(enable_gqa=True shares each key/value head among a group of query heads)")
        # Hkv == 1: one key/value head for every query head. attnlab reads it as grouped-query
        # attention with one group (the same numbers as broadcasting, without the copies).
    return query, key, value


def _flatten_batch(x: torch.Tensor, batch: tuple, keep_size_one: bool = False) -> torch.Tensor:
    """x [*b, H, N, E] with b broadcasting to `batch`, as [prod(batch), H, N, E]."""
    if len(batch) == 0:
        return x.unsqueeze(0)
    if len(batch) == 1 and (keep_size_one or x.shape[0] == batch[0]):
        return x  # a size-1 batch axis stays 1: attnlab broadcasts it (the mask)
    return x.expand(*batch, *x.shape[-3:]).reshape(-1, *x.shape[-3:])


def sdpa_operands(query, key, value, attn_mask, enable_gqa: bool) -> SdpaOperands:
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.dim() < 2:
            raise ValueError(f"{name}: {x.dim()} dimension(s); expected (..., L, E), at least 2")
    tensors = {"query": query, "key": key, "value": value}
    if attn_mask is not None:
        tensors["attn_mask"] = attn_mask
    rank = max(x.dim() for x in tensors.values())
    padded = {name: pad_to_rank(x, max(rank, 3)) for name, x in tensors.items()}
    batch = _broadcast({name: x.shape[:-3] for name, x in padded.items()})
    q, k, v = _heads(padded["query"], padded["key"], padded["value"], enable_gqa)
    q, k, v = (_flatten_batch(x, batch) for x in (q, k, v))
    mask = padded.get("attn_mask")
    if mask is not None:
        mask = _flatten_batch(mask, batch, keep_size_one=True)
    heads = () if rank == 2 else (q.shape[1],)
    out_shape = (*batch, *heads, q.shape[2], v.shape[3])
    return SdpaOperands(q, k, v, mask, out_shape)
