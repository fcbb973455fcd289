"""Ring attention over MPI, on NumPy shards, with mpi4py (docs/scale-out.md).

    from mpi4py import MPI
    import attnlab.mpi as am
    rows = am.zigzag_rows(N, comm.size, comm.rank)      # this rank's rows of the sequence
    out, lse = am.ring_attention(comm, q[:, :, rows], k[:, :, rows], v[:, :, rows], causal=True)
    dq, dk, dv, dsinks = am.ring_attention_backward(comm, q_s, k_s, v_s, out, lse, grad_out_s, causal=True)

Each rank passes its shard of q [B, Hq, n, d], k [B, Hkv, n, d], v [B, Hkv, n, dv] (the
rows `zigzag_rows` names, in that order) and gets its shard of the one-process result;
lse is [B, Hq, n]. float32 (other float arrays are converted). Options: causal
(True, "top_left" or "bottom_right": one mask here, the queries being the keys' rows;
False or "none"), scale (None = 1/sqrt(d), a number, or a policy name as attnlab.attention
takes), softcap, sinks (one logit per query head; dsinks is then the global gradient on
every rank), window_size ((left, right) around each row's diagonal in the whole sequence, -1 =
unbounded), alibi_slopes ([Hq] or [B * Hq]; not with key padding), threads. Collective:
every rank of comm calls it with the same options.

Needs attnlab built with MPI (the extension _attnlab_mpi) and mpi4py (Debian:
python3-mpi4py); run under mpirun.
"""

from __future__ import annotations

import numpy as np

try:
    from . import _attnlab_mpi  # type: ignore[attr-defined]  # built only with MPI, and without a stub
except ImportError as e:
    raise ImportError("attnlab.mpi needs attnlab built with MPI (Debian: libopenmpi-dev openmpi-bin, then "
                      "configure again)") from e

__all__ = ["ring_attention", "ring_attention_backward", "zigzag_chunks", "zigzag_rows"]


def zigzag_chunks(n: int, ranks: int) -> list[int]:
    """The 2·ranks chunk lengths of a sequence of n rows: rank r holds chunks r and 2·ranks − 1 − r."""
    chunks = 2 * ranks
    return [n // chunks + (1 if c < n % chunks else 0) for c in range(chunks)]


def zigzag_rows(n: int, ranks: int, rank: int) -> np.ndarray:
    """The global rows rank `rank` holds, in its shard's order."""
    lengths = zigzag_chunks(n, ranks)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    first, second = rank, 2 * ranks - 1 - rank
    return np.concatenate([np.arange(starts[first], starts[first + 1]), np.arange(starts[second], starts[second + 1])])


def _shares(n: int, ranks: int) -> list[int]:
    """Each rank's rows in the zigzag layout of n rows."""
    chunks = zigzag_chunks(n, ranks)
    return [chunks[r] + chunks[2 * ranks - 1 - r] for r in range(ranks)]


def _layout(comm, q) -> list[int]:
    """The zigzag chunks of the whole sequence, from every rank's shard length (gathered on every
    rank, so that a shard of the wrong length is the same error on all of them, never a wait)."""
    rows = comm.allgather(int(np.shape(q)[2]))
    n = sum(rows)
    if rows == _shares(n, comm.size):
        return zigzag_chunks(n, comm.size)
    # The sequence length that explains the most shards names the others (the nearest to the
    # shards' sum, then a shard short of rows, the likelier mistake, before one with rows to spare).
    best = max(range(max(0, n - 2 * comm.size), n + 2 * comm.size + 1),
               key=lambda t: (sum(a == b for a, b in zip(rows, _shares(t, comm.size))), -abs(t - n), t))
    want = _shares(best, comm.size)
    bad = [r for r in range(comm.size) if rows[r] != want[r]]
    raise ValueError(f"ring attention: rank {bad[0]}'s q has {rows[bad[0]]} rows, but a zigzag layout of {best} rows "
                     f"(attnlab.mpi.zigzag_rows) gives it {want[bad[0]]} (every rank's rows: {rows})")


def _causal(causal) -> bool:
    """causal as every entry takes it (False/None/"none", True/"top_left", "bottom_right"): the
    ring's queries are its keys' rows, so top-left and bottom-right are the same mask."""
    if causal is None or isinstance(causal, (bool, np.bool_)):
        return bool(causal)
    if causal in ("none", "top_left", "bottom_right"):
        return causal != "none"
    raise (ValueError if isinstance(causal, str) else TypeError)(
        f"causal: {causal!r} is not a bool or one of 'none', 'top_left', 'bottom_right'")


def _scale(scale) -> str:
    return "inv_sqrt_d" if scale is None else scale if isinstance(scale, str) else repr(float(scale))


def _f32(x, name: str) -> np.ndarray:
    """x as C-contiguous float32. A finite value the cast would make ±inf (1e39) is refused by
    name, as attnlab's other entries do: after the cast it would be blamed as an infinite input."""
    a = np.asarray(x)
    if a.dtype.kind != "f" or a.dtype.itemsize <= 4:
        return np.ascontiguousarray(a, dtype=np.float32)
    with np.errstate(over="ignore"):
        cast = np.ascontiguousarray(a, dtype=np.float32)
    overflowed = np.flatnonzero(np.isinf(cast) & np.isfinite(a))
    if overflowed.size:
        at = ", ".join(str(int(i)) for i in np.unravel_index(overflowed[0], a.shape))
        raise ValueError(f"{name}[{at}] = {a.flat[overflowed[0]]!r} does not fit float32 (largest finite "
                         f"{np.finfo(np.float32).max!r}); {overflowed.size} value(s) of {a.dtype} are out of its range")
    return cast


def _window(window_size) -> list[int]:
    return [] if window_size is None else [int(w) for w in window_size]


def _floats(x) -> list[float]:
    return [] if x is None else [float(s) for s in np.ravel(x)]


def ring_attention(comm, q, k, v, *, causal: bool | str = False, scale=None, softcap: float | None = None,
                   sinks=None, window_size=None, alibi_slopes=None, threads: int = 0):
    """This rank's shard of (out [B, Hq, n, dv], lse [B, Hq, n]) of attention over the whole sequence."""
    out, lse = _attnlab_mpi.ring_forward(comm.py2f(), _layout(comm, q), _f32(q, "q"), _f32(k, "k"), _f32(v, "v"),
                                         _causal(causal), _scale(scale), softcap, _floats(sinks), _window(window_size),
                                         _floats(alibi_slopes), int(threads))
    return out, lse[..., 0]


def ring_attention_backward(comm, q, k, v, out, lse, grad_out, *, causal: bool | str = False, scale=None,
                            softcap: float | None = None, sinks=None, window_size=None, alibi_slopes=None,
                            threads: int = 0):
    """This rank's shards of dq, dk, dv, and dsinks ([Hq], the whole gradient; None without sinks)."""
    lse4 = _f32(lse, "lse")[..., None]
    dq, dk, dv, dsinks = _attnlab_mpi.ring_backward(
        comm.py2f(), _layout(comm, q), _f32(q, "q"), _f32(k, "k"), _f32(v, "v"), _f32(out, "out"), lse4,
        _f32(grad_out, "grad_out"), _causal(causal), _scale(scale), softcap, _floats(sinks), _window(window_size),
        _floats(alibi_slopes), int(threads))
    return dq, dk, dv, (np.asarray(dsinks, dtype=np.float32) if sinks is not None else None)
