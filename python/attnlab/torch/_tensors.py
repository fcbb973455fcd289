"""Which torch tensors attnlab.torch takes, and how they reach the extension.

The extension reads NumPy arrays in place with any non-negative strides (zero strides are
broadcasting; see python/src/ndarray.hpp). A strided CPU tensor of float32 or float64 is
exactly such an array: `tensor.detach().numpy()` is a view of the same memory with the same
strides (element strides become byte strides), so no tensor attnlab.torch accepts is ever
copied on its way in. Outputs are NumPy arrays the extension allocates, wrapped by
`torch.from_numpy` (no copy either).
"""

from __future__ import annotations

import numpy as np
import torch

# float32 runs on attnlab's float32 engine, float64 on its double-precision reference.
COMPUTE_DTYPES = (torch.float32, torch.float64)
# Half precision comes with the precision issue (issue 15); until then it is an error.
HALF_DTYPES = (torch.float16, torch.bfloat16)


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
    if x.dtype in HALF_DTYPES:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported yet (bf16 and fp16 arrive with attnlab's "
                        "precision issue, 15); use float32 or float64, e.g. .float()")
    if x.dtype not in COMPUTE_DTYPES:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported (use float32 or float64)")


def as_numpy(x: torch.Tensor | None) -> np.ndarray | None:
    """The tensor's memory as a NumPy array (a view: same data pointer, same strides)."""
    return None if x is None else x.detach().numpy()
