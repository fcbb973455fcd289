#pragma once
// The parts of the _attnlab extension module, one file each.
#include <pybind11/pybind11.h>

namespace attnlab::python {
void bind_attention(pybind11::module_& m);  // bind_attention.cpp
void bind_softmax(pybind11::module_& m);    // bind_softmax.cpp
void bind_lab(pybind11::module_& m);        // bind_lab.cpp
void bind_kv_cache(pybind11::module_& m);   // bind_kv_cache.cpp

// attnlab._results' classes (ForwardResult, BackwardResult): tuples of the items asked for,
// each also a named field.
inline pybind11::object result_class(const char* name) {
  return pybind11::module_::import("attnlab._results").attr(name);
}
}  // namespace attnlab::python
