#pragma once
// The parts of the _attnlab extension module, one file each.
#include <pybind11/pybind11.h>

namespace attnlab::python {
void bind_attention(pybind11::module_& m);  // bind_attention.cpp
void bind_softmax(pybind11::module_& m);    // bind_softmax.cpp
void bind_lab(pybind11::module_& m);        // bind_lab.cpp
void bind_kv_cache(pybind11::module_& m);   // bind_kv_cache.cpp
}  // namespace attnlab::python
