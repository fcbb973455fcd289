#pragma once
// MPI for the life of the process, started on first use and finalized at exit; shared by
// --context-parallel (context_parallel.cpp) and the lab across ranks (lab_ranks.cpp).
#include <mpi.h>

namespace attnlab::cli {

struct MpiWorld {
  int rank = 0, size = 1;
  bool owned = false;
  MpiWorld() {
    int started = 0;
    MPI_Initialized(&started);
    if (started == 0) {
      MPI_Init(nullptr, nullptr);
      owned = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  ~MpiWorld() {
    int finished = 0;
    MPI_Finalized(&finished);
    if (owned && finished == 0) MPI_Finalize();
  }
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;
};

inline MpiWorld& mpi_world() {
  static MpiWorld s;
  return s;
}

}  // namespace attnlab::cli
