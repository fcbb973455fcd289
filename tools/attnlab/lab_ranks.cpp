// The lab across MPI ranks (lab_ranks.hpp): MPI_Bcast and MPI_Gatherv of serialized bytes
// on MPI_COMM_WORLD, in rank order.
#include "lab_ranks.hpp"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fmt/format.h>

#include "mpi_world.hpp"

namespace attnlab::cli {
namespace {

class MpiRanks final : public lab::RunDistributor {
 public:
  int rank() const override { return mpi_world().rank; }
  int size() const override { return mpi_world().size; }

  std::string broadcast(const std::string& text) const override {
    long long n = static_cast<long long>(text.size());
    MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (n > INT_MAX) throw Error(fmt::format("lab across ranks: {} bytes to broadcast, more than MPI's int count", n));
    std::string out = rank() == 0 ? text : std::string(static_cast<size_t>(n), '\0');
    MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
    return out;
  }

  std::vector<std::string> gather(const std::string& bytes) const override {
    // Every rank learns every size, so that all refuse alike a total MPI's int counts cannot hold.
    long long n = static_cast<long long>(bytes.size());
    std::vector<long long> sizes(static_cast<size_t>(size()));
    MPI_Allgather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, MPI_COMM_WORLD);
    long long total = 0;
    for (long long s : sizes) total += s;
    if (total > INT_MAX) throw Error(fmt::format("lab across ranks: {} bytes to gather, more than MPI's int count", total));
    std::vector<int> counts, offsets;
    for (long long s : sizes) {
      offsets.push_back(counts.empty() ? 0 : offsets.back() + counts.back());
      counts.push_back(static_cast<int>(s));
    }
    std::string all(rank() == 0 ? static_cast<size_t>(total) : 0, '\0');
    MPI_Gatherv(bytes.data(), static_cast<int>(n), MPI_CHAR, all.data(), counts.data(), offsets.data(), MPI_CHAR, 0,
                MPI_COMM_WORLD);
    std::vector<std::string> out;
    if (rank() == 0)
      for (size_t r = 0; r < sizes.size(); ++r)
        out.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(counts[r])));
    return out;
  }
};

// Started by mpirun (Open MPI, or a PMI launcher such as MPICH's or Slurm's).
bool under_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

}  // namespace

const lab::RunDistributor* lab_ranks() {
  if (!under_mpirun()) return nullptr;
  static const MpiRanks ranks = [] {
    mpi_world();
    if (std::getenv("OMP_NUM_THREADS") == nullptr) {
      MPI_Comm node;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
      int on_node = 1;
      MPI_Comm_size(node, &on_node);
      MPI_Comm_free(&node);
      omp_set_num_threads(std::max(1, omp_get_num_procs() / on_node));
    }
    return MpiRanks{};
  }();
  return &ranks;
}

}  // namespace attnlab::cli
