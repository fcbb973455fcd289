"""Rotary position embeddings (RoPE), applied to q and k before attention as Llama does.

Channel pairs of a head are rotated by the angle position · θ^(−2i/d), i = 0 … d/2 − 1.
Two conventions pair the channels differently, and a checkpoint's q/k projections are
laid out for one of them:
- "interleaved": pairs (2i, 2i + 1), Meta's Llama reference code (complex multiplication);
- "half_split": pairs (i, i + d/2), Hugging Face's `rotate_half` (GPT-NeoX, HF Llama).
The angles are computed in float64 and the rotation in x's dtype, so that positions of
hundreds of thousands keep their phase.
"""

from __future__ import annotations

import numbers

import torch

__all__ = ["ROPE_CONVENTIONS", "apply_rope", "check_rope"]

ROPE_CONVENTIONS = ("interleaved", "half_split")


def check_rope(convention: str | None, base: float, head_dim: int) -> None:
    """A convention this module knows (or None: no rotation), a base above 1, an even head_dim."""
    if convention is None:
        return
    if convention not in ROPE_CONVENTIONS:
        raise ValueError(f"rope: {convention!r} is not a convention ({', '.join(ROPE_CONVENTIONS)}, or None)")
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not base > 1.0 or base == float("inf"):
        raise ValueError(f"rope_base: {base!r} is not a finite number above 1 (Llama 2: 10000, Llama 3: 500000)")
    if head_dim % 2:
        raise ValueError(f"rope: head_dim {head_dim} is odd; rotary embeddings rotate pairs of channels")


def apply_rope(x: torch.Tensor, positions, *, base: float = 10000.0, convention: str = "half_split") -> torch.Tensor:
    """x [..., T, d] rotated by its positions: `positions` is [T] or [B, T] (B = x.shape[0]),
    integers, the position of each of the T rows. Returns a new tensor of x's shape and dtype;
    differentiable in x."""
    check_rope(convention, base, x.shape[-1])
    positions = torch.as_tensor(positions)
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise TypeError(f"positions: dtype {positions.dtype}; expected integer positions")
    T, d = x.shape[-2], x.shape[-1]
    if positions.shape[-1:] != (T,) or positions.dim() > 2 or (positions.dim() == 2 and positions.shape[0] != x.shape[0]):
        raise ValueError(f"positions: shape {tuple(positions.shape)}; expected [{T}] or [{x.shape[0]}, {T}] "
                         f"for x {tuple(x.shape)}")
    angles = rope_angles(positions, d, float(base))  # [(B,) T, d/2]
    if positions.dim() == 2:  # [B, T, d/2] against x [B, ..., T, d]: the axes between go to 1
        angles = angles.reshape(angles.shape[0], *([1] * (x.dim() - 3)), T, d // 2)
    return rotate(x, angles, convention)


# The two steps in TorchScript's subset of Python, so that a scripted CausalSelfAttention
# compiles them (apply_rope's checks above are Python's only).

def rope_angles(positions: torch.Tensor, head_dim: int, base: float) -> torch.Tensor:
    """[..., head_dim / 2] float64: each position times θ^(−2i/d)."""
    inv_freq = torch.pow(base, -torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    return positions.to(torch.float64).unsqueeze(-1) * inv_freq


def rotate(x: torch.Tensor, angles: torch.Tensor, convention: str) -> torch.Tensor:
    """x [..., T, d] rotated by angles that broadcast to [..., T, d/2], in x's dtype."""
    d = x.shape[-1]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if convention == "interleaved":
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    first, second = x[..., : d // 2], x[..., d // 2:]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
