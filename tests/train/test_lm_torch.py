"""The GPT of the language-model study (src/train/gpt.hpp) against a plain PyTorch 1.13
implementation of the same model: the same weights and batch (written by lm_torch_dump as
.npy), the loss and every parameter's gradient compared.

Tolerances: float64, the loss to 1e-13 relative and each gradient to 1e-12 of its norm (both
exact up to rounding; 6e-15 seen); float32, the loss to 1e-6 relative and each gradient to 1e-5
of its norm (float32 rounding with other summation orders: the engine's tiles and OpenBLAS
against torch's kernels; 6e-7 seen).

Run by ctest (tests/train/CMakeLists.txt) with ATTNLAB_LM_TORCH_DUMP set to the program; the
entry is skipped, saying why, when torch cannot be imported (python/tests/require_torch.sh).
"""
import json
import math
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (optional in scripts/debian-packages.txt)")

CASES = [
    ("none", "gpt2"),
    ("inv_sqrt_d", "gpt2"),
    ("inv_d", "unit"),
    ("0.894427190999916", "gpt2"),  # fixed(α/√d_k) with α = 2, d_k = 5
    ("qknorm", "unit"),
    ("none", "unit"),
]


def scale_of(name, d_k, log_temp):
    if name == "none":
        return 1.0
    if name == "inv_sqrt_d":
        return 1.0 / math.sqrt(d_k)
    if name == "inv_d":
        return 1.0 / d_k
    if name == "qknorm":
        return torch.exp(log_temp.reshape(()))
    return float(name)


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gamma.reshape(-1) + beta.reshape(-1)


def gpt_loss(cfg, w, tokens, targets):
    """nanoGPT's model without biases, written out: x W products, explicit softmax."""
    B, T = tokens.shape
    D, H, dk = cfg["d_model"], cfg["n_heads"], cfg["d_k"]
    dv = D // H
    eps, qk_eps = cfg["layernorm_eps"], cfg["qk_norm_eps"]
    h = w["tok_emb"][tokens] + w["pos_emb"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(1, cfg["n_layers"] + 1):
        p = f"block{l}"
        a = layer_norm(h, w[f"{p}.ln1.gamma"], w[f"{p}.ln1.beta"], eps)
        q = (a @ w[f"{p}.attn.w_q"]).reshape(B, T, H, dk).transpose(1, 2)
        k = (a @ w[f"{p}.attn.w_k"]).reshape(B, T, H, dk).transpose(1, 2)
        v = (a @ w[f"{p}.attn.w_v"]).reshape(B, T, H, dv).transpose(1, 2)
        if cfg["scale"] == "qknorm":
            q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + qk_eps)
            k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + qk_eps)
        s = (q @ k.transpose(-1, -2)) * scale_of(cfg["scale"], dk, w.get(f"{p}.attn.log_temp"))
        s = s.masked_fill(~causal, float("-inf"))
        e = torch.exp(s - s.max(-1, keepdim=True).values)
        o = (e / e.sum(-1, keepdim=True)) @ v
        h = h + o.transpose(1, 2).reshape(B, T, D) @ w[f"{p}.attn.w_o"]
        m = layer_norm(h, w[f"{p}.ln2.gamma"], w[f"{p}.ln2.beta"], eps)
        u = m @ w[f"{p}.mlp.w_fc"]
        h = h + (0.5 * u * (1 + torch.erf(u / math.sqrt(2)))) @ w[f"{p}.mlp.w_proj"]
    z = layer_norm(h, w["ln_f.gamma"], w["ln_f.beta"], eps)
    logits = (z @ w["tok_emb"].T).reshape(B * T, -1)
    lse = torch.logsumexp(logits, -1)
    return (lse - logits.gather(1, targets.reshape(-1, 1)).reshape(-1)).mean()


def compare(directory, cfg, dtype, loss_rtol, grad_rtol):
    load = lambda name: np.load(os.path.join(directory, name + ".npy"))
    torch_dtype = torch.float32 if dtype == "f32" else torch.float64
    w = {n: torch.tensor(load(n), dtype=torch_dtype, requires_grad=True) for n in cfg["params"]}
    tokens = torch.tensor(load("tokens"), dtype=torch.int64)
    targets = torch.tensor(load("targets"), dtype=torch.int64)
    loss = gpt_loss(cfg, w, tokens, targets)
    loss.backward()
    ours = float(load("loss")[0])
    assert abs(ours - loss.item()) <= loss_rtol * abs(loss.item()), (dtype, ours, loss.item())
    for n in cfg["params"]:
        theirs = w[n].grad.double().numpy()
        mine = load("grad." + n).astype(np.float64)
        err = np.linalg.norm(mine - theirs)
        assert err <= grad_rtol * np.linalg.norm(theirs), (dtype, n, err, np.linalg.norm(theirs))


@pytest.mark.parametrize("scale,init", CASES)
def test_gpt_equals_pytorch(tmp_path, scale, init):
    program = os.environ.get("ATTNLAB_LM_TORCH_DUMP")
    assert program, "ATTNLAB_LM_TORCH_DUMP must name the lm_torch_dump program"
    subprocess.run([program, str(tmp_path), scale, init], check=True)
    with open(tmp_path / "config.json") as f:
        cfg = json.load(f)
    compare(tmp_path / "f64", cfg, "f64", 1e-13, 1e-12)
    compare(tmp_path / "f32", cfg, "f32", 1e-6, 1e-5)
