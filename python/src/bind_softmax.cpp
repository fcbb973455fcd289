// attnlab.softmax, log_softmax, logsumexp, softmax_jacobian, softmax_vjp and
// softmax_cross_entropy: attnlab/softmax.hpp over the last axis of an array,
// batched over its leading axes. Each row is reduced in double (see softmax.hpp).
#include <fmt/format.h>

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "attnlab/error.hpp"
#include "attnlab/softmax.hpp"
#include "bindings.hpp"
#include "signatures.hpp"
#include "ndarray.hpp"

namespace attnlab::python {
namespace {

// Rows of an array: the last axis is the vector, the leading axes are a batch.
template <class T>
struct Rows {
  py::array_t<T> array;  // C-contiguous, native T (a copy only when the input was not)
  int64_t n = 0;         // length of each row
  int64_t count = 0;     // number of rows
  std::vector<py::ssize_t> lead;  // the leading shape
  const T* row(int64_t r) const { return array.data() + r * n; }
};

template <class T>
Rows<T> rows_of(const py::array& x, const char* name) {
  if (x.ndim() < 1) throw Error(fmt::format("{}: a 0-d array; expected at least one axis (the last is the vector)", name));
  Rows<T> r;
  r.array = py::module_::import("numpy").attr("ascontiguousarray")(x, py::dtype::of<T>()).template cast<py::array_t<T>>();
  r.n = r.array.shape(r.array.ndim() - 1);
  r.lead.assign(r.array.shape(), r.array.shape() + r.array.ndim() - 1);
  r.count = 1;
  for (auto s : r.lead) r.count *= s;
  if (r.n == 0 && r.count > 0) throw Error(fmt::format("{}: the last axis is empty", name));
  return r;
}

// "[1, 2]": the leading index of row r, for error messages.
std::string row_index(const std::vector<py::ssize_t>& lead, int64_t r) {
  std::vector<int64_t> idx(lead.size());
  for (size_t a = lead.size(); a-- > 0;) {
    idx[a] = r % lead[a];
    r /= lead[a];
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

// Runs f(r) for each row with the GIL released; an Error names the row.
void for_each_row(const std::vector<py::ssize_t>& lead, int64_t count, const std::function<void(int64_t)>& f) {
  py::gil_scoped_release release;
  int64_t r = 0;
  try {
    for (; r < count; ++r) f(r);
  } catch (const Error& e) {
    if (lead.empty()) throw;
    throw Error(fmt::format("row {}: {}", row_index(lead, r), e.what()));
  }
}

std::vector<py::ssize_t> with_last(std::vector<py::ssize_t> lead, std::initializer_list<py::ssize_t> tail) {
  lead.insert(lead.end(), tail);
  return lead;
}

template <class T>
py::array softmax_t(const py::array& xa) {
  const auto x = rows_of<T>(xa, "x");
  py::array_t<T> s(with_last(x.lead, {x.n}));
  T* out = s.mutable_data();
  for_each_row(x.lead, x.count, [&](int64_t r) {
    softmax<T>(std::span<const T>(x.row(r), x.n), std::span<T>(out + r * x.n, x.n));
  });
  return s;
}

template <class T>
py::array log_softmax_t(const py::array& xa) {
  const auto x = rows_of<T>(xa, "x");
  py::array_t<T> s(with_last(x.lead, {x.n}));
  T* out = s.mutable_data();
  for_each_row(x.lead, x.count, [&](int64_t r) {
    log_softmax<T>(std::span<const T>(x.row(r), x.n), std::span<T>(out + r * x.n, x.n));
  });
  return s;
}

template <class T>
py::array logsumexp_t(const py::array& xa) {
  const auto x = rows_of<T>(xa, "x");
  py::array_t<T> s(x.lead);
  T* out = s.mutable_data();
  for_each_row(x.lead, x.count, [&](int64_t r) { out[r] = logsumexp<T>(std::span<const T>(x.row(r), x.n)); });
  return s;
}

template <class T>
py::array jacobian_t(const py::array& pa) {
  const auto p = rows_of<T>(pa, "probs");
  py::array_t<T> J(with_last(p.lead, {p.n, p.n}));
  T* out = J.mutable_data();
  for_each_row(p.lead, p.count, [&](int64_t r) {
    softmax_jacobian<T>(std::span<const T>(p.row(r), p.n), std::span<T>(out + r * p.n * p.n, p.n * p.n));
  });
  return J;
}

template <class T>
py::array vjp_t(const py::array& pa, const py::array& ga) {
  const auto p = rows_of<T>(pa, "probs");
  const auto g = rows_of<T>(ga, "grad");
  if (p.array.request().shape != g.array.request().shape)
    throw Error(fmt::format("grad: shape ({}) does not match probs' ({})", fmt::join(g.array.request().shape, ", "),
                            fmt::join(p.array.request().shape, ", ")));
  py::array_t<T> gx(with_last(p.lead, {p.n}));
  T* out = gx.mutable_data();
  for_each_row(p.lead, p.count, [&](int64_t r) {
    softmax_vjp<T>(std::span<const T>(p.row(r), p.n), std::span<const T>(g.row(r), p.n),
                   std::span<T>(out + r * p.n, p.n));
  });
  return gx;
}

template <class T>
py::tuple cross_entropy_t(const py::array& xa, const py::array& ta) {
  const auto x = rows_of<T>(xa, "logits");
  py::array_t<T> loss(x.lead), grad(with_last(x.lead, {x.n}));
  T* lp = loss.mutable_data();
  T* gp = grad.mutable_data();
  const char kind = ta.dtype().kind();
  if (kind == 'i' || kind == 'u') {  // class indices, one per row
    const auto t = py::module_::import("numpy").attr("ascontiguousarray")(ta, "int64").cast<py::array_t<int64_t>>();
    const std::vector<py::ssize_t> tshape(t.shape(), t.shape() + t.ndim());
    if (tshape != x.lead)
      throw Error(fmt::format("target: class indices of shape ({}) do not match logits' leading shape ({})",
                              fmt::join(tshape, ", "), fmt::join(x.lead, ", ")));
    const int64_t* tp = t.data();
    for_each_row(x.lead, x.count, [&](int64_t r) {
      lp[r] = softmax_cross_entropy<T>(std::span<const T>(x.row(r), x.n), tp[r], std::span<T>(gp + r * x.n, x.n));
    });
  } else if (kind == 'f') {  // a target distribution per row
    const auto t = rows_of<T>(ta, "target");
    if (t.array.request().shape != x.array.request().shape)
      throw Error(fmt::format("target: distribution of shape ({}) does not match logits' ({})",
                              fmt::join(t.array.request().shape, ", "), fmt::join(x.array.request().shape, ", ")));
    for_each_row(x.lead, x.count, [&](int64_t r) {
      lp[r] = softmax_cross_entropy<T>(std::span<const T>(x.row(r), x.n), std::span<const T>(t.row(r), x.n),
                                       std::span<T>(gp + r * x.n, x.n));
    });
  } else {
    throw py::type_error(fmt::format("target: dtype {} is neither integer (class indices) nor float (a "
                                     "distribution)", dtype_name(ta)));
  }
  return py::make_tuple(std::move(loss), std::move(grad));
}


py::array dispatch1(const py::object& x, const char* name, py::array (*f32)(const py::array&),
                    py::array (*f64)(const py::array&)) {
  const py::array a = as_array(x);
  return float_dtype(a, name) == DType::float32 ? f32(a) : f64(a);
}

void require_match(const py::array& a, DType want, const char* name, const char* first) {
  if (float_dtype(a, name) != want)
    throw py::type_error(fmt::format("{}: dtype {} does not match {}'s {}", name, dtype_name(a), first,
                                     want == DType::float32 ? "float32" : "float64"));
}

}  // namespace

void bind_softmax(py::module_& m) {
  def(m, signatures::softmax(),
      [](const py::object& x) { return dispatch1(x, "x", softmax_t<float>, softmax_t<double>); });
  def(m, signatures::log_softmax(),
      [](const py::object& x) { return dispatch1(x, "x", log_softmax_t<float>, log_softmax_t<double>); });
  def(m, signatures::logsumexp(),
      [](const py::object& x) { return dispatch1(x, "x", logsumexp_t<float>, logsumexp_t<double>); });
  def(m, signatures::softmax_jacobian(),
      [](const py::object& p) { return dispatch1(p, "probs", jacobian_t<float>, jacobian_t<double>); });
  def(m, signatures::softmax_vjp(), [](const py::object& probs, const py::object& grad) {
    const py::array p = as_array(probs), g = as_array(grad);
    const DType t = float_dtype(p, "probs");
    require_match(g, t, "grad", "probs");
    return t == DType::float32 ? vjp_t<float>(p, g) : vjp_t<double>(p, g);
  });
  def(m, signatures::softmax_cross_entropy(), [](const py::object& logits, const py::object& target) {
    const py::array x = as_array(logits), t = as_array(target);
    return float_dtype(x, "logits") == DType::float32 ? cross_entropy_t<float>(x, t) : cross_entropy_t<double>(x, t);
  });
}

}  // namespace attnlab::python
