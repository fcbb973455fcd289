"""attnlab: scaled dot-product attention over NumPy arrays, with PyTorch's signature.

float32 arrays run on attnlab's float32 engine, float64 arrays on its double-precision
reference. For torch tensors, differentiable: `import attnlab.torch` (this package never
imports torch itself). See docs/python.md.
"""

from . import experiments
from ._attnlab import (
    KVCache,
    __version__,  # CMakeLists.txt's project VERSION, compiled into the extension
    attention_backward,
    attention_forward,
    engine_target,
    log_softmax,
    logsumexp,
    release_cached_memory,
    scaled_dot_product_attention,
    softmax,
    softmax_cross_entropy,
    softmax_jacobian,
    softmax_vjp,
)

__all__ = [
    "KVCache",
    "attention_backward",
    "attention_forward",
    "engine_target",
    "experiments",
    "log_softmax",
    "logsumexp",
    "release_cached_memory",
    "scaled_dot_product_attention",
    "softmax",
    "softmax_cross_entropy",
    "softmax_jacobian",
    "softmax_vjp",
]
