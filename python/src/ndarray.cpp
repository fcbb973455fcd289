#include "ndarray.hpp"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <string>
#include <type_traits>
#include <vector>

#include "attnlab/error.hpp"

namespace attnlab::python {

py::array as_array(py::handle obj) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  return py::module_::import("numpy").attr("asarray")(obj);
}

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

py::array cast_to_float(const py::array& a, const py::dtype& dtype, const char* name) {
  using namespace pybind11::literals;
  const py::module_ np = py::module_::import("numpy");
  const bool narrows = a.dtype().kind() == 'f' && dtype.kind() == 'f' && a.itemsize() > dtype.itemsize();
  if (!narrows) return a.attr("astype")(dtype);
  py::object quiet = np.attr("errstate")("over"_a = "ignore");  // the overflow is reported below, by name
  quiet.attr("__enter__")();
  const py::array cast = a.attr("astype")(dtype);
  quiet.attr("__exit__")(py::none(), py::none(), py::none());
  const py::array overflowed = np.attr("flatnonzero")(np.attr("isinf")(cast).attr("__and__")(np.attr("isfinite")(a)));
  if (overflowed.size() == 0) return cast;
  const py::object first = overflowed[py::int_(0)];
  const py::tuple index = np.attr("unravel_index")(first, a.attr("shape"));
  std::vector<std::string> at;
  for (const py::handle i : index) at.push_back(py::str(i).cast<std::string>());
  throw Error(fmt::format("{}[{}] = {} does not fit {} (largest finite {}); {} value(s) of {} are out of its range",
                          name, fmt::join(at, ", "), py::repr(a.attr("flat")[first]).cast<std::string>(),
                          py::str(dtype.attr("name")).cast<std::string>(),
                          py::repr(np.attr("finfo")(dtype).attr("max")).cast<std::string>(), overflowed.size(),
                          dtype_name(a)));
}

const char* to_string(DType t) {
  switch (t) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
  }
  return "?";
}

DType float_dtype(const py::array& a, const char* name, bool bfloat16) {
  const char kind = a.dtype().kind();
  if (bfloat16) {
    if ((kind == 'u' || kind == 'i') && a.itemsize() == 2) return DType::bfloat16;
    throw py::type_error(fmt::format("{}: dtype {}; with dtype=\"bfloat16\" the arrays hold bfloat16 bit patterns as "
                                     "uint16 (or int16)", name, dtype_name(a)));
  }
  if (kind == 'f' && a.itemsize() == 2) return DType::float16;
  if (kind == 'f' && a.itemsize() == 4) return DType::float32;
  if (kind == 'f' && a.itemsize() == 8) return DType::float64;
  throw py::type_error(fmt::format("{}: dtype {} is not supported (use float16, float32 or float64; bfloat16 as "
                                   "uint16 bit patterns with dtype=\"bfloat16\")", name, dtype_name(a)));
}

template <class T>
py::dtype numpy_dtype() {
  if constexpr (std::is_same_v<T, float16>) {
    return py::dtype("float16");
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return py::dtype("uint16");
  } else {
    return py::dtype::of<T>();
  }
}

namespace {

// `a` as native-endian T, C-contiguous only if its strides cannot be expressed in elements.
template <class T>
py::array readable_as(py::array a, const char* name) {
  const auto want = numpy_dtype<T>();
  // bfloat16 from int16: the same bits, viewed (native byte order only; else astype copies).
  if (std::is_same_v<T, bfloat16> && a.dtype().equal(py::dtype("int16"))) a = a.attr("view")(want);
  if (!a.dtype().equal(want)) a = cast_to_float(a, want, name);
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    const py::ssize_t s = a.strides(i);
    if (a.shape(i) > 1 && (s < 0 || s % static_cast<py::ssize_t>(sizeof(T)) != 0))
      return py::module_::import("numpy").attr("ascontiguousarray")(a);
  }
  return a;
}

