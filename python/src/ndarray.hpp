#pragma once
// NumPy arrays as attnlab TensorViews, without copies where NumPy allows it.
//
// attnlab's kernels take rank-4 views [batch, heads, seq, dim] with element
// strides. A NumPy array of rank r ≤ 4 maps onto one by prepending size-1 axes
// (stride 0), and its byte strides become element strides. A copy is made only
// when that is impossible: a dtype other than native float16/float32/float64 (e.g. '>f8';
// bfloat16, which NumPy lacks, is read from uint16 or int16 arrays of its bit patterns),
// a negative stride, or a stride that is not a multiple of the item size.
// Broadcasting (a size-1 axis read as size n) is a zero stride, never a copy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "attnlab/float16.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::python {

namespace py = pybind11;

enum class DType { float32, float64, float16, bfloat16 };
const char* to_string(DType t);  // "float32", "float64", "float16", "bfloat16"

// np.asarray(obj) (lists and scalars become arrays; arrays pass through untouched).
py::array as_array(py::handle obj);

// `a` cast to the floating `dtype` (NumPy's astype). A finite value the cast would turn into
// ±inf (1e39 to float32) is a ValueError naming `name`, the index and the value: after the
// cast it could only be reported as an infinite input the caller never wrote.
py::array cast_to_float(const py::array& a, const py::dtype& dtype, const char* name);

// float16, float32 or float64 (either byte order); with `bfloat16`, uint16 or int16 arrays
// of bfloat16 bit patterns (and nothing else). Anything else is a TypeError naming `name`.
DType float_dtype(const py::array& a, const char* name, bool bfloat16 = false);
std::string dtype_name(const py::array& a);

// The NumPy dtype an array of T is read as, or written in (bfloat16: uint16).
template <class T>
py::dtype numpy_dtype();

// A 4-D view of `a` read as T. `owner` keeps the memory alive (it is `a` itself
// unless a cast or copy was needed).
template <class T>
struct Operand {
  py::array owner;
  TensorView<const T> view;
  int rank = 0;  // the caller's rank, before padding to 4
};

// Requires a.ndim() ≤ 4 (else ValueError naming `name`); a 0-d array is [1, 1, 1, 1].
template <class T>
Operand<T> operand(py::array a, const char* name);

// Read a size-1 axis of `x` as size `n` (stride 0). Throws ValueError naming
// `name` when the axis is neither 1 nor n.
template <class T>
void broadcast_axis(TensorView<const T>& x, int axis, int64_t n, const char* name, const char* axis_name);

// A per-row array such as lse, [..., Nq] in NumPy, read as the 4-D view
// [B, H, Nq, 1] the kernels take. Also accepts [..., Nq, 1].
template <class T>
Operand<T> row_operand(py::array a, int query_rank, const char* name);

// A new C-contiguous array with NumPy shape `py_shape`, viewed as the 4-D
// `shape4` (same elements in the same order, e.g. [B, H, Nq] and [B, H, Nq, 1]).
template <class T>
struct Output {
  py::array array;  // of numpy_dtype<T>()
  TensorView<T> view;
};
template <class T>
Output<T> make_output(const Shape& shape4, const std::vector<py::ssize_t>& py_shape);

// The last `rank` entries of a 4-D shape, as NumPy wants them.
std::vector<py::ssize_t> trailing_shape(const Shape& shape4, int rank);

}  // namespace attnlab::python
