"""TorchScript sees attnlab.torch: a two-layer nanoGPT-style model whose attention is
attnlab's (CausalSelfAttention: grouped-query heads, rotary embeddings), scripted and traced,
gives eager mode's outputs and gradients in a training step, and eager mode's logits and
cache contents when decoding against attnlab's KV cache."""

import copy
from typing import List, Optional

import pytest

pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import torch  # noqa: E402
from torch import nn  # noqa: E402

import attnlab.torch as at  # noqa: E402
from attnlab.torch import _ops  # noqa: E402
from attnlab.torch._ops import KVCacheHandle  # noqa: E402

VOCAB, N_EMBD, N_HEAD, N_KV_HEAD, N_LAYER = 50, 128, 4, 2, 2  # head_dim 32: the cache's fused decoding step


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(N_EMBD), nn.LayerNorm(N_EMBD)
        self.attn = at.CausalSelfAttention(N_EMBD, N_HEAD, N_KV_HEAD, rope="half_split")
        self.mlp = nn.Sequential(nn.Linear(N_EMBD, 4 * N_EMBD), nn.GELU(), nn.Linear(4 * N_EMBD, N_EMBD))

    def forward(self, x: torch.Tensor, cache: Optional[KVCacheHandle] = None,
                seqs: Optional[List[int]] = None, layer: int = 0) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache, seqs, layer)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.blocks = nn.ModuleList([Block() for _ in range(N_LAYER)])
        self.ln_f, self.lm_head = nn.LayerNorm(N_EMBD), nn.Linear(N_EMBD, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor, cache: Optional[KVCacheHandle] = None,
                seqs: Optional[List[int]] = None) -> torch.Tensor:
        x = self.wte(idx)
        for layer, block in enumerate(self.blocks):
            x = block(x, cache, seqs, layer)
        return self.lm_head(self.ln_f(x))


class Decoder(nn.Module):
    """The model decoding against a cache it holds, as torch.jit.trace needs (the tracer
    reaches the cache's handle through the module's attribute)."""

    def __init__(self, model: GPT, cache: at.KVCache, seqs: List[int]):
        super().__init__()
        self.model, self.cache, self.seqs = model, cache.handle, seqs

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx, self.cache, self.seqs)


def training_step(model, idx, targets):
    logits = model(idx)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    return logits.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # shape checks: constants of the trace
def test_a_scripted_and_a_traced_training_step_equal_eager():
    torch.manual_seed(0)
    eager = GPT()
    idx, targets = torch.randint(0, VOCAB, (2, 24)), torch.randint(0, VOCAB, (2, 24))
    want_logits, want_grads = training_step(eager, idx, targets)
    scripted = torch.jit.script(copy.deepcopy(eager))
    eager.zero_grad()
    traced = torch.jit.trace(copy.deepcopy(eager), idx)
    assert "attnlab::attention" in str(scripted.inlined_graph) and "attnlab::attention" in str(traced.inlined_graph)
    idx2 = torch.randint(0, VOCAB, (2, 24))  # the trace computes on new inputs, not a frozen output
    for compiled in (scripted, traced):
        compiled.zero_grad()
        logits, grads = training_step(compiled, idx, targets)
        assert torch.equal(logits, want_logits)
        assert grads.keys() == want_grads.keys()
        for name, g in grads.items():
            assert torch.equal(g, want_grads[name]), name
        assert torch.equal(compiled(idx2), eager(idx2))


