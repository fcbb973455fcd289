// The _attnlab extension module; python/attnlab/__init__.py re-exports it.
#include <pybind11/pybind11.h>

#include "attnlab/attention.hpp"
#include "attnlab/engine.hpp"
#include "attnlab/error.hpp"
#include "attnlab/version.hpp"
#include "bindings.hpp"
#include "signatures.hpp"

PYBIND11_MODULE(_attnlab, m) {
  namespace py = pybind11;
  m.doc() = attnlab::python::signatures::module_doc;
  // attnlab::Error is bad input: ValueError, with the library's message unchanged;
  // attnlab::OutOfMemory (a buffer too large for this machine) is MemoryError.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const attnlab::OutOfMemory& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const attnlab::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  attnlab::python::bind_attention(m);
  attnlab::python::bind_softmax(m);
  attnlab::python::bind_lab(m);
  attnlab::python::bind_kv_cache(m);
  m.attr("__version__") = ATTNLAB_VERSION_STRING;  // attnlab/version.hpp: CMakeLists.txt's project VERSION
  attnlab::python::def(m, attnlab::python::signatures::engine_target(), &attnlab::engine::target_name);
  attnlab::python::def(m, attnlab::python::signatures::release_cached_memory(),
                       &attnlab::engine::release_cached_memory);
}
