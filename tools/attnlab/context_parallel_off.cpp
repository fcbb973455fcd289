// --context-parallel in an attnlab built without MPI: an error (context_parallel.hpp).
#include "context_parallel.hpp"

namespace attnlab::cli::cp {

void run(const AttentionFlags&, const std::function<void()>&, const std::function<void()>&) {
  throw Error("--context-parallel: this attnlab was built without MPI (Debian: libopenmpi-dev openmpi-bin; "
              "then configure again)");
}

// Never reached: run() has thrown.
template <class T>
void lead_forward(const AttentionFlags&, const AttentionProblem<T>&, Tensor<T>&, Tensor<ScalarOf<T>>&) {}
template <class T>
void lead_backward(const AttentionFlags&, const AttentionProblem<T>&, const Tensor<T>&, Tensor<T>&, Tensor<T>&,
                   Tensor<T>&, std::vector<ScalarOf<T>>&) {}
void follow_forward(const AttentionFlags&) {}
void follow_backward(const AttentionFlags&, bool) {}

ATTNLAB_CP_INSTANTIATE_ALL

}  // namespace attnlab::cli::cp
