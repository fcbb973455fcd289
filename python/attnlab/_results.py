"""The results of attention_forward and attention_backward.

Each is a tuple of the items the call asked for, in order, so that `out, lse = ...`,
`out, lse, diag = ...(diagnostics=True)` and `dq, dk, dv = ...` unpack as they always
have; every item is also a named field, and a field not asked for is None.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.floating]
BoolArray = npt.NDArray[np.bool_]


class Diagnostics(TypedDict):
    max_prob: FloatArray
    entropy: FloatArray
    jacobian_fro_sq: FloatArray


class ForwardResult(tuple[Any, ...]):
    """out, lse, then diagnostics and dropout_mask if asked (diagnostics=, return_dropout_mask=)."""

    _diagnostics: Diagnostics | None
    _dropout_mask: BoolArray | None

    def __new__(
        cls,
        out: FloatArray,
        lse: FloatArray,
        diagnostics: Diagnostics | None = None,
        dropout_mask: BoolArray | None = None,
    ) -> ForwardResult:
        asked = tuple(x for x in (diagnostics, dropout_mask) if x is not None)
        items: tuple[Any, ...] = (out, lse, *asked)
        self = super().__new__(cls, items)
        self._diagnostics = diagnostics
        self._dropout_mask = dropout_mask
        return self

    def __getnewargs__(self) -> tuple[Any, ...]:  # pickling rebuilds from the fields
        return (self.out, self.lse, self._diagnostics, self._dropout_mask)

    @property
    def out(self) -> FloatArray:
        """[..., Nq, dv]"""
        return self[0]  # type: ignore[no-any-return]

    @property
    def lse(self) -> FloatArray:
        """[..., Nq]: L = m + log l per query row"""
        return self[1]  # type: ignore[no-any-return]

    @property
    def diagnostics(self) -> Diagnostics | None:
        return self._diagnostics

    @property
    def dropout_mask(self) -> BoolArray | None:
        return self._dropout_mask

    def __repr__(self) -> str:
        names = ["out", "lse"] + [
            n for n, x in (("diagnostics", self._diagnostics), ("dropout_mask", self._dropout_mask)) if x is not None
        ]
        return f"ForwardResult({', '.join(names)})"


class BackwardResult(tuple[Any, ...]):
    """dq, dk, dv, then dsinks when the call had sinks."""

    _dsinks: FloatArray | None

    def __new__(cls, dq: FloatArray, dk: FloatArray, dv: FloatArray, dsinks: FloatArray | None = None) -> BackwardResult:
        items: tuple[Any, ...] = (dq, dk, dv) if dsinks is None else (dq, dk, dv, dsinks)
        self = super().__new__(cls, items)
        self._dsinks = dsinks
        return self

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (self.dq, self.dk, self.dv, self._dsinks)

    @property
    def dq(self) -> FloatArray:
        return self[0]  # type: ignore[no-any-return]

    @property
    def dk(self) -> FloatArray:
        return self[1]  # type: ignore[no-any-return]

    @property
    def dv(self) -> FloatArray:
        return self[2]  # type: ignore[no-any-return]

    @property
    def dsinks(self) -> FloatArray | None:
        return self._dsinks

    def __repr__(self) -> str:
        return "BackwardResult(dq, dk, dv" + (", dsinks)" if self._dsinks is not None else ")")
