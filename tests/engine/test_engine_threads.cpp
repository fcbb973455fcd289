// The thread-count rule (attnlab::team_size): OpenMP's default is clamped to the bound,
// a count the caller gave is checked, and a team that cannot be created is an error the
// caller can catch (libgomp itself would exit the process).
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

TEST(EngineThreads, ThreadsThatCannotBeCreatedAreAnErrorNotAnExit) {
  // Under an address-space limit with room for little more than the process, 16 threads'
  // stacks do not fit: libgomp printed "Thread creation failed" and exited the process, and
  // libomp (clang's OpenMP, the sanitized build's) aborts.
  // Run in a child (the limit is the whole process's), on a fresh thread (libgomp's pool
  // of this thread's earlier teams does not survive fork).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 1;
    std::thread caller([&code] {
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
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: exited (libgomp), 2: no error, 3: wrong message, 4: the default failed";
}