// Shape and element strides of `a` (rank ≤ 4) right-aligned into 4 axes.
template <class T>
void layout4(const py::array& a, int first_axis, Shape& shape, Shape& strides) {
  for (int i = 0; i < 4; ++i) shape[i] = 1, strides[i] = 0;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    const int axis = first_axis + static_cast<int>(i);
    shape[axis] = a.shape(i);
    // A size-1 axis is never stepped along; its NumPy stride may be anything.
    strides[axis] = a.shape(i) > 1 ? a.strides(i) / static_cast<py::ssize_t>(sizeof(T)) : 0;
  }
}

}  // namespace

template <class T>
Operand<T> operand(py::array a, const char* name) {
  if (a.ndim() > 4)
    throw Error(fmt::format("{}: {} dimensions; attnlab takes at most 4 ([L, E], [H, L, E] or [B, H, L, E])", name,
                            a.ndim()));
  Operand<T> r;
  r.owner = readable_as<T>(std::move(a), name);
  r.rank = static_cast<int>(r.owner.ndim());
  Shape shape, strides;
  layout4<T>(r.owner, 4 - r.rank, shape, strides);
  r.view = TensorView<const T>(static_cast<const T*>(r.owner.data()), shape, strides);
  return r;
}

template <class T>
Operand<T> row_operand(py::array a, int query_rank, const char* name) {
  const bool with_unit = a.ndim() == query_rank && a.ndim() > 0 && a.shape(a.ndim() - 1) == 1;
  if (a.ndim() != query_rank - 1 && !with_unit)
    throw Error(fmt::format("{}: {} dimensions; expected {} (query's shape without its last axis)", name, a.ndim(),
                            query_rank - 1));
  Operand<T> r;
  r.owner = readable_as<T>(std::move(a), name);
  r.rank = static_cast<int>(r.owner.ndim());
  const int rows_rank = with_unit ? r.rank - 1 : r.rank;  // axes before the unit axis
  Shape shape, strides;
  layout4<T>(r.owner, 3 - rows_rank, shape, strides);
  shape[3] = 1;
  strides[3] = 0;
  r.view = TensorView<const T>(static_cast<const T*>(r.owner.data()), shape, strides);
  return r;
}

template <class T>
void broadcast_axis(TensorView<const T>& x, int axis, int64_t n, const char* name, const char* axis_name) {
  if (x.shape()[axis] == n) return;
  if (x.shape()[axis] != 1)
    throw Error(fmt::format("{}: {} {} does not broadcast to {}", name, axis_name, x.shape()[axis], n));
  Shape shape = x.shape(), strides = x.strides();
  shape[axis] = n;
  strides[axis] = 0;
  x = TensorView<const T>(x.data(), shape, strides);
}

template <class T>
Output<T> make_output(const Shape& shape4, const std::vector<py::ssize_t>& py_shape) {
  Output<T> r{py::array(numpy_dtype<T>(), py_shape), {}};
  r.view = TensorView<T>(static_cast<T*>(r.array.mutable_data()), shape4);
  return r;
}

std::vector<py::ssize_t> trailing_shape(const Shape& shape4, int rank) {
  return std::vector<py::ssize_t>(shape4.end() - rank, shape4.end());
}

#define ATTNLAB_NDARRAY(T)                                                                          \
  template Operand<T> operand<T>(py::array, const char*);                                          \
  template Operand<T> row_operand<T>(py::array, int, const char*);                                 \
  template void broadcast_axis<T>(TensorView<const T>&, int, int64_t, const char*, const char*);   \
  template Output<T> make_output<T>(const Shape&, const std::vector<py::ssize_t>&);              \
  template py::dtype numpy_dtype<T>();
ATTNLAB_NDARRAY(float)
ATTNLAB_NDARRAY(double)
ATTNLAB_NDARRAY(uint8_t)
ATTNLAB_NDARRAY(float16)
ATTNLAB_NDARRAY(bfloat16)
#undef ATTNLAB_NDARRAY

}  // namespace attnlab::python
