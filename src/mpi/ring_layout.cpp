// RingLayout: which rows of the sequence each rank holds (ring_attention.hpp).
#include <numeric>
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/ring_attention.hpp"

namespace attnlab::mpi {

RingLayout RingLayout::zigzag(int64_t n, int ranks) {
  if (ranks < 1) throw Error("ring layout: " + std::to_string(ranks) + " ranks; at least 1 is needed");
  if (n < 0) throw Error("ring layout: negative sequence length " + std::to_string(n));
  const int64_t chunks = 2 * static_cast<int64_t>(ranks);
  RingLayout layout;
  for (int64_t c = 0; c < chunks; ++c) layout.chunk_lengths.push_back(n / chunks + (c < n % chunks ? 1 : 0));
  return layout;
}

RingLayout RingLayout::from_chunks(std::vector<int64_t> lengths) {
  if (lengths.empty() || lengths.size() % 2 != 0)
    throw Error("ring layout: " + std::to_string(lengths.size()) + " chunk lengths; 2 per rank are needed");
  for (size_t c = 0; c < lengths.size(); ++c)
    if (lengths[c] < 0)
      throw Error("ring layout: chunk " + std::to_string(c) + " has negative length " + std::to_string(lengths[c]));
  return RingLayout{std::move(lengths)};
}

int64_t RingLayout::total() const { return std::accumulate(chunk_lengths.begin(), chunk_lengths.end(), int64_t{0}); }

int64_t RingLayout::chunk_start(int chunk) const {
  return std::accumulate(chunk_lengths.begin(), chunk_lengths.begin() + chunk, int64_t{0});
}

int64_t RingLayout::shard_length(int rank) const {
  return chunk_lengths[static_cast<size_t>(first_chunk(rank))] + chunk_lengths[static_cast<size_t>(second_chunk(rank))];
}

int64_t RingLayout::global_row(int rank, int64_t local) const {
  const int64_t first = chunk_lengths[static_cast<size_t>(first_chunk(rank))];
  return local < first ? chunk_start(first_chunk(rank)) + local : chunk_start(second_chunk(rank)) + (local - first);
}

}  // namespace attnlab::mpi
