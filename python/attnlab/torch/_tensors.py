"""Which torch tensors attnlab.torch takes: strided CPU tensors of float32, float64, float16
and bfloat16, which the registered operators (python/torch_ops/views.hpp) read in place with
their strides."""

from __future__ import annotations

import torch

# float32, float16 and bfloat16 run on attnlab's engine (the 16-bit types computed in
# float32, with lse and a float mask in float32), float64 on its double-precision reference.
HALF_DTYPES = (torch.float16, torch.bfloat16)
COMPUTE_DTYPES = (torch.float32, torch.float64, *HALF_DTYPES)


def options_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of a float mask, the lse and the diagnostics for inputs of `dtype`."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


def check_tensor(x, name: str) -> None:
    """A strided CPU tensor, or an error naming `name` and what is wrong."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cpu":
        raise ValueError(f"{name}: attnlab computes on the CPU and this tensor is on '{x.device}'; "
                         "move it with .cpu() (or use torch's own attention on that device)")
    if x.layout != torch.strided or getattr(x, "is_nested", False):
        raise ValueError(f"{name}: a {'nested' if getattr(x, 'is_nested', False) else x.layout} tensor; "
                         "attnlab takes dense (strided) tensors")


def check_float(x: torch.Tensor, name: str) -> None:
    if x.dtype not in COMPUTE_DTYPES:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported (use float32, float64, float16 or bfloat16)")


def sinks_tensor(sinks, query: torch.Tensor) -> torch.Tensor | None:
    """sinks (a tensor, or a list or array of numbers) as a tensor in the inputs' dtype (a
    tracked conversion), or None: attention's and ring_attention's."""
    if sinks is None:
        return None
    if not isinstance(sinks, torch.Tensor):
        sinks = torch.as_tensor(sinks, dtype=query.dtype)
    check_tensor(sinks, "sinks")
    check_float(sinks, "sinks")
    if sinks.dim() != 1:
        raise ValueError(f"sinks: shape {tuple(sinks.shape)}; expected [Hq], one logit per query head")
    return sinks if sinks.dtype == query.dtype else sinks.to(query.dtype)
