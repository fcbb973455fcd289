#pragma once
// Everything in attnlab's public API: attention (forward and backward, every
// element type), its options, the engine and the reference by name, the softmax
// maths and the scale policies, the KV cache, the decoding step's tuning.
#include "attnlab/attention.hpp"
#include "attnlab/attention_options.hpp"
#include "attnlab/decode_tuning.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/error.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/kv_cache.hpp"
#include "attnlab/reference.hpp"
#include "attnlab/scale.hpp"
#include "attnlab/softmax.hpp"
#include "attnlab/tensor.hpp"
#include "attnlab/version.hpp"
