"""attnlab.mpi and attnlab.torch.ring_attention under mpirun (tests/mpi/CMakeLists.txt):
every rank's shard of the ring's results equals its rows of the one-process results
(attnlab.attention_forward/backward, attnlab.torch.attention) to 1e-5 of the largest value
(the ring sums the same float32 terms in another order: measured ~1e-7)."""
import sys
from typing import Any

import numpy as np
from mpi4py import MPI

import attnlab
import attnlab.mpi as am
from option_values import Problem, option_failures  # beside this file

comm = MPI.COMM_WORLD
rng = np.random.default_rng(46)  # the same whole problem on every rank
B, Hq, Hkv, N, d = 2, 4, 2, 53, 16
q, k, v, g = (rng.standard_normal(s).astype(np.float32)
              for s in [(B, Hq, N, d), (B, Hkv, N, d), (B, Hkv, N, d), (B, Hq, N, d)])
sinks = [0.5, -1.0, 0.0, 1.0]
rows = am.zigzag_rows(N, comm.size, comm.rank)
failures = []


def close(name, mine, whole):
    err = float(np.max(np.abs(mine - whole), initial=0.0)) / float(np.max(np.abs(whole)))
    worst = comm.allreduce(err, op=MPI.MAX)
    if comm.rank == 0:
        print(f"{name}: relative difference {worst:.1e}")
    if not worst <= 1e-5:
        failures.append(f"{name}: {worst:.1e}")


opts: dict[str, Any] = dict(scale="entropy_invariant", softcap=5.0)
out, lse = attnlab.attention_forward(q, k, v, causal=True, sinks=np.array(sinks, np.float32), **opts)
dq, dk, dv, ds = attnlab.attention_backward(q, k, v, out, lse, g, causal=True, sinks=np.array(sinks, np.float32),
                                            **opts)
o_s, l_s = am.ring_attention(comm, q[:, :, rows], k[:, :, rows], v[:, :, rows], causal=True, sinks=sinks, **opts)
dq_s, dk_s, dv_s, ds_s = am.ring_attention_backward(comm, q[:, :, rows], k[:, :, rows], v[:, :, rows], o_s, l_s,
                                                    g[:, :, rows], causal=True, sinks=sinks, **opts)
for name, mine, whole in [("out", o_s, out[:, :, rows]), ("lse", l_s, lse[:, :, rows]), ("dq", dq_s, dq[:, :, rows]),
                          ("dk", dk_s, dk[:, :, rows]), ("dv", dv_s, dv[:, :, rows]), ("dsinks", ds_s, ds)]:
    close("numpy " + name, mine, whole)

# The window and ALiBi, measured from each row's diagonal in the whole sequence, causal and not.
slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
for causal in (False, True):
    out, lse = attnlab.attention_forward(q, k, v, causal=causal, window_size=(6, 2), alibi_slopes=slopes)
    dq, dk, dv = attnlab.attention_backward(q, k, v, out, lse, g, causal=causal, window_size=(6, 2),
                                            alibi_slopes=slopes)
    placed: dict[str, Any] = dict(causal=causal, window_size=(6, 2), alibi_slopes=slopes)
    o_s, l_s = am.ring_attention(comm, q[:, :, rows], k[:, :, rows], v[:, :, rows], **placed)
    dq_s, dk_s, dv_s, _ = am.ring_attention_backward(comm, q[:, :, rows], k[:, :, rows], v[:, :, rows], o_s, l_s,
                                                     g[:, :, rows], **placed)
    for name, mine, whole in [("out", o_s, out[:, :, rows]), ("lse", l_s, lse[:, :, rows]),
                              ("dq", dq_s, dq[:, :, rows]), ("dk", dk_s, dk[:, :, rows]), ("dv", dv_s, dv[:, :, rows])]:
        close(f"numpy window alibi {'causal ' if causal else ''}{name}", mine, whole)

# Every option the ring takes, with a value of each kind attnlab._options lists (option_values.py).
problem = Problem(batch=B, query_heads=Hq, rows=N)


def whole_rows(options: dict) -> np.ndarray:
    return attnlab.attention_forward(q, k, v, **options).out[:, :, rows]


failures += option_failures("attnlab.mpi.ring_attention", problem, np.asarray,
                            lambda o: am.ring_attention(comm, q[:, :, rows], k[:, :, rows], v[:, :, rows], **o),
                            whole_rows)

