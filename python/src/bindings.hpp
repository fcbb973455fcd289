#pragma once
// The parts of the _attnlab extension module, one file each.
#include <pybind11/pybind11.h>

#include <tuple>
#include <utility>

namespace attnlab::python {
void bind_attention(pybind11::module_& m);  // bind_attention.cpp
void bind_softmax(pybind11::module_& m);    // bind_softmax.cpp
void bind_lab(pybind11::module_& m);        // bind_lab.cpp
void bind_kv_cache(pybind11::module_& m);   // bind_kv_cache.cpp

// scope.def(name, f, arguments..., text) with the name, arguments and text of a signature of
// signatures.hpp (written from _attnlab.pyi, the one place each signature is written).
template <class Scope, class Signature, class F>
Scope& def(Scope& scope, const Signature& signature, F&& f) {
  return std::apply([&](const char* name, const auto&... extras) -> Scope& {
    return scope.def(name, std::forward<F>(f), extras...);
  }, signature);
}

// cls.def(pybind11::init(...), arguments..., text) with those of the stub's __init__.
template <class Class, class Signature, class Init>
Class& def_init(Class& cls, const Signature& signature, Init&& init) {
  return std::apply([&](const auto&... extras) -> Class& { return cls.def(std::forward<Init>(init), extras...); },
                    signature);
}

// attnlab._results' classes (ForwardResult, BackwardResult): tuples of the items asked for,
// each also a named field.
inline pybind11::object result_class(const char* name) {
  return pybind11::module_::import("attnlab._results").attr(name);
}
}  // namespace attnlab::python
