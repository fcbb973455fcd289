#pragma once
// Everything in attnlab's public API.
#include "attnlab/attention_options.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/error.hpp"
#include "attnlab/reference.hpp"
#include "attnlab/scale.hpp"
#include "attnlab/softmax.hpp"
#include "attnlab/tensor.hpp"
#include "attnlab/train.hpp"
