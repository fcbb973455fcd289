#pragma once
// A call cut into blocks of rows and keys, each block run as its own call placed in the
// sequence by query_offset and key_offset, the pieces merged as a ring merges them:
// out and lse through the log-sum-exp, dq summed over key blocks, dk and dv over row blocks.
// Each block is compared with the one call over the whole sequence.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "attnlab/attention_options.hpp"
#include "attnlab/tensor.hpp"
#include "core/attention_results.hpp"

namespace attnlab::test {

// Rows [start, start + length) of the sequence.
struct Cut {
  int64_t start, length;
};

// Rows [r0, r0 + n) of t (along the sequence axis), copied.
template <class T>
Tensor<T> seq_rows(const Tensor<T>& t, int64_t r0, int64_t n) {
  Tensor<T> y({t.shape()[0], t.shape()[1], n, t.shape()[3]});
  for (int64_t b = 0; b < t.shape()[0]; ++b)
    for (int64_t h = 0; h < t.shape()[1]; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < t.shape()[3]; ++c) y(b, h, i, c) = t(b, h, r0 + i, c);
  return y;
}

// The offsets that place rows `rows` and keys `keys` of a call whose keys outnumber its rows
// by `shift` (Nk − Nq) (attention_options.hpp): the block's own Nk − Nq differs from it by
// (keys.length − rows.length) − shift, which query_offset − key_offset makes up.
inline std::pair<int64_t, int64_t> block_offsets(Cut rows, Cut keys, int64_t shift) {
  const int64_t d = rows.start - keys.start + shift - (keys.length - rows.length);
  return {std::max<int64_t>(d, 0), std::max<int64_t>(-d, 0)};
}

// The merged results, in double whatever T.
struct BlockResults {
  Tensor<double> out, lse, dq, dk, dv;
};

// Runs every (row cut, key cut) pair of q, k, v as one call of T's implementation
// (the reference for double, the engine for float), with `options` placed by
// block_offsets. The backward's blocks take the whole call's out and lse (`whole`), as a
// ring's do. Key padding is not supported here (each block would need its own key length).
template <class T>
BlockResults run_in_blocks(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& grad_out,
                           const AttentionOptions<T>& options, const std::vector<Cut>& row_cuts,
                           const std::vector<Cut>& key_cuts, const detail::AttentionForward<T>& whole) {
  const int64_t B = q.shape()[0], Hq = q.shape()[1], Nq = q.shape()[2], Nk = k.shape()[2];
  const int64_t dv = v.shape()[3];
  BlockResults r{Tensor<double>({B, Hq, Nq, dv}), Tensor<double>({B, Hq, Nq, 1}, -INFINITY), Tensor<double>(q.shape()),
                 Tensor<double>(k.shape()), Tensor<double>(v.shape())};
  for (const Cut& rc : row_cuts)
    for (const Cut& kc : key_cuts) {
      AttentionOptions<T> o = options;
      std::tie(o.query_offset, o.key_offset) = block_offsets(rc, kc, Nk - Nq);
      const Tensor<T> qb = seq_rows(q, rc.start, rc.length), kb = seq_rows(k, kc.start, kc.length),
                      vb = seq_rows(v, kc.start, kc.length), gb = seq_rows(grad_out, rc.start, rc.length);
      const auto f = detail::allocating_forward(qb.view(), kb.view(), vb.view(), o);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t i = 0; i < rc.length; ++i) {
            const double lb = f.lse(b, h, i, 0), la = r.lse(b, h, rc.start + i, 0);
            if (lb == -INFINITY) continue;  // the row saw no key of this block
            const double m = std::max(la, lb), l = m + std::log1p(std::exp(std::min(la, lb) - m));
            for (int64_t c = 0; c < dv; ++c)
              r.out(b, h, rc.start + i, c) = std::exp(la - l) * r.out(b, h, rc.start + i, c) +
                                             std::exp(lb - l) * static_cast<double>(f.out(b, h, i, c));
            r.lse(b, h, rc.start + i, 0) = l;
          }
      const detail::AttentionForward<T> placed{seq_rows(whole.out, rc.start, rc.length),
                                               seq_rows(whole.lse, rc.start, rc.length)};
      const auto g = detail::allocating_backward(qb.view(), kb.view(), vb.view(), placed, gb.view(), o);
      auto add = [](Tensor<double>& to, const Tensor<T>& from, int64_t r0) {
        for (int64_t b = 0; b < from.shape()[0]; ++b)
          for (int64_t h = 0; h < from.shape()[1]; ++h)
            for (int64_t i = 0; i < from.shape()[2]; ++i)
              for (int64_t c = 0; c < from.shape()[3]; ++c) to(b, h, r0 + i, c) += from(b, h, i, c);
      };
      add(r.dq, g.dq, rc.start);
      add(r.dk, g.dk, kc.start);
      add(r.dv, g.dv, kc.start);
    }
  return r;
}

}  // namespace attnlab::test
