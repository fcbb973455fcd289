"""attnlab: scaled dot-product attention over NumPy arrays, with PyTorch's signature.

float32 arrays run on attnlab's float32 engine, float64 arrays on its double-precision
reference. See docs/python.md.
"""

from . import experiments
from ._attnlab import (
    attention_backward,
    attention_forward,
    engine_target,
    log_softmax,
    logsumexp,
    scaled_dot_product_attention,
    softmax,
    softmax_cross_entropy,
    softmax_jacobian,
    softmax_vjp,
)

__version__ = "0.1.0"

__all__ = [
    "attention_backward",
    "attention_forward",
    "engine_target",
    "experiments",
    "log_softmax",
    "logsumexp",
    "scaled_dot_product_attention",
    "softmax",
    "softmax_cross_entropy",
    "softmax_jacobian",
    "softmax_vjp",
]
