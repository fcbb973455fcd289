"""A value of each kind attnlab._options.OPTION_TYPES lists, and the check that an entry that
attends accepts every one of them with attention_forward's meaning. Shared by
test_option_types.py (the NumPy and torch entries, the caches) and mpi_ring_check.py (the
ring entries, under mpirun)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from attnlab._options import (ATTENTION_OPTIONS, NOT_TAKEN, OPTION_TYPES, OTHER_DEFAULTS, TYPES_NOT_TAKEN,
                              VALUES_NOT_TAKEN)


@dataclass
class Problem:
    batch: int
    query_heads: int
    rows: int  # query rows = key rows


def values(option: str, kind: str, p: Problem, array: Callable[[Any], Any]) -> list:
    """The values of `kind` the entries are called with for `option`; `array` makes an array of
    the entry's own kind (np.asarray, or torch.as_tensor for the torch entries) from a NumPy one."""
    rng = np.random.default_rng(7)
    slopes = [0.5 / 2**h for h in range(p.query_heads)]
    sink_logits = [0.25 * (-1) ** h * h for h in range(p.query_heads)]
    offsets = [0, 3, p.rows]  # two packed sequences (batch 1)
    mask = rng.random((p.batch, p.query_heads, p.rows, p.rows)) < 0.7
    mask[..., np.arange(p.rows), np.arange(p.rows)] = True  # every row sees a key
    table: dict[tuple[str, str], list] = {
        ("attn_mask", "bool array"): [array(mask)],
        ("attn_mask", "float array"): [array(rng.standard_normal(mask.shape).astype(np.float32))],
        ("causal", "bool"): [True, False],
        ("causal", "str"): ["none", "top_left", "bottom_right"],
        ("scale", "float"): [0.3],
        ("scale", "int"): [1],
        ("scale", "str"): ["inv_d", "none"],
        ("key_lengths", "list[int]"): [[p.rows - 2] * p.batch],
        ("key_lengths", "int array"): [array(np.full(p.batch, p.rows - 2, dtype=np.int64))],
        ("check_finite", "bool"): [True, False],
        ("threads", "int"): [1, 2],
        ("window_size", "tuple[int, int]"): [(2, 1)],
        ("window_size", "list[int]"): [[2, 1]],
        ("softcap", "float"): [5.0],
        ("softcap", "int"): [5],
        ("alibi_slopes", "list[float]"): [slopes],
        ("alibi_slopes", "float array"): [array(np.array(slopes, dtype=np.float32))],
        ("sinks", "list[float]"): [sink_logits],
        ("sinks", "float array"): [array(np.array(sink_logits, dtype=np.float32))],
        ("dropout_p", "float"): [0.0],
        ("dropout_p", "int"): [0],
        ("cu_seqlens_q", "list[int]"): [offsets],
        ("cu_seqlens_q", "int array"): [array(np.array(offsets, dtype=np.int32))],
        ("cu_seqlens_k", "list[int]"): [offsets],
        ("cu_seqlens_k", "int array"): [array(np.array(offsets, dtype=np.int32))],
        ("diagnostics", "bool"): [True, False],
    }
    if kind == "None":
        return [None]
    return table[option, kind]


# Options that take effect only together: the other is passed too, as a list.
COMPANIONS = {"cu_seqlens_q": "cu_seqlens_k", "cu_seqlens_k": "cu_seqlens_q"}


def option_failures(entry: str, p: Problem, array: Callable[[Any], Any], run: Callable[[dict], Any],
                    want: Callable[[dict], np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> list[str]:
    """Calls run(options) with each option the entry takes, one value of each kind at a time;
    returns what went wrong: a kind or value refused that attnlab._options does not say the
    entry refuses (or taken where it says so), or a result other than want(the same options as NumPy
    values, with the entry's own defaults) to rtol/atol. run returns the output (a tuple's
    first item, an array or a tensor)."""
    failures = []
    refused = TYPES_NOT_TAKEN.get(entry, {})
    refused_values = VALUES_NOT_TAKEN.get(entry, {})
    defaults = {o: d for o, (d, _) in OTHER_DEFAULTS.get(entry, {}).items() if d is not None}
    for option, kinds in OPTION_TYPES.items():
        if option in NOT_TAKEN[entry]:
            continue
        assert option in ATTENTION_OPTIONS
        for kind in kinds:
            for value, plain in zip(values(option, kind, p, array), values(option, kind, p, np.asarray)):
                extra = {}
                if option in COMPANIONS and value is not None:
                    extra[COMPANIONS[option]] = values(COMPANIONS[option], "list[int]", p, np.asarray)[0]
                what = f"{entry}({option}={value!r}) ({kind})"
                said = (option, kind) in refused or (isinstance(value, (bool, str)) and (option, value) in refused_values)
                try:
                    got = run({option: value, **extra})
                except (TypeError, ValueError, RuntimeError) as e:
                    if not said:
                        failures.append(f"{what} refused: {type(e).__name__}: {e}")
                    continue
                if said:
                    failures.append(f"{what} taken, but attnlab._options says it is refused")
                    continue
                got = np.asarray(got[0] if isinstance(got, tuple) else got, dtype=np.float64)
                expected = want({**defaults, option: plain, **extra})
                if not np.allclose(got, expected, rtol=rtol, atol=atol):
                    failures.append(f"{what}: differs from attention_forward's by "
                                    f"{float(np.max(np.abs(got - expected))):.2e}")
    return failures