def new_cache():
    cache = at.KVCache(N_LAYER, N_KV_HEAD, N_EMBD // N_HEAD, 256, "float16", "int8", block_tokens=16)
    return cache, [cache.add_sequence(), cache.add_sequence()]


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_scripted_and_traced_decoding_equal_eager_and_append():
    torch.manual_seed(1)
    model = GPT().eval()
    prompt = torch.randint(0, VOCAB, (2, 7))
    caches = {name: new_cache() for name in ("eager", "scripted", "traced")}
    scripted = torch.jit.script(model)
    with torch.no_grad():
        for name, (cache, seqs) in caches.items():  # the same prefill into each
            model(prompt, cache.handle, seqs)
        token = torch.randint(0, VOCAB, (2, 1))
        # Tracing runs the step once, against the traced cache; the others take that step too.
        traced = torch.jit.trace(Decoder(model, *caches["traced"]), token, check_trace=False)
        eager_cache, eager_seqs = caches["eager"]
        script_cache, script_seqs = caches["scripted"]
        assert torch.equal(scripted(token, script_cache.handle, script_seqs),
                           model(token, eager_cache.handle, eager_seqs))
        for _ in range(5):
            want = model(token, eager_cache.handle, eager_seqs)
            assert torch.equal(scripted(token, script_cache.handle, script_seqs), want)
            assert torch.equal(traced(token), want)
            token = want[:, -1:].argmax(-1)
    assert "kv_cache_append" in str(traced.inlined_graph)
    for name, (cache, seqs) in caches.items():  # every step appended, in every layer
        assert [cache.length(s, layer) for s in seqs for layer in range(N_LAYER)] == [7 + 1 + 5] * 4, name
    for layer in range(N_LAYER):
        for i, e in enumerate(eager_seqs):
            want_k, want_v = eager_cache.gather(layer, e)
            for name in ("scripted", "traced"):
                k, v = caches[name][0].gather(layer, caches[name][1][i])
                assert torch.equal(k, want_k) and torch.equal(v, want_v), (name, layer)


def test_a_saved_and_loaded_decoding_module_continues_as_eager(tmp_path):
    # torch.jit.save writes the cache the module holds (its configuration, sequence ids and
    # contents); torch.jit.load gives a module that decodes on from there as eager mode does.
    torch.manual_seed(2)
    model = GPT().eval()
    prompt = torch.randint(0, VOCAB, (2, 7))
    (eager_cache, eager_seqs), (saved_cache, saved_seqs) = new_cache(), new_cache()
    with torch.no_grad():
        for cache, seqs in ((eager_cache, eager_seqs), (saved_cache, saved_seqs)):
            model(prompt, cache.handle, seqs)
            cache.free(cache.add_sequence())  # an id no longer live, and a fork: ids 0, 1, 3 remain
            cache.fork(seqs[0], 5)
        path = tmp_path / "decoder.pt"
        torch.jit.save(torch.jit.script(Decoder(model, saved_cache, saved_seqs)), str(path))
        loaded = torch.jit.load(str(path))
        token = torch.randint(0, VOCAB, (2, 1))
        for _ in range(4):
            want = model(token, eager_cache.handle, eager_seqs)
            assert torch.equal(loaded(token), want)
            token = want[:, -1:].argmax(-1)
    cache = loaded.cache
    assert cache.sequences() == eager_cache.handle.sequences() == [0, 1, 3]
    for seq in (0, 1, 3):
        for layer in range(N_LAYER):
            assert cache.length(seq, layer) == eager_cache.length(seq, layer) == (11 if seq < 3 else 5)
            (k, v), (want_k, want_v) = cache.gather(layer, seq), eager_cache.gather(layer, seq)
            assert torch.equal(k, want_k) and torch.equal(v, want_v), (seq, layer)
    assert cache.add_sequence() == eager_cache.add_sequence() == 4


@pytest.mark.parametrize("cache_type", ["float32", "bfloat16", "float16", "int8", "int4", "fp8_e4m3"])
def test_a_saved_cache_loads_with_the_same_contents(cache_type):
    # The saved state is the dequantized rows; loading quantizes them again.
    torch.manual_seed(3)
    scales = {"key_scales": [0.5, 2.0], "value_scales": [1.0]} if cache_type == "fp8_e4m3" else {}
    cache = at.KVCache(2, 2, 64, 512, cache_type, cache_type, block_tokens=16, **scales)
    seqs = [cache.add_sequence() for _ in range(2)]
    cache.append(0, seqs, torch.randn(2, 2, 37, 64), torch.randn(2, 2, 37, 64))
    cache.append(1, seqs, 5 * torch.randn(2, 2, 20, 64), torch.randn(2, 2, 20, 64))
    loaded = copy.deepcopy(cache.handle)
    for layer in range(2):
        for seq in seqs:
            for got, want in zip(loaded.gather(layer, seq), cache.gather(layer, seq)):
                assert torch.equal(got, want), (layer, seq)


def test_a_saved_cache_keeps_its_rotation_and_centring():
    torch.manual_seed(4)
    cache = at.KVCache(1, 2, 64, 512, "int8", "int8", key_rotation="hadamard", value_rotation="hadamard",
                       center_keys=True)
    seq = cache.add_sequence()
    k = torch.randn(1, 2, 50, 64)
    k[..., 5] += 20
    cache.append(0, [seq], k, torch.randn(1, 2, 50, 64))
    loaded = copy.deepcopy(cache.handle)
    q = torch.randn(1, 4, 1, 64)
    args = (0, [seq], q, None, _ops.causal_name("bottom_right"), _ops.scale_name(None), None, None, None, None, 0)
    want, _ = torch.ops.attnlab.kv_cache_attention(cache.handle, *args)
    got, _ = torch.ops.attnlab.kv_cache_attention(loaded, *args)
    # Loading quantizes the saved (dequantized) rows again, with means from all of them: close, not equal.
    assert torch.allclose(got, want, atol=0.05), (got - want).abs().max()
    gk, _ = loaded.gather(0, seq)
    assert torch.allclose(gk, k[0], atol=0.2)
    with pytest.raises(ValueError, match="unknown rotation"):
        at.KVCache(1, 2, 64, 512, key_rotation="walsh")
