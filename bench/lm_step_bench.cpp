// Milliseconds per training step of the language-model study's GPT (src/train/gpt.hpp), one
// thread (the engine and OpenBLAS), as the study runs it: forward, backward and the AdamW
// update on a batch of random windows. The d_k values are measured in interleaved rounds, so
// that a change in the machine's load touches them alike; the median of the rounds is printed
// with the load average before and after, as wall-clock time and as the thread's CPU time
// (which a loaded machine inflates less: it counts only the time the thread ran).
//   attnlab_lm_step_bench [--dims 16,64,256] [--rounds 5] [--steps 10] [--d_model 64]
//                         [--layers 4] [--heads 4] [--context 64] [--batch 16]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/blas.hpp"
#include "train/gpt.hpp"
#include "train/optimizer.hpp"

namespace {

using namespace attnlab::train;
using namespace attnlab::train::lm;

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct Setup {
  std::unique_ptr<Gpt<float>> model;
  std::unique_ptr<Optimizer> opt;
  LmBatch batch;
};

Setup make(const GptConfig& c, int64_t B) {
  Setup s;
  s.model = std::make_unique<Gpt<float>>(c);
  s.model->init(1);
  OptimizerSettings settings;
  settings.beta2 = 0.95;
  settings.weight_decay = 0.1;
  s.opt = std::make_unique<Optimizer>(OptimizerKind::adam, s.model->params(), settings, s.model->decayed());
  s.batch.batch = B;
  s.batch.seq = c.context;
  for (int64_t i = 0; i < B * c.context; ++i) {
    s.batch.tokens.push_back(static_cast<int32_t>((i * 7919) % c.vocab));
    s.batch.targets.push_back(static_cast<int32_t>((i * 104729 + 3) % c.vocab));
  }
  return s;
}

double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

struct Time {
  double wall = 0, cpu = 0;  // ms per step
};

Time step_ms(Setup& s, int steps) {
  const double c0 = cpu_ms();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    s.model->zero_grad();
    s.model->forward(s.batch);
    s.model->backward();
    s.opt->step(1e-4);
  }
  Time t;
  t.wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  t.cpu = (cpu_ms() - c0) / steps;
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> dims{16, 64, 256};
  int rounds = 5, steps = 10;
  GptConfig c;
  c.vocab = 63;  // the King James Version's alphabet
  int64_t B = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--dims") dims = parse_list(value);
    else if (key == "--rounds") rounds = std::stoi(value);
    else if (key == "--steps") steps = std::stoi(value);
    else if (key == "--d_model") c.d_model = std::stoll(value);
    else if (key == "--layers") c.n_layers = std::stoll(value);
    else if (key == "--heads") c.n_heads = std::stoll(value);
    else if (key == "--context") c.context = std::stoll(value);
    else if (key == "--batch") B = std::stoll(value);
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  attnlab::blas::set_threads_when_loaded(1);  // as the attnlab command line does
  std::vector<Setup> setups;
  for (int64_t dk : dims) {
    c.d_k = dk;
    setups.push_back(make(c, B));
    step_ms(setups.back(), 2);  // warm: buffers sized, OpenBLAS loaded
  }
  std::printf("D=%lld L=%lld H=%lld T=%lld B=%lld, one thread; load before: %s\n", static_cast<long long>(c.d_model),
              static_cast<long long>(c.n_layers), static_cast<long long>(c.n_heads),
              static_cast<long long>(c.context), static_cast<long long>(B), load_average().c_str());
  std::vector<std::vector<double>> wall(dims.size()), cpu(dims.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < dims.size(); ++i) {
      const Time t = step_ms(setups[i], steps);
      wall[i].push_back(t.wall);
      cpu[i].push_back(t.cpu);
    }
  for (size_t i = 0; i < dims.size(); ++i)
    std::printf("d_k=%-5lld %8.2f ms/step wall, %8.2f ms/step CPU (medians of %d rounds of %d steps)\n",
                static_cast<long long>(dims[i]), median(wall[i]), median(cpu[i]), rounds, steps);
  std::printf("load after: %s\n", load_average().c_str());
  return 0;
}
