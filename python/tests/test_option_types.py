"""Every entry that attends accepts each option with the kinds of value attnlab._options lists
(scale a number or a policy name, window_size a tuple or list of two ints, ...) and gives
them attention_forward's meaning, or attnlab._options says why it refuses a kind. The ring
entries are checked under mpirun, by mpi_ring_check.py, with the same values."""

import numpy as np
import pytest

import attnlab
from attnlab._options import NOT_TAKEN, OPTION_TYPES, TYPES_NOT_TAKEN, VALUES_NOT_TAKEN
from option_values import Problem, option_failures, values

P = Problem(batch=1, query_heads=4, rows=8)
KV_HEADS, HEAD_DIM = 2, 32
rng = np.random.default_rng(11)
Q = rng.standard_normal((P.batch, P.query_heads, P.rows, HEAD_DIM)).astype(np.float32)
K, V = (rng.standard_normal((P.batch, KV_HEADS, P.rows, HEAD_DIM)).astype(np.float32) for _ in range(2))


def reference(options: dict) -> np.ndarray:
    return attnlab.attention_forward(Q, K, V, **options).out


def filled(cache_class, to_array):
    """A cache holding K and V as one sequence's rows (the queries are its last rows)."""
    cache = cache_class(1, KV_HEADS, HEAD_DIM, 64)
    seqs = [cache.add_sequence() for _ in range(P.batch)]
    cache.append(0, seqs, to_array(K), to_array(V))
    return cache, seqs


def numpy_entries():
    cache, seqs = filled(attnlab.KVCache, np.asarray)
    return {
        "attnlab.attention_forward": lambda o: attnlab.attention_forward(Q, K, V, **o),
        "attnlab.KVCache.attention": lambda o: cache.attention(0, seqs, Q, **o),
    }


def torch_entries():
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    import attnlab.torch as at
    q, k, v = (torch.from_numpy(x) for x in (Q, K, V))
    cache, seqs = filled(at.KVCache, torch.from_numpy)
    return {
        "attnlab.torch.attention": lambda o: at.attention(q, k, v, **o),
        "attnlab.torch.KVCache.attention": lambda o: cache.attention(0, seqs, q, **o),
    }


def as_tensor(x):
    import torch
    return torch.as_tensor(x)


@pytest.mark.parametrize("entry", ["attnlab.attention_forward", "attnlab.KVCache.attention"])
def test_a_numpy_entry_takes_every_kind_of_each_option(entry):
    assert option_failures(entry, P, np.asarray, numpy_entries()[entry], reference) == []


@pytest.mark.parametrize("entry", ["attnlab.torch.attention", "attnlab.torch.KVCache.attention"])
def test_a_torch_entry_takes_every_kind_of_each_option(entry):
    assert option_failures(entry, P, as_tensor, torch_entries()[entry], reference) == []


def test_every_kind_has_values_and_every_refusal_names_a_value_the_check_passes():
    for option, kinds in OPTION_TYPES.items():
        for kind in kinds:
            assert values(option, kind, P, np.asarray), (option, kind)
    for entry, refused in TYPES_NOT_TAKEN.items():
        assert entry in NOT_TAKEN
        for option, kind in refused:
            assert kind in OPTION_TYPES[option] and option not in NOT_TAKEN[entry], (entry, option, kind)
    for entry, refused_values in VALUES_NOT_TAKEN.items():
        assert entry in NOT_TAKEN
        for option, value in refused_values:
            passed = [v for kind in OPTION_TYPES[option] for v in values(option, kind, P, np.asarray)]
            assert value in passed and option not in NOT_TAKEN[entry], (entry, option, value)


def test_the_check_fails_when_an_entry_refuses_a_kind_or_changes_its_meaning():
    def strict(options):  # refuses a list for window_size, as the others take it
        if isinstance(options.get("window_size"), list):
            raise TypeError("window_size: expected a tuple")
        return reference(options)

    def wrong(options):  # reads causal="none" as causal, as bool("none") would
        return reference({**options, "causal": bool(options.get("causal"))})

    assert any("window_size=[2, 1]" in f for f in option_failures("attnlab.attention_forward", P, np.asarray,
                                                                  strict, reference))
    assert any("causal='none'" in f for f in option_failures("attnlab.attention_forward", P, np.asarray,
                                                             wrong, reference))
