#pragma once
// torch tensors as attnlab's views, in place: a strided CPU tensor's element strides are
// exactly a TensorView's (zero strides are broadcasting), and torch's Half and BFloat16
// hold the same bits as attnlab::float16 and attnlab::bfloat16. attnlab::Error becomes
// c10::ValueError (Python's ValueError), as the NumPy bindings raise it.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/error.hpp"
#include "attnlab/float16.hpp"
#include "attnlab/tensor.hpp"

namespace attnlab::torch_ops {

// The torch dtype of attnlab's element type E.
template <class E>
constexpr c10::ScalarType scalar_type() {
  if constexpr (std::is_same_v<E, float>) return at::kFloat;
  else if constexpr (std::is_same_v<E, double>) return at::kDouble;
  else if constexpr (std::is_same_v<E, float16>) return at::kHalf;
  else return at::kBFloat16;
}

// A tensor of at most 4 axes as the 4-D view the kernels take (leading axes of size 1,
// stride 0), read as E (the caller has checked the dtype). A negative view (torch's
// lazy negation bit) is resolved first: its memory holds -x.
template <class E>
ConstView<E> view4(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() <= 4, name, ": ", t.dim(), " dimensions; at most 4");
  TORCH_CHECK_TYPE(t.scalar_type() == scalar_type<E>(), name, ": dtype ", t.scalar_type(), " where ",
                   c10::toString(scalar_type<E>()), " is needed");
  Shape shape{1, 1, 1, 1}, strides{0, 0, 0, 0};
  const int pad = 4 - static_cast<int>(t.dim());
  for (int64_t a = 0; a < t.dim(); ++a) {
    shape[pad + a] = t.size(a);
    strides[pad + a] = t.stride(a);
  }
  return {reinterpret_cast<const E*>(t.data_ptr()), shape, strides};
}

template <class E>
TensorView<E> out_view4(at::Tensor& t) {
  const ConstView<E> v = view4<E>(t, "output");
  return {const_cast<E*>(v.data()), v.shape(), v.strides()};
}

// Calls the kernels' dispatch on q's dtype: f(E{}) for float, double, float16, bfloat16.
template <class F>
decltype(auto) dispatch_dtype(const at::Tensor& q, F&& f) {
  switch (q.scalar_type()) {
    case at::kFloat: return f(float{});
    case at::kDouble: return f(double{});
    case at::kHalf: return f(float16{});
    case at::kBFloat16: return f(bfloat16{});
    default:
      TORCH_CHECK_TYPE(false, "query: dtype ", q.scalar_type(),
                       " is not supported (use float32, float64, float16 or bfloat16)");
  }
}

// Runs f, turning attnlab::Error into ValueError (torch's own errors pass as they are).
template <class F>
decltype(auto) translate_errors(F&& f) {
  try {
    return f();
  } catch (const Interrupted& e) {
    TORCH_CHECK(false, e.what());
  } catch (const Error& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

// A 1-D integer tensor (key_lengths, cu_seqlens) as int64 values.
inline std::vector<int64_t> int_values(const c10::optional<at::Tensor>& t, const char* name) {
  if (!t || !t->defined()) return {};
  TORCH_CHECK_TYPE(!t->is_floating_point() && !t->is_complex() && t->scalar_type() != at::kBool, name,
                   ": dtype ", t->scalar_type(), " is not an integer type");
  TORCH_CHECK_VALUE(t->dim() == 1, name, ": ", t->dim(), " dimensions; expected 1");
  TORCH_CHECK_VALUE(t->numel() > 0, name, ": empty; give one entry per batch entry or sequence (or None)");
  const at::Tensor c = t->to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// A float tensor option (sinks, ALiBi slopes) in the options' type T, C order.
template <class T>
std::vector<T> float_values(const c10::optional<at::Tensor>& t) {
  if (!t || !t->defined()) return {};
  const at::Tensor c = t->detach().to(scalar_type<T>()).contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

}  // namespace attnlab::torch_ops
