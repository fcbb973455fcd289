// The lab's parallel loops: an exception thrown anywhere in an iteration, the run's interrupt
// included, is rethrown after the OpenMP region; none may leave it (the process would end).
#include <gtest/gtest.h>

#include <functional>
#include <new>
#include <stdexcept>
#include <vector>

#include "lab/interrupt.hpp"
#include "lab/parallel.hpp"
#include "train/run_pool.hpp"

namespace attnlab::lab::util {
namespace {

TEST(LabParallel, ABodysBadAllocIsRethrownAfterTheRegionAsTheLowestIndexs) {
  for (int threads : {1, 2, 4}) {
    EXPECT_THROW(parallel_for(64, threads,
                              [](int64_t i) {
                                if (i == 5) throw std::bad_alloc();
                                if (i == 40) throw std::runtime_error("later index");
                              }),
                 std::bad_alloc)
        << threads << " threads";
  }
}

// The interrupt is asked inside the region by the run's own thread (one thread: it takes
// every index); a callback that cannot allocate what it needs (Python's answer keeps the
// pending exception) throws there.
TEST(LabParallel, AnInterruptThatThrowsInsideTheRegionIsRethrownAfterIt) {
  const std::function<bool()> interrupt = []() -> bool { throw std::bad_alloc(); };
  RunStop stop(&interrupt);
  const RunStopScope scope(&stop);
  EXPECT_THROW(parallel_for(16, 1, [](int64_t) {}), std::bad_alloc);
  RunStop pool_stop(&interrupt);
  const RunStopScope pool_scope(&pool_stop);
  EXPECT_THROW(train::run_pool(std::vector<double>(16, 1.0), 1, [](int64_t) {}, {}), std::bad_alloc);
}

TEST(LabParallel, ARunPoolsRunOrProgressCallbackThatThrowsIsRethrown) {
  EXPECT_THROW(train::run_pool(std::vector<double>(16, 1.0), 2, [](int64_t i) { if (i == 3) throw std::bad_alloc(); },
                               {}),
               std::bad_alloc);
  EXPECT_THROW(train::run_pool(std::vector<double>(16, 1.0), 2, [](int64_t) {},
                               [](const train::PoolProgress&) { throw std::length_error("progress"); }),
               std::length_error);
}

}  // namespace
}  // namespace attnlab::lab::util
