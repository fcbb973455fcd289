"""The lab's experiments from Python (attnlab/lab.hpp): each measures claims of
CLAIMS.md and returns tables, figures (as data) and verdicts.

    >>> from attnlab import experiments
    >>> [e["name"] for e in experiments.available()]
    >>> r = experiments.run("gradflow", quick=True, dims=[16, 64, 256])
    >>> r.tables["..."]["column"]        # a NumPy array
    >>> [(v["claim"], v["outcome"]) for v in r.verdicts]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _attnlab


@dataclass
class Result:
    """What one experiment run returned."""

    experiment: str
    seed: int
    config: dict[str, str]  # the full configuration run, defaults included
    tables: dict[str, dict[str, np.ndarray]]  # table name -> column name -> float64 array
    verdicts: list[dict[str, Any]]  # claim, outcome ('confirmed', 'refuted', ...), measured, method, plain, ranges, ...
    figures: list[dict[str, str]] = field(default_factory=list)  # name, title, caption (rendered by `attnlab run`)
    notes: list[str] = field(default_factory=list)
    setup: str = ""  # what was measured and on what, in plain words
    seconds: float = 0.0


def available() -> list[dict[str, Any]]:
    """The registered experiments: name, summary, claims, parameters, quick overrides."""
    return _attnlab.lab_experiments()


def describe(name: str) -> dict[str, Any]:
    """One experiment's description (see list()). Raises ValueError for an unknown name."""
    for e in _attnlab.lab_experiments():
        if e["name"] == name:
            return e
    raise ValueError(f"unknown experiment '{name}' (known: {', '.join(e['name'] for e in available())})")


def _as_text(key: str, value: Any) -> str:
    """A Python value as the lab's configuration text: lists comma-separated, bools true/false."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return repr(value.item() if isinstance(value, np.generic) else value)
    if isinstance(value, (tuple, list, np.ndarray)):
        return ",".join(_as_text(key, v) for v in value)
    raise TypeError(f"{key}: cannot pass a {type(value).__name__} to an experiment (use str, number, bool or a list)")


def run(name: str, /, *, seed: int = 0, quick: bool = False, config: dict[str, Any] | None = None,
        **params: Any) -> Result:
    """Run experiment `name` with parameters given as keyword arguments (or in `config`,
    for a parameter whose name clashes with seed/quick/config). quick=True starts from
    the experiment's fast settings (as `attnlab report --quick`). Unknown parameters and
    bad values are ValueError with the lab's message. The GIL is released while it runs."""
    merged: dict[str, str] = dict(describe(name)["quick"]) if quick else {}
    for key, value in {**(config or {}), **params}.items():
        merged[key] = _as_text(key, value)
    r = _attnlab.lab_run(name, merged, seed)
    return Result(**r)
