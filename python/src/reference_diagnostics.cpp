#include "reference_diagnostics.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "attnlab/softmax.hpp"
#include "core/attention_checks.hpp"

namespace attnlab::python {

void reference_row_diagnostics(ConstView<double> q, ConstView<double> k, ConstView<double> lse,
                               const AttentionOptions<double>& options, const ReferenceDiagnostics& out) {
  detail::AttentionDims dims;
  dims.B = q.batch();
  dims.Hq = q.heads();
  dims.Hkv = k.heads();
  dims.Nq = q.seq();
  dims.Nk = k.seq();
  dims.d = q.dim();
  std::vector<double> p(static_cast<size_t>(dims.Nk));  // [Nk] probabilities of one row
  for (int64_t b = 0; b < dims.B; ++b)
    for (int64_t h = 0; h < dims.Hq; ++h)
      for (int64_t i = 0; i < dims.Nq; ++i) {
        const double L = lse(b, h, i, 0);
        const int64_t end = detail::key_end(dims, options, b, i);
        const uint8_t* bm = detail::mask_row(options.bool_mask, b, h, i);
        const double* am = detail::mask_row(options.additive_mask, b, h, i);
        const double scale = options.scale(dims.d, detail::visible_keys(dims, options, b, h, i));
        std::fill(p.begin(), p.end(), 0.0);
        for (int64_t j = 0; L != -INFINITY && j < end; ++j) {
          if (bm != nullptr && bm[j * options.bool_mask.stride(kDim)] == 0) continue;
          double s = 0;
          for (int64_t c = 0; c < dims.d; ++c) s += q(b, h, i, c) * k(b, h / dims.group(), j, c);
          s = s * scale + (am != nullptr ? am[j * options.additive_mask.stride(kDim)] : 0.0);
          p[static_cast<size_t>(j)] = std::exp(s - L);
        }
        const std::span<const double> row(p);
        if (out.max_prob.present()) out.max_prob(b, h, i, 0) = *std::max_element(p.begin(), p.end());
        if (out.entropy.present()) out.entropy(b, h, i, 0) = entropy(row);
        if (out.jacobian_fro_sq.present()) out.jacobian_fro_sq(b, h, i, 0) = jacobian_frobenius_sq(row);
      }
}

}  // namespace attnlab::python
