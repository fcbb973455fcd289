// BlockMask (attnlab/score_mod.hpp): mask_mod classified per tile of the engine, so that
// the kernels skip empty tiles and evaluate mask_mod only in partial ones.
#include <omp.h>

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "attnlab/attention_options.hpp"
#include "attnlab/error.hpp"
#include "attnlab/score_mod.hpp"
#include "engine/plan.hpp"

namespace attnlab {

int64_t BlockMask::block_rows() { return engine::kBr; }
int64_t BlockMask::block_cols() { return engine::kBc; }

BlockMask BlockMask::build(const MaskMod& mask_mod, int64_t batch, int64_t heads, int64_t Nq, int64_t Nk,
                           int threads) {
  for (const auto& [name, value] : {std::pair{"batch", batch}, {"heads", heads}, {"Nq", Nq}, {"Nk", Nk}})
    if (value < 1) throw Error(fmt::format("BlockMask::build: {} = {} must be at least 1", name, value));
  BlockMask m;
  m.batch_ = batch;
  m.heads_ = heads;
  m.nq_ = Nq;
  m.nk_ = Nk;
  m.qblocks_ = engine::ceil_div(Nq, engine::kBr);
  m.kblocks_ = engine::ceil_div(Nk, engine::kBc);
  const int64_t n_rows = batch * heads * m.qblocks_;  // one query tile of one (b, h) per item
  m.blocks_.assign(static_cast<size_t>(n_rows * m.kblocks_), 0);
  const int n_threads = team_size(threads, "BlockMask::build: threads");
#pragma omp parallel num_threads(n_threads)
  {
    std::vector<uint8_t> keep(static_cast<size_t>(engine::kBc));
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_rows; ++item) {
      const int64_t b = item / (heads * m.qblocks_), h = item / m.qblocks_ % heads, qt = item % m.qblocks_;
      const int64_t i0 = qt * engine::kBr, i1 = std::min(Nq, i0 + engine::kBr);
      for (int64_t kt = 0; kt < m.kblocks_; ++kt) {
        const int64_t j0 = kt * engine::kBc, n = std::min(engine::kBc, Nk - j0);
        bool any = false, all = true;
        for (int64_t i = i0; i < i1 && (all || !any); ++i) {
          mask_mod.keep_row(b, h, i, j0, n, keep.data());
          for (int64_t j = 0; j < n; ++j) {
            any |= keep[static_cast<size_t>(j)] != 0;
            all &= keep[static_cast<size_t>(j)] != 0;
          }
        }
        const Block kind = !any ? Block::empty : all ? Block::full : Block::partial;
        m.blocks_[static_cast<size_t>(item * m.kblocks_ + kt)] = static_cast<uint8_t>(kind);
      }
    }
  }
  return m;
}

int64_t BlockMask::count(Block kind) const {
  return static_cast<int64_t>(std::count(blocks_.begin(), blocks_.end(), static_cast<uint8_t>(kind)));
}

}  // namespace attnlab
