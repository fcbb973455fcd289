#pragma once
// Rank-4 tensors in the layout every attention argument uses:
//   [batch, heads, seq, dim]
// TensorView<T> is a non-owning view over caller memory with element strides
// (no copies, ever). Tensor<T> is a small owning, contiguous convenience type.
// A default-constructed view is "absent": optional arguments (masks, diagnostics)
// are passed as empty views.
#include <array>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "attnlab/error.hpp"
#include "attnlab/export.hpp"

namespace attnlab {

// The four axes, in order (size(), stride() take them).
enum class Axis : int { batch = 0, heads = 1, seq = 2, dim = 3 };

using Shape = std::array<int64_t, 4>;

// "[2, 12, 128, 64]"
ATTNLAB_API std::string to_string(const Shape& shape);

// Row-major (C order) strides for a shape, in elements.
constexpr Shape contiguous_strides(const Shape& shape) {
  return {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1};
}

template <class T>
class TensorView;

// A read-only view: ConstView<T> = TensorView<const T>.
template <class T>
class TensorView<const T> {
 public:
  using value_type = T;

  TensorView() = default;
  TensorView(const T* data, const Shape& shape, const Shape& strides) : data_(data), shape_(shape), strides_(strides) {}
  TensorView(const T* data, const Shape& shape) : data_(data), shape_(shape), strides_(contiguous_strides(shape)) {}

  const T* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t size(Axis axis) const { return shape_[static_cast<int>(axis)]; }
  int64_t stride(Axis axis) const { return strides_[static_cast<int>(axis)]; }
  int64_t batch() const { return shape_[0]; }
  int64_t heads() const { return shape_[1]; }
  int64_t seq() const { return shape_[2]; }
  int64_t dim() const { return shape_[3]; }
  int64_t numel() const { return shape_[0] * shape_[1] * shape_[2] * shape_[3]; }
  bool present() const { return data_ != nullptr; }
  bool is_contiguous() const { return strides_ == contiguous_strides(shape_); }

  int64_t offset(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return b * strides_[0] + h * strides_[1] + i * strides_[2] + j * strides_[3];
  }
  const T& operator()(int64_t b, int64_t h, int64_t i, int64_t j) const { return data_[offset(b, h, i, j)]; }
  // Start of the vector [b, h, i, :]; its elements are stride(Axis::dim) apart.
  const T* row(int64_t b, int64_t h, int64_t i) const { return data_ + offset(b, h, i, 0); }

 private:
  const T* data_ = nullptr;
  Shape shape_{0, 0, 0, 0};
  Shape strides_{0, 0, 0, 0};
};

// A view that may write. It is a read-only view too (derived from one), so a mutable view
// passes wherever a ConstView<T> is asked, also where T is deduced (attention_forward's q).
template <class T>
class TensorView : public TensorView<const T> {
 public:
  using value_type = T;

  TensorView() = default;
  TensorView(T* data, const Shape& shape, const Shape& strides) : TensorView<const T>(data, shape, strides) {}
  TensorView(T* data, const Shape& shape) : TensorView<const T>(data, shape) {}

  // The memory was given as T*: writing through it is the caller's right.
  T* data() const { return const_cast<T*>(TensorView<const T>::data()); }
  T& operator()(int64_t b, int64_t h, int64_t i, int64_t j) const { return data()[this->offset(b, h, i, j)]; }
  T* row(int64_t b, int64_t h, int64_t i) const { return data() + this->offset(b, h, i, 0); }
};

template <class T>
using ConstView = TensorView<const T>;

// The allocator of Tensor's storage: every block starts on a 64-byte boundary (a cache
// line, and the widest vector the engine uses). std::vector's own allocator gives
// glibc's 16 bytes, so a [*, *, Nk, 128] float32 cache would have every row 16 bytes
// past a line and every other vector load split across two; decoding read such a
// cache 2 % slower than an aligned one (calls interleaved in one process, 32/8 heads).
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, kAlignment); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
};

// Owning contiguous tensor. Sizes are validated (non-negative, no overflow).
template <class T>
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(const Shape& shape, T fill = T{}) : shape_(shape) {
    int64_t n = 1;
    for (int64_t s : shape) {
      if (s < 0) throw Error("tensor: negative size in shape " + to_string(shape));
      if (s != 0 && n > INT64_MAX / s) throw Error("tensor: shape " + to_string(shape) + " is too large");
      n *= s;
    }
    storage_.assign(static_cast<size_t>(n), fill);
  }

  TensorView<T> view() { return {storage_.data(), shape_}; }
  ConstView<T> view() const { return {storage_.data(), shape_}; }
  operator TensorView<T>() { return view(); }             // NOLINT(google-explicit-constructor)
  operator ConstView<T>() const { return view(); }        // NOLINT(google-explicit-constructor)

  const Shape& shape() const { return shape_; }
  int64_t size(Axis axis) const { return shape_[static_cast<int>(axis)]; }
  int64_t numel() const { return static_cast<int64_t>(storage_.size()); }
  T* data() { return storage_.data(); }
  const T* data() const { return storage_.data(); }
  using Storage = std::vector<T, CacheLineAllocator<T>>;
  Storage& storage() { return storage_; }
  const Storage& storage() const { return storage_; }
  T& operator()(int64_t b, int64_t h, int64_t i, int64_t j) { return storage_[index(b, h, i, j)]; }
  const T& operator()(int64_t b, int64_t h, int64_t i, int64_t j) const { return storage_[index(b, h, i, j)]; }

 private:
  size_t index(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return static_cast<size_t>(((b * shape_[1] + h) * shape_[2] + i) * shape_[3] + j);
  }
  Shape shape_{0, 0, 0, 0};
  Storage storage_;
};

}  // namespace attnlab
