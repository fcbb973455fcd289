"""Greedy generation with a small randomly initialised GPT, with and without attnlab's KV cache.

Without the cache every step runs the model over the whole sequence; with it, the prompt is
run once (prefill) and each step runs the model on the one new token, its attention reading
the cached K/V of the earlier positions. With a float32 cache the tokens are the same. The
other types are lossy by design (their rows are rounded or quantized): greedy tokens may
then part ways at a near tie, so such a cache is compared with the float32 one by its logits
on the float32 cache's tokens, within a tolerance stated per type (TOLERANCE below), and the
tokens that still agree are counted, not required.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/generate_with_cache.py [--cache-type int8]
"""

import argparse

import torch
from torch import nn

from attnlab.torch import CausalSelfAttention, KVCache


class Block(nn.Module):
    def __init__(self, n_embd, n_head, n_kv_head):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, n_kv_head)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, cache=None, seqs=None, layer=0):
        x = x + self.attn(self.ln1(x), cache, seqs, layer)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=96, n_embd=64, n_head=4, n_kv_head=2, n_layer=2, max_len=128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, n_embd), nn.Embedding(max_len, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, n_kv_head) for _ in range(n_layer))
        self.head = nn.Linear(n_embd, vocab)

    def forward(self, tokens, start=0, cache=None, seqs=None):
        """Logits of tokens [B, T] at positions start, start + 1, ..."""
        x = self.tok(tokens) + self.pos(torch.arange(start, start + tokens.shape[1]))
        for layer, block in enumerate(self.blocks):
            x = block(x, cache, seqs, layer)
        return self.head(x)


# max|logits − float32 cache's logits| / max|float32 cache's logits| allowed per type: the
# error of the attention output itself over such a cache on random K/V (docs/python.md,
# "Accuracy"); the residual stream only dilutes it (this model: 5-7 % of it).
TOLERANCE = {"float32": 0.0, "float16": 3.6e-4, "bfloat16": 2.8e-3, "int8": 8.4e-3, "fp8_e4m3": 4.5e-2, "int4": 0.14}


@torch.no_grad()
def generate(model, prompt, steps, cache=None, forced=None):
    """Greedy tokens [B, prompt + steps] and the logits that chose each new one; with
    `forced` (tokens of a run as long), those tokens are fed instead of the argmax."""
    tokens = prompt.clone()
    seqs = [cache.add_sequence() for _ in range(prompt.shape[0])] if cache else None
    logits = model(tokens, 0, cache, seqs)  # prefill (with a cache: its K/V stay there)
    chose = []
    for _ in range(steps):
        chose.append(logits[:, -1])
        nxt = logits[:, -1].argmax(-1, keepdim=True) if forced is None else forced[:, tokens.shape[1]:][:, :1]
        tokens = torch.cat([tokens, nxt], dim=1)
        if cache is None:
            logits = model(tokens)  # the whole sequence again
        else:
            logits = model(nxt, tokens.shape[1] - 1, cache, seqs)  # the new token only
    return tokens, torch.stack(chose, 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--cache-type", default="float32", choices=list(TOLERANCE),
                        help="the cache's K/V element type: float32 must give the same tokens as no cache; the "
                             "lossy types' logits must be within " +
                             ", ".join(f"{t} {tol:g}" for t, tol in TOLERANCE.items() if tol) +
                             " of the float32 cache's (relative to its largest logit)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = TinyGPT().eval()
    prompt = torch.randint(0, 96, (2, 9))

    def new_cache(kind):
        return KVCache(layers=2, kv_heads=2, head_dim=16, max_tokens=256, key_type=kind, value_type=kind)

    plain, _ = generate(model, prompt, args.steps)
    f32 = new_cache("float32")
    cached, f32_logits = generate(model, prompt, args.steps, f32)
    if args.cache_type == "float32":
        for row in cached.tolist():
            print(" ".join(map(str, row)))
        same = torch.equal(plain, cached)
        print(f"cache float32: tokens {'identical' if same else 'DIFFERENT'} with and without the cache "
              f"({f32.memory()['used_blocks']} blocks of {f32.block_tokens} positions used)")
        return 0 if same else 1
    lossy = new_cache(args.cache_type)
    own, _ = generate(model, prompt, args.steps, new_cache(args.cache_type))
    _, logits = generate(model, prompt, args.steps, lossy, forced=cached)
    error = ((logits - f32_logits).abs().max() / f32_logits.abs().max()).item()
    agree = (own[:, prompt.shape[1]:] == cached[:, prompt.shape[1]:]).sum().item()
    within = error <= TOLERANCE[args.cache_type]
    print(f"cache {args.cache_type} (lossy): logits {error:.2e} from the float32 cache's on its tokens, "
          f"{'within' if within else 'BEYOND'} the tolerance {TOLERANCE[args.cache_type]:g}; "
          f"its own greedy tokens agree with float32's at {agree} of {own[:, prompt.shape[1]:].numel()} steps "
          "(a lossy type may tip a near tie)")
    return 0 if within else 1


if __name__ == "__main__":
    raise SystemExit(main())