# A shard one row short on the last rank: the same error on every rank, naming that rank (the
# layout once came from the shards' sum, so rank 0's right shard was blamed).
last = comm.size - 1
short = rows[:-1] if comm.rank == last else rows
try:
    am.ring_attention(comm, q[:, :, short], k[:, :, short], v[:, :, short])
    failures.append("a short shard was accepted")
except ValueError as e:
    held = len(am.zigzag_rows(N, comm.size, last))
    if f"rank {last}'s q has {held - 1} rows, but a zigzag layout of {N} rows" not in str(e):
        failures.append(f"short shard: {e}")

# float64 beyond float32's range on every rank: refused by name before the ring, not made inf.
huge = q[:, :, rows].astype(np.float64)
huge[0, 1, 0, 2] = 1e39
try:
    am.ring_attention(comm, huge, k[:, :, rows], v[:, :, rows])
    failures.append("1e39 in a float64 q was accepted")
except ValueError as e:
    if not str(e).startswith("q[0, 1, 0, 2] = 1e+39 does not fit float32"):
        failures.append(f"1e39 in q: {e}")

try:
    import torch
except ImportError:
    torch = None  # type: ignore[assignment]


def grad(t):
    """t.grad, which the backward above has set."""
    assert t.grad is not None
    return t.grad


if torch is not None:
    import attnlab.torch as at
    tq, tk, tv = (torch.from_numpy(x.copy()).requires_grad_() for x in (q, k, v))
    ts = torch.tensor(sinks, requires_grad=True)
    whole = at.attention(tq, tk, tv, causal=True, sinks=ts, **opts)
    (whole * torch.from_numpy(g)).sum().backward()
    sq, sk, sv = (torch.from_numpy(x[:, :, rows].copy()).requires_grad_() for x in (q, k, v))
    ss = torch.tensor(sinks, requires_grad=True)
    mine = at.ring_attention(comm, sq, sk, sv, causal=True, sinks=ss, **opts)
    (mine * torch.from_numpy(g[:, :, rows])).sum().backward()
    for name, a, b in [("out", mine, whole[:, :, rows]), ("dq", grad(sq), grad(tq)[:, :, rows]),
                       ("dk", grad(sk), grad(tk)[:, :, rows]), ("dv", grad(sv), grad(tv)[:, :, rows])]:
        close("torch " + name, a.detach().numpy(), b.detach().numpy())
    # dsinks: the ring's is the whole gradient on every rank; the sum of the ranks' losses is the whole loss.
    close("torch dsinks", grad(ss).numpy(), grad(ts).numpy())
    # The window and ALiBi through the torch ring.
    tq, tk, tv = (torch.from_numpy(x.copy()).requires_grad_() for x in (q, k, v))
    whole = at.attention(tq, tk, tv, causal=True, window_size=(6, 2), alibi_slopes=slopes)
    (whole * torch.from_numpy(g)).sum().backward()
    sq, sk, sv = (torch.from_numpy(x[:, :, rows].copy()).requires_grad_() for x in (q, k, v))
    mine = at.ring_attention(comm, sq, sk, sv, causal=True, window_size=(6, 2), alibi_slopes=slopes)
    (mine * torch.from_numpy(g[:, :, rows])).sum().backward()
    for name, a, b in [("out", mine, whole[:, :, rows]), ("dq", grad(sq), grad(tq)[:, :, rows]),
                       ("dk", grad(sk), grad(tk)[:, :, rows]), ("dv", grad(sv), grad(tv)[:, :, rows])]:
        close("torch window alibi " + name, a.detach().numpy(), b.detach().numpy())
    shards = [torch.from_numpy(x[:, :, rows].copy()) for x in (q, k, v)]
    failures += option_failures("attnlab.torch.ring_attention", problem, torch.as_tensor,
                                lambda o: at.ring_attention(comm, *shards, **o).detach(), whole_rows)
elif comm.rank == 0:
    print("torch not installed: attnlab.torch.ring_attention not checked")

if failures:
    sys.exit(f"rank {comm.rank}: " + "; ".join(failures))
if comm.rank == 0:
    print("attnlab.mpi and attnlab.torch.ring_attention equal the one-process results")
