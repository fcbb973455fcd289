#pragma once
// The processes `attnlab report` and `attnlab run` divide the lab's runs among
// (attnlab/run_distributor.hpp): under mpirun, the ranks of MPI_COMM_WORLD; otherwise
// nullptr (this process alone, MPI never started). Built without MPI: always nullptr.
#include <string>

#include "attnlab/run_distributor.hpp"

namespace attnlab::cli {

// On first call under mpirun: starts MPI and, unless OMP_NUM_THREADS is set, gives each rank
// its share of the node's cores (cores / ranks on the node, at least 1).
const lab::RunDistributor* lab_ranks();

// Rank 0 runs `check` (the checks of the output paths, which it alone writes); its Error,
// if any, is thrown on every rank, so that no rank starts work the others refused.
template <class Check>
void check_on_rank0(const lab::RunDistributor* ranks, const Check& check) {
  std::string problem;
  if (ranks == nullptr || ranks->rank() == 0) try {
      check();
    } catch (const Error& e) {
      if (ranks == nullptr || ranks->size() == 1) throw;
      problem = e.what();
    }
  if (ranks != nullptr && ranks->size() > 1) problem = ranks->broadcast(problem);
  if (!problem.empty()) throw Error(problem);
}

}  // namespace attnlab::cli
