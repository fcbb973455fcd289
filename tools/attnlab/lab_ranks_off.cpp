// The lab across ranks in an attnlab built without MPI (lab_ranks.hpp): one process.
#include "lab_ranks.hpp"

namespace attnlab::cli {

const lab::RunDistributor* lab_ranks() { return nullptr; }

}  // namespace attnlab::cli
