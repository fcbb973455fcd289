// The thread-count rule (attnlab::team_size): OpenMP's default is clamped to the bound,
// a count the caller gave is checked, and a team that cannot be created is an error the
// caller can catch (libgomp itself would exit the process).
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "attnlab/attention.hpp"
#include "core/attention_results.hpp"

namespace al = attnlab;
using al::Tensor;

namespace {

Tensor<float> ramp(al::Shape shape) {
  Tensor<float> t(shape);
  float x = 0.0f;
  for (float& e : t.storage()) e = x = x * 0.7f + 0.3f;
  return t;
}

// The process's address space in bytes (VmSize).
size_t address_space() {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f != nullptr && std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, "VmSize:", 7) == 0) kb = std::strtoull(line + 7, nullptr, 10);
  if (f != nullptr) std::fclose(f);
  return kb * 1024;
}

}  // namespace

TEST(EngineThreads, OpenMPsDefaultIsClampedToTheBound) {
  // OMP_NUM_THREADS=100000 made the default team crash inside libgomp (the caller gave no
  // count); it now runs with kMaxThreads threads, and the result is the same as with one.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(100000);
  EXPECT_EQ(al::team_size(0), al::kMaxThreads);
  const Tensor<float> q = ramp({1, 2, 40, 8});
  const auto many = al::detail::allocating_forward(q.view(), q.view(), q.view());
  omp_set_num_threads(saved);
  const auto one = al::detail::allocating_forward(q.view(), q.view(), q.view(), {}, al::ComputeConfig{1});
  EXPECT_EQ(many.out.storage(), one.out.storage());
  // A count the caller gave is not clamped: outside [0, kMaxThreads] it is an error.
  EXPECT_EQ(al::team_size(3), 3);
  EXPECT_THROW(al::team_size(al::kMaxThreads + 1), al::Error);
}

namespace {

// Under an address-space limit with room for little more than the process, 16 threads'
// stacks do not fit: libgomp printed "Thread creation failed" and exited the process, and
// libomp (clang's OpenMP, the sanitized build's) aborts. Here the engine's error is caught
// and the default team runs; the exit code says which of these happened.
[[noreturn]] void start_16_threads_under_a_limit() {
  int code = 1;  // exited by OpenMP itself
  std::thread caller([&code] {  // a fresh thread: no pool of the calling thread's earlier teams
    const Tensor<float> q = ramp({1, 2, 40, 8});
    rlimit limit{address_space() + (size_t{20} << 20), RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &limit) != 0) return;
    try {
      al::detail::allocating_forward(q.view(), q.view(), q.view(), {}, al::ComputeConfig{16});
      code = 2;  // ran: the limit did not bite
    } catch (const al::OutOfMemory& e) {
      code = std::string(e.what()).find("engine: threads: cannot start 16 threads") == 0 ? 0 : 3;
      // The default shrinks to what can be created, and runs.
      try {
        al::detail::allocating_forward(q.view(), q.view(), q.view());
      } catch (...) {
        code = 4;
      }
    }
  });
  caller.join();
  _exit(code);
}

}  // namespace

TEST(EngineThreads, ThreadsThatCannotBeCreatedAreAnErrorNotAnExit) {
  // In a fresh process (the limit is the whole process's): the "threadsafe" style runs this
  // binary again for this test alone. A fork would inherit the stacks of the threads earlier
  // tests started (kMaxThreads of them above), which glibc keeps for new threads: the 16
  // would then need no memory, and the limit would not bite.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(start_16_threads_under_a_limit(), testing::ExitedWithCode(0), "")
      << "1: exited (libgomp), 2: no error, 3: wrong message, 4: the default failed";
}
