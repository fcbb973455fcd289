"""Greedy generation with a small randomly initialised GPT, with and without attnlab's KV cache.

Without the cache every step runs the model over the whole sequence; with it, the prompt is
run once (prefill) and each step runs the model on the one new token, its attention reading
the cached K/V of the earlier positions. The tokens are the same.

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


@torch.no_grad()
def generate(model, prompt, steps, cache=None):
    tokens = prompt.clone()
    seqs = [cache.add_sequence() for _ in range(prompt.shape[0])] if cache else None
    logits = model(tokens, 0, cache, seqs)  # prefill (with a cache: its K/V stay there)
    for _ in range(steps):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        if cache is None:
            logits = model(tokens)  # the whole sequence again
        else:
            logits = model(nxt, tokens.shape[1] - 1, cache, seqs)  # the new token only
    return tokens


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--cache-type", default="float32", help="the cache's K/V element type")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = TinyGPT().eval()
    prompt = torch.randint(0, 96, (2, 9))
    plain = generate(model, prompt, args.steps)
    cache = KVCache(layers=2, kv_heads=2, head_dim=16, max_tokens=256, key_type=args.cache_type,
                    value_type=args.cache_type)
    cached = generate(model, prompt, args.steps, cache)
    for row in cached.tolist():
        print(" ".join(map(str, row)))
    same = torch.equal(plain, cached)
    print(f"cache {args.cache_type}: tokens {'identical' if same else 'DIFFERENT'} with and without the cache "
          f"({cache.memory()['used_blocks']} blocks of {cache.cache.block_tokens} positions used)")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
