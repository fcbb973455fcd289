// The one rule for how many OpenMP threads a library call runs with (team_size in
// attnlab/attention_options.hpp), and the check that they can be created.
//
// Neither OpenMP runtime reports a failure to create a thread: libgomp's gomp_team_start
// calls gomp_fatal("Thread creation failed"), which prints and exit()s the process (a Python
// interpreter included), and LLVM's libomp (clang's -fopenmp) aborts ("OMP: Error #34");
// tens of thousands of threads overflow libgomp's stack first (a segfault). So a team is
// proven before the runtime is asked for it: its extra threads are created here with
// pthread_create and the runtime's stack size, all alive at once, then joined; glibc keeps
// their stacks for the runtime's threads, which then need no new memory. Both runtimes keep
// the threads of a calling thread's last team and reuse them, so only a team larger than
// this thread's last one is proven.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>
#include <fmt/format.h>
#include <omp.h>

#include "attnlab/attention_options.hpp"
#include "attnlab/error.hpp"

namespace attnlab {
namespace {

// The team this thread last ran: the runtime's pool (of this calling thread) holds its threads.
thread_local int last_team = 1;

// The stack size the runtime gives its threads, in bytes, or 0 for pthread's default.
// libomp says (kmp_get_stacksize_s) and asks for a little more per thread id (KMP_STKOFFSET):
// the probe's stacks are 1 MiB larger, so that glibc hands them to its threads (it reuses a
// kept stack for a request up to 4 times smaller). libgomp takes OMP_STACKSIZE or
// GOMP_STACKSIZE ("size[B|K|M|G]", kilobytes without a unit), else pthread's default.
size_t openmp_stack_size() {
  using StackSize = size_t (*)();
  if (const auto libomp = reinterpret_cast<StackSize>(dlsym(RTLD_DEFAULT, "kmp_get_stacksize_s")))
    return libomp() + (size_t{1} << 20);
  for (const char* name : {"OMP_STACKSIZE", "GOMP_STACKSIZE"}) {
    const char* text = std::getenv(name);
    if (text == nullptr) continue;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(text, &end, 10);
    if (end == text) continue;
    while (*end == ' ') ++end;
    const int shift = *end == 'B' || *end == 'b' ? 0 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 10;
    return static_cast<size_t>(n) << shift;
  }
  return 0;
}

struct Gate {
  std::mutex mutex;
  std::condition_variable opened;
  bool open = false;
};

void* wait_at_gate(void* arg) {
  auto* gate = static_cast<Gate*>(arg);
  std::unique_lock lock(gate->mutex);
  gate->opened.wait(lock, [gate] { return gate->open; });
  return nullptr;
}

struct Probe {
  int created = 0;  // threads that started
  int error = 0;    // pthread_create's error for the next one (0: all started)
};

// Starts `extra` threads that wait until all have started (so that all exist at once,
// as in a team), then lets them end and joins them.
Probe start_and_join(int extra) {
  Gate gate;
  std::vector<pthread_t> threads;
  Probe probe;
  try {
    threads.reserve(static_cast<size_t>(extra));
  } catch (const std::bad_alloc&) {
    probe.error = ENOMEM;
    return probe;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (const size_t stack = openmp_stack_size(); stack != 0) pthread_attr_setstacksize(&attr, stack);
  for (int t = 0; t < extra; ++t) {
    pthread_t id;
    if (const int err = pthread_create(&id, &attr, wait_at_gate, &gate); err != 0) {
      probe.error = err;
      break;
    }
    threads.push_back(id);
  }
  pthread_attr_destroy(&attr);
  probe.created = static_cast<int>(threads.size());
  {
    std::lock_guard lock(gate.mutex);
    gate.open = true;
  }
  gate.opened.notify_all();
  for (const pthread_t id : threads) pthread_join(id, nullptr);
  return probe;
}

}  // namespace

int team_size(int threads, const char* what) {
  check_threads(threads, what);  // a count the caller gave must be in [0, kMaxThreads]
  const bool asked = threads != 0;
  // OpenMP's default (OMP_NUM_THREADS, else the cores), which the caller did not choose:
  // clamped to the bound rather than refused.
  int team = asked ? threads : std::clamp(omp_get_max_threads(), 1, kMaxThreads);
  // A region inside an active one runs with one thread (nested parallelism off): nothing to create.
  if (team <= 1 || omp_get_active_level() >= omp_get_max_active_levels()) return team;
  if (team > last_team) {
    const Probe probe = start_and_join(team - 1);
    if (probe.error != 0) {
      if (asked)
        throw OutOfMemory(fmt::format("{}: cannot start {} threads: only {} could be created ({}); ask for fewer "
                                      "threads, or raise the limit that stopped them (ulimit -v, ulimit -u)",
                                      what, threads, probe.created + 1, std::strerror(probe.error)));
      team = probe.created + 1;  // the default: as many as this process can create now
    }
  }
  last_team = team;
  return team;
}

}  // namespace attnlab
