"""torch.ops.attnlab: the registered operators attnlab.torch's functions wrap.

`libattnlab_torch_ops.so` (python/torch_ops/, built against the LibTorch that python3-torch
imports) registers, with TORCH_LIBRARY, `torch.ops.attnlab.attention` (differentiable: its
Autograd kernel runs `attention_backward`), `attention_forward`, `attention_backward`,
`torch.classes.attnlab.KVCache` and `kv_cache_append`, `kv_cache_lengths`,
`kv_cache_attention`. TorchScript sees them as it sees torch's own operators: a scripted or
traced model records the calls (the cache's as calls with side effects, in order).

Below: attnlab.torch's option values as the schema's types, and the calls
`CausalSelfAttention` makes, written in TorchScript's subset of Python so that a scripted
module compiles them (eagerly they are Python, and errors keep their type: ValueError).
"""

from __future__ import annotations

from pathlib import Path
import numbers
from typing import TYPE_CHECKING, Any, List

import torch

LIBRARY = Path(__file__).resolve().parent.parent / "libattnlab_torch_ops.so"
if not LIBRARY.is_file():
    raise ImportError(f"attnlab.torch needs {LIBRARY.name}, built beside attnlab's extension when CMake finds "
                      "LibTorch (Debian: apt-get install libtorch-dev, then build again); it is not at "
                      f"{LIBRARY.parent}")
torch.ops.load_library(str(LIBRARY))

# torch.classes.attnlab.KVCache, the type TorchScript annotations name (a type checker sees
# only torch's stubs, where the classes a library registers do not exist).
if TYPE_CHECKING:
    KVCacheHandle = Any
else:
    KVCacheHandle = torch.classes.attnlab.KVCache

# The schema's `str causal`: what each value attnlab.torch takes for `causal` means.
CAUSAL_NAMES = {False: "none", None: "none", "none": "none", True: "top_left", "top_left": "top_left",
                "bottom_right": "bottom_right"}


def causal_name(causal) -> str:
    try:
        return CAUSAL_NAMES[causal]
    except (KeyError, TypeError):
        pass
    if isinstance(causal, str):
        return causal  # the library names what is wrong with it
    raise TypeError(f"causal: expected a bool or one of 'none', 'top_left', 'bottom_right', got {causal!r}")


def scale_name(scale) -> str:
    """The schema's `str scale`: None is 1/sqrt(E), a policy name passes as it is, a number
    as its repr (which the library reads back exactly)."""
    if scale is None:
        return "inv_sqrt_d"
    if isinstance(scale, str):
        return scale
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale: expected None, a number or a policy name, got {type(scale).__name__}")
    return repr(float(scale))


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal (top-left) attention of [B, Hq, T, E] over [B, Hkv, T, E], Hq a multiple of
    Hkv, differentiable: CausalSelfAttention without a cache."""
    return torch.ops.attnlab.attention(q, k, v, None, None, "top_left", "inv_sqrt_d", None, True, 0, 0.0, 0,
                                       None, None, None, None, None, False)[0]


def cached_attention(cache: KVCacheHandle, layer: int, seqs: List[int], q: torch.Tensor,
                     k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Appends k, v [len(seqs), Hkv, T, E] to each sequence's `layer` (all or none), then
    attends q [len(seqs), Hq, T, E] to everything each holds (bottom-right causal): the
    result in q's dtype. CausalSelfAttention with a cache."""
    torch.ops.attnlab.kv_cache_append(cache, layer, seqs, k, v)
    out, lse = torch.ops.attnlab.kv_cache_attention(cache, layer, seqs, q, None, "bottom_right", "inv_sqrt_d",
                                                    None, None, None, None, 0)
    return out.to(q.dtype)


def cached_positions(cache: KVCacheHandle, layer: int, seqs: List[int], steps: int) -> torch.Tensor:
    """[len(seqs), steps] int64: the positions of each sequence's next `steps` rows."""
    start = torch.ops.attnlab.kv_cache_lengths(cache, layer, seqs)
    return start.unsqueeze(1) + torch.arange(steps)

