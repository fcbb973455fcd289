"""The options of attention, one list for every entry that attends: attnlab.attention_forward
(NumPy), attnlab.torch.attention, attnlab.KVCache.attention, attnlab.torch.KVCache.attention,
attnlab.mpi.ring_attention and attnlab.torch.ring_attention. Each entry takes every option
under the same name with the same default and the same kinds of value, or the tables below
say why not; python/tests/test_options.py checks the names and defaults, and
python/tests/test_option_types.py (and, for the ring under mpirun, mpi_ring_check.py) calls
every entry with a value of each kind and compares its result with attention_forward's."""

from __future__ import annotations

# name: default (the same in every entry that takes it)
ATTENTION_OPTIONS: dict[str, object] = {
    "attn_mask": None,
    "causal": False,
    "scale": None,  # 1/sqrt(head_dim); a number, or a policy name ("inv_d", "ssmax:S", ...)
    "key_lengths": None,
    "check_finite": True,
    "threads": 0,  # OpenMP's default (torch's count for attnlab.torch), clamped
    "window_size": None,
    "softcap": None,
    "alibi_slopes": None,
    "sinks": None,
    "dropout_p": 0.0,
    "cu_seqlens_q": None,
    "cu_seqlens_k": None,
    "diagnostics": False,
}

_CACHE_MASKS = "the cache decides what each row sees from its position (causal, window_size)"
_CACHE = {
    "attn_mask": _CACHE_MASKS,
    "key_lengths": "each sequence's length is the cache's own",
    "check_finite": "q is always checked; the cache's rows were checked as they were appended",
    "dropout_p": "the cache is for inference",
    "cu_seqlens_q": "query_lengths packs the rows of the sequences instead",
    "cu_seqlens_k": "the cache holds each sequence's keys",
    "diagnostics": "the fused decoding step computes no per-row diagnostics",
}
_RING = {
    "attn_mask": "a mask over the whole sequence would have to travel with the keys around the ring",
    "key_lengths": "every rank's shard is full; pad by sharding fewer rows",
    "check_finite": "always checked on every rank",
    "dropout_p": "the ring has no dropout",
    "cu_seqlens_q": "one sequence sharded across ranks",
    "cu_seqlens_k": "one sequence sharded across ranks",
    "diagnostics": "the ring computes no per-row diagnostics",
}

# entry: {option: why the entry does not take it}
NOT_TAKEN: dict[str, dict[str, str]] = {
    "attnlab.attention_forward": {},
    "attnlab.torch.attention": {},
    "attnlab.KVCache.attention": _CACHE,
    "attnlab.torch.KVCache.attention": _CACHE,
    "attnlab.mpi.ring_attention": _RING,
    "attnlab.torch.ring_attention": _RING,
}

# entry: {option: (its default there, why it differs)}
OTHER_DEFAULTS: dict[str, dict[str, tuple[object, str]]] = {
    "attnlab.KVCache.attention": {"causal": ("bottom_right", "the query rows are the cache's last positions")},
    "attnlab.torch.KVCache.attention": {"causal": ("bottom_right", "the query rows are the cache's last positions")},
    "attnlab.torch.attention": {"threads": (None, "None: torch.get_num_threads(), which 0 also is")},
    "attnlab.torch.ring_attention": {"threads": (None, "None: torch.get_num_threads(), which 0 also is")},
}

# option: the kinds of value every entry that takes it accepts, with one meaning ("array": a
# NumPy array for the NumPy entries, a tensor for the torch ones; a list is taken by both)
OPTION_TYPES: dict[str, tuple[str, ...]] = {
    "attn_mask": ("None", "bool array", "float array"),
    "causal": ("bool", "str"),  # False/"none", True/"top_left", "bottom_right"
    "scale": ("None", "float", "int", "str"),  # a number, or a policy name
    "key_lengths": ("None", "list[int]", "int array"),
    "check_finite": ("bool",),
    "threads": ("int",),
    "window_size": ("None", "tuple[int, int]", "list[int]"),
    "softcap": ("None", "float", "int"),
    "alibi_slopes": ("None", "list[float]", "float array"),
    "sinks": ("None", "list[float]", "float array"),
    "dropout_p": ("float", "int"),
    "cu_seqlens_q": ("None", "list[int]", "int array"),
    "cu_seqlens_k": ("None", "list[int]", "int array"),
    "diagnostics": ("bool",),
}

# entry: {(option, kind): why the entry refuses values of that kind}
TYPES_NOT_TAKEN: dict[str, dict[tuple[str, str], str]] = {}

_TOP_LEFT = ("top-left alignment would put the new rows at the sequence's start; they end it "
             "(bottom_right), and the cache refuses top_left, saying so")
# entry: {(option, value): why the entry refuses that value of a kind it takes}
VALUES_NOT_TAKEN: dict[str, dict[tuple[str, object], str]] = {
    "attnlab.KVCache.attention": {("causal", True): _TOP_LEFT, ("causal", "top_left"): _TOP_LEFT},
    "attnlab.torch.KVCache.attention": {("causal", True): _TOP_LEFT, ("causal", "top_left"): _TOP_LEFT},
}
