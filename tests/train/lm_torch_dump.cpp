// Writes one small GPT's weights, a batch, its loss and every parameter's gradient as .npy
// (float32 and float64 models from the same seed), for lm_torch_check.py, which rebuilds the
// model in PyTorch and compares.
//   lm_torch_dump OUT_DIR SCALE INIT      SCALE: none | inv_sqrt_d | inv_d | qknorm | a number
// OUT_DIR/config.json, OUT_DIR/{f32,f64}/{tokens,targets,loss}.npy, <param>.npy, grad.<param>.npy
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnlab/atomic_files.hpp"
#include "attnlab/error.hpp"
#include "attnlab/npy.hpp"
#include "lm_random_batch.hpp"
#include "train/engine_call.hpp"
#include "train/gpt.hpp"

namespace {

using namespace attnlab;
using namespace attnlab::train::lm;

GptConfig config(const std::string& scale, const std::string& init) {
  GptConfig c;
  c.vocab = 11;
  c.context = 9;
  c.d_model = 12;
  c.n_layers = 2;
  c.n_heads = 3;
  c.d_k = 5;  // not D/H = 4
  c.scale = train::Scaling::parse(scale);
  c.init = parse_lm_init(init);
  return c;
}

template <class T>
void save(const std::filesystem::path& file, const std::vector<T>& values, std::vector<int64_t> shape) {
  npy::save<T>(file.string(), std::span<const T>(values), std::span<const int64_t>(shape));
}

template <class T>
void dump(const GptConfig& c, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  Gpt<T> model(c);
  model.init(42);
  // Make the LayerNorms and the temperature non-trivial, so that their gradients are checked
  // at a general point (GPT-2's init has γ = 1, β = 0).
  std::mt19937_64 rng(7);
  for (auto* p : model.params())
    if (p->rows == 1) {
      std::normal_distribution<double> n(0.0, 0.1);
      for (T& x : p->value) x += static_cast<T>(n(rng));
    }
  const LmBatch b = train::test::random_batch(c, 4, 12345);
  const double loss = model.forward(b);
  model.zero_grad();
  model.backward();
  std::vector<double> tokens(b.tokens.begin(), b.tokens.end()), targets(b.targets.begin(), b.targets.end());
  save(dir / "tokens.npy", tokens, {b.batch, b.seq});
  save(dir / "targets.npy", targets, {b.batch, b.seq});
  save(dir / "loss.npy", std::vector<double>{loss}, {1});
  for (const auto* p : model.params()) {
    save(dir / (p->name + ".npy"), p->value, {p->rows, p->cols});
    save(dir / ("grad." + p->name + ".npy"), p->grad, {p->rows, p->cols});
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s OUT_DIR SCALE INIT\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path out = argv[1];
    const GptConfig c = config(argv[2], argv[3]);
    dump<float>(c, out / "f32");
    dump<double>(c, out / "f64");
    nlohmann::json j;
    j["vocab"] = c.vocab;
    j["context"] = c.context;
    j["d_model"] = c.d_model;
    j["n_layers"] = c.n_layers;
    j["n_heads"] = c.n_heads;
    j["d_k"] = c.d_k;
    j["scale"] = argv[2];
    j["layernorm_eps"] = train::LayerNorm<double>::kEps;
    j["qk_norm_eps"] = train::kQkNormEps;
    Gpt<double> names(c);
    for (const auto* p : names.params()) j["params"].push_back(p->name);
    io::write_file_atomically((out / "config.json").string(), j.dump(2));
  } catch (const attnlab::Error& e) {
    std::fprintf(stderr, "lm_torch_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
