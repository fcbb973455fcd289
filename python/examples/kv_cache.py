import numpy as np
import attnlab

rng = np.random.default_rng(0)
Hq, Hkv, d, layers = 32, 8, 128, 2  # Llama 3 8B's heads: 4 query heads per K/V head

def rows(*shape):
    return rng.standard_normal(shape, dtype=np.float32)

cache = attnlab.KVCache(layers=layers, kv_heads=Hkv, head_dim=d, max_tokens=8192,
                        key_type="int8", value_type="int8")   # the pool, allocated once
a = cache.add_sequence()
for layer in range(layers):                 # a's prompt, 120 positions, into every layer
    cache.append(layer, a, rows(Hkv, 120, d), rows(Hkv, 120, d))  # k, v [kv_heads, n, head_dim]
b = cache.fork(a, 100)                      # shares a's first 100 positions (every layer holds them)
shared = cache.memory()["shared_blocks"]    # 1: the block of positions 0-127
for layer in range(layers):                 # b's own 16 next positions (copy-on-write)
    cache.append(layer, b, rows(Hkv, 16, d), rows(Hkv, 16, d))

# A decoding step for both: one new position each, appended to both or (on any error) neither.
for layer in range(layers):
    cache.append(layer, [a, b], rows(2, Hkv, 1, d), rows(2, Hkv, 1, d))  # [sequences, kv_heads, n, head_dim]
q = rows(2, Hq, 1, d)                                       # [sequences, Hq, Nq, head_dim]
out = cache.attention(0, [a, b], q)                         # a sees its 121 positions, b its 117
out, lse = cache.attention(0, [a, b], q, return_lse=True)   # a ForwardResult: .out, .lse
# Chunked prefill: a different number of rows per sequence, packed: a's last 1, b's last 16.
packed = cache.attention(0, [a, b], rows(Hq, 17, d), query_lengths=[1, 16])
print(out.shape, lse.shape, packed.shape, shared, cache.memory()["shared_blocks"])
cache.free(b)                               # its blocks return to the pool
