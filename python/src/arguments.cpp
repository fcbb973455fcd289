#include "arguments.hpp"

#include <fmt/format.h>

#include <string>

#include "attnlab/error.hpp"

namespace py = pybind11;

namespace attnlab::python {
namespace {

std::string short_repr(const py::handle& x) {
  std::string r = py::repr(x).cast<std::string>();
  return r.size() > 40 ? r.substr(0, 37) + "..." : r;
}

// x as a Python int, or a TypeError naming `name` and the range it should be in.
py::int_ index_of(const py::handle& x, const char* name, const std::string& range) {
  if (py::isinstance<py::bool_>(x) || !py::hasattr(x, "__index__"))
    throw py::type_error(fmt::format("{}: {} is not an integer (expected an int in {})", name, short_repr(x), range));
  return py::module_::import("operator").attr("index")(x);
}

void require_in(const py::int_& value, const py::int_& lo, const py::int_& hi, const char* name,
                const std::string& range) {
  if (value < lo || value > hi) throw Error(fmt::format("{}: {} is outside {}", name, short_repr(value), range));
}

}  // namespace

double double_arg(const py::handle& x, const char* name, const char* expected) {
  if (py::isinstance<py::bool_>(x) ||
      !(py::isinstance<py::float_>(x) || py::isinstance<py::int_>(x) || py::hasattr(x, "__float__")))
    throw py::type_error(fmt::format("{}: expected {}, got {}", name, expected,
                                     py::str(py::type::of(x)).cast<std::string>()));
  try {
    return py::float_(py::reinterpret_borrow<py::object>(x)).cast<double>();
  } catch (const py::error_already_set& e) {
    throw Error(fmt::format("{}: {} cannot be a double ({})", name, short_repr(x), e.what()));
  }
}

int64_t int_arg(const py::handle& x, const char* name, int64_t lo, int64_t hi) {
  const std::string range = fmt::format("[{}, {}]", lo, hi);
  const py::int_ value = index_of(x, name, range);
  require_in(value, py::int_(lo), py::int_(hi), name, range);
  return value.cast<int64_t>();
}

uint64_t uint64_arg(const py::handle& x, const char* name) {
  const std::string range = fmt::format("[0, {}] (an unsigned 64-bit integer)", UINT64_MAX);
  const py::int_ value = index_of(x, name, range);
  require_in(value, py::int_(0), py::int_(UINT64_MAX), name, range);
  return value.cast<uint64_t>();
}

Causal causal_arg(const py::object& causal) {
  if (causal.is_none()) return Causal::none;
  if (py::isinstance<py::bool_>(causal)) return causal.cast<bool>() ? Causal::top_left : Causal::none;
  if (py::isinstance<py::str>(causal)) return parse_causal(causal.cast<std::string>().c_str());
  throw py::type_error("causal: expected a bool or one of 'none', 'top_left', 'bottom_right'");
}

ScalePolicy scale_arg(const py::object& scale) {
  if (scale.is_none()) return ScalePolicy::inv_sqrt_d();
  if (py::isinstance<py::str>(scale)) return ScalePolicy::parse(scale.cast<std::string>());
  return ScalePolicy::fixed(double_arg(scale, "scale", "None, a number or a policy name"));
}

}  // namespace attnlab::python
