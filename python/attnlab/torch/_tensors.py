"""Which torch tensors attnlab.torch takes, and how they reach the extension.

The extension reads NumPy arrays in place with any non-negative strides (zero strides are
broadcasting; see python/src/ndarray.hpp). A strided CPU tensor of float32, float64 or
float16 is exactly such an array: `tensor.detach().numpy()` is a view of the same memory
with the same strides (element strides become byte strides), so no tensor attnlab.torch
accepts is ever copied on its way in. NumPy has no bfloat16: a bfloat16 tensor goes as
`tensor.view(torch.int16).numpy()`, its bit patterns in place, with the extension's
`dtype="bfloat16"`. Outputs are NumPy arrays the extension allocates, wrapped by
`torch.from_numpy` (no copy either; bfloat16 outputs come back as uint16 bit patterns and
are viewed as bfloat16).
"""

from __future__ import annotations

import numpy as np
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


def as_numpy(x: torch.Tensor | None) -> np.ndarray | None:
    """The tensor's memory as a NumPy array (a view: same data pointer, same strides);
    bfloat16 as its int16 bit patterns. A negative view (torch._neg_view, whose memory holds
    -x) is resolved into a copy first: NumPy cannot see the bit."""
    if x is None:
        return None
    x = x.detach().resolve_neg()
    return x.view(torch.int16).numpy() if x.dtype == torch.bfloat16 else x.numpy()


def from_numpy(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """An array the extension returned as a tensor of `dtype` (bfloat16: from its uint16
    bit patterns), sharing its memory."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)
