#pragma once
// Python scalars as the extension's functions take them, each checked with an error that
// names the argument and its range. pybind11's own conversions fail with "Unable to cast
// Python instance to C++ type" or a bare OverflowError, naming neither.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "attnlab/attention_options.hpp"

namespace attnlab::python {

// A real number (Python or NumPy; through float(), so 10**400 is an error naming `name`).
// `expected` says what the argument is, for the TypeError of a non-number.
double double_arg(const pybind11::handle& x, const char* name, const char* expected);

// An integer in [lo, hi], compared as a Python int (so 2**63 and -1 are refused before any
// C++ conversion could wrap or saturate them); bools and floats are refused.
int64_t int_arg(const pybind11::handle& x, const char* name, int64_t lo, int64_t hi);

// The same for an unsigned 64-bit integer in [0, 2^64 - 1] (seeds).
uint64_t uint64_arg(const pybind11::handle& x, const char* name);

// causal as every entry takes it: None or False ("none"), True ("top_left"), or a name.
Causal causal_arg(const pybind11::object& causal);

// scale as every entry takes it: None (1/sqrt(d)), a number, or a policy name.
ScalePolicy scale_arg(const pybind11::object& scale);

}  // namespace attnlab::python
