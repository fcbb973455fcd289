#pragma once
// Scale policies: the factor applied to q·k before the softmax.
//
//   inv_sqrt_d          1/√d                    (Vaswani et al.; the default)
//   fixed(c)            c                        (PyTorch's `scale=` argument)
//   none                1                        (the unscaled dot product)
//   inv_d               1/d                      (μP)
//   entropy_invariant   log₅₁₂(n)/√d             (Su Jianlin's entropy-invariant attention)
//   scalable_softmax(s) s·ln(n)/√d               (Nakanishi's SSMax applied to the 1/√d logits)
//
// n is the number of keys the query row may see: causal masking, key padding
// and the boolean mask remove keys, so for the last two policies the scale
// differs from row to row. At n = 1 both give 0: one key gets probability 1
// whatever the scale.
#include <cstdint>
#include <string>
#include <string_view>

#include "attnlab/export.hpp"

namespace attnlab {

class ATTNLAB_API ScalePolicy {
 public:
  enum class Kind { inv_sqrt_d, fixed, none, inv_d, entropy_invariant, scalable_softmax };

  ScalePolicy() = default;  // 1/√d
  static ScalePolicy inv_sqrt_d() { return ScalePolicy(Kind::inv_sqrt_d, 0.0); }
  static ScalePolicy fixed(double value);
  static ScalePolicy none() { return ScalePolicy(Kind::none, 0.0); }
  static ScalePolicy inv_d() { return ScalePolicy(Kind::inv_d, 0.0); }
  static ScalePolicy entropy_invariant() { return ScalePolicy(Kind::entropy_invariant, 0.0); }
  static ScalePolicy scalable_softmax(double s = kDefaultSsmaxS);

  // Parses "inv_sqrt_d", "none", "inv_d", "entropy_invariant", "ssmax" or
  // "ssmax:S", or a finite number (a fixed scale). Throws attnlab::Error.
  static ScalePolicy parse(std::string_view text);

  // The scale for a row with head dim d that may see n_visible keys.
  double operator()(int64_t d, int64_t n_visible) const;

  Kind kind() const { return kind_; }
  double parameter() const { return param_; }  // the fixed value, or SSMax's s
  bool depends_on_n() const { return kind_ == Kind::entropy_invariant || kind_ == Kind::scalable_softmax; }
  std::string name() const;  // parse(name()) round-trips

  // SSMax learns s per head; 0.5 is our fixed default, not a value from the paper.
  static constexpr double kDefaultSsmaxS = 0.5;

 private:
  ScalePolicy(Kind kind, double param) : kind_(kind), param_(param) {}
  Kind kind_ = Kind::inv_sqrt_d;
  double param_ = 0.0;
};

}  // namespace attnlab
