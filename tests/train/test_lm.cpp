// The language-model study's corpus, configuration checks and runs (attnlab/lm.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "attnlab/error.hpp"
#include "attnlab/lm.hpp"

namespace attnlab::train::lm {
namespace {

namespace fs = std::filesystem;

// A throw-away directory for the test's files (removed with what this test wrote in it).
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("attnlab_test_lm_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

// Text of `n` bytes: words of a small alphabet, a newline every ~60 characters.
std::string synthetic_text(size_t n, uint64_t seed = 3) {
  std::mt19937_64 rng(seed);
  const std::string words[] = {"the ", "lord ", "and ", "said ", "unto ", "him, ", "of ", "israel. "};
  std::string s;
  while (s.size() < n) {
    s += words[rng() % 8];
    if (rng() % 12 == 0) s += '\n';
  }
  s.resize(n);
  return s;
}

std::string decode(const Corpus& c, const std::vector<uint8_t>& ids, size_t from, size_t n) {
  std::string s;
  for (size_t i = from; i < from + n && i < ids.size(); ++i) s += c.alphabet[ids[i]];
  return s;
}

// ---- the corpus ----------------------------------------------------------------------

TEST(LmCorpus, KjvWithoutReferencesAndSplitEveryTenthChunk) {
  const Corpus c = kjv_corpus();
  EXPECT_EQ(c.name, "bible-kjv");
  const size_t total = c.train.size() + c.validation.size();
  EXPECT_GT(total, 4'000'000u);
  // Every 10th chunk of 4 KiB: validation is a tenth of the text (the last chunk may be short).
  EXPECT_NEAR(static_cast<double>(c.validation.size()) / static_cast<double>(total), 0.1, 0.002);
  // The alphabet: distinct bytes, sorted; newline kept, no digits or ':' (the references are gone).
  EXPECT_TRUE(std::is_sorted(c.alphabet.begin(), c.alphabet.end()));
  EXPECT_NE(c.alphabet.find('\n'), std::string::npos);
  EXPECT_EQ(c.alphabet.find_first_of("0123456789"), std::string::npos);
  EXPECT_EQ(decode(c, c.train, 0, 58), "In the beginning God created the heaven and the earth.\nAnd");
  // Validation starts with the 10th chunk: bytes [36864, 40960) of the text.
  const std::string head = decode(c, c.train, 0, 9 * 4096);
  EXPECT_EQ(head.size(), 9u * 4096u);
  EXPECT_NE(decode(c, c.validation, 0, 4096), decode(c, c.train, 9 * 4096, 4096));
}

TEST(LmCorpus, TextFileSplitAndAlphabet) {
  TempDir dir;
  const std::string text = synthetic_text(50'000);
  const Corpus c = text_corpus(dir.write("words.txt", text));
  EXPECT_EQ(c.name, "words.txt");
  ASSERT_EQ(c.train.size() + c.validation.size(), text.size());
  // Chunks 0..8 train, chunk 9 validation, chunks 10..11 (the rest) train.
  EXPECT_EQ(c.validation.size(), 4096u);
  EXPECT_EQ(decode(c, c.validation, 0, 4096), text.substr(9 * 4096, 4096));
  EXPECT_EQ(decode(c, c.train, 0, 9 * 4096), text.substr(0, 9 * 4096));
  EXPECT_EQ(decode(c, c.train, 9 * 4096, 100), text.substr(10 * 4096, 100));
  EXPECT_EQ(c.alphabet, "\n ,.adefhilmnorstu");
}

TEST(LmCorpus, ErrorsNameTheProblem) {
  TempDir dir;
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { text_corpus((dir.path / "absent.txt").string()); }).find("no such file"), std::string::npos);
  EXPECT_NE(message([&] { text_corpus(dir.write("empty.txt", "")); }).find("is empty"), std::string::npos);
  EXPECT_NE(message([&] { text_corpus(dir.write("short.txt", synthetic_text(40'000))); }).find("at least 40960"),
            std::string::npos);
  // bible-kjv missing, failing or silent: the package is named.
  for (const char* program : {"/nonexistent/bible", "false", "true"})
    EXPECT_NE(message([&] { kjv_corpus(program); }).find("bible-kjv"), std::string::npos) << program;
}

// ---- configurations ------------------------------------------------------------------

GptConfig small_model(int64_t vocab) {
  GptConfig m;
  m.vocab = vocab;
  m.context = 16;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 2;
  m.d_k = 8;
  return m;
}

TEST(LmConfig, BadFieldsAreNamed) {
  auto expect_named = [](const GptConfig& m, const std::string& field) {
    try {
      validate(m);
      ADD_FAILURE() << "no error for " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  GptConfig m = small_model(10);
  EXPECT_NO_THROW(validate(m));
  auto with = [&](auto edit) {
    GptConfig c = m;
    edit(c);
    return c;
  };
  expect_named(with([](GptConfig& c) { c.n_heads = 3; }), "multiple of n_heads");
  expect_named(with([](GptConfig& c) { c.d_k = 0; }), "d_k");
  expect_named(with([](GptConfig& c) { c.n_layers = 0; }), "n_layers");
  expect_named(with([](GptConfig& c) { c.vocab = 1; }), "vocab");
  expect_named(with([](GptConfig& c) { c.context = 0; }), "context");
  expect_named(with([](GptConfig& c) { c.d_model = 0; }), "d_model");
  expect_named(with([](GptConfig& c) { c.n_heads = 0; }), "n_heads");
  expect_named(with([](GptConfig& c) { c.scale = Scaling::additive_score(); }), "additive");

  LmRunConfig r;
  r.model = m;
  EXPECT_NO_THROW(validate(r));
  auto run_named = [&](auto edit, const std::string& field) {
    LmRunConfig c = r;
    edit(c);
    try {
      validate(c);
      ADD_FAILURE() << "no error for " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  run_named([](LmRunConfig& c) { c.steps = 0; }, "steps");
  run_named([](LmRunConfig& c) { c.warmup = c.steps + 1; }, "warmup");
  run_named([](LmRunConfig& c) { c.batch = 0; }, "batch");
  run_named([](LmRunConfig& c) { c.eval_every = 0; }, "eval_every");
  run_named([](LmRunConfig& c) { c.eval_windows = 0; }, "eval_windows");
  run_named([](LmRunConfig& c) { c.lr = std::nan(""); }, "lr");
  run_named([](LmRunConfig& c) { c.weight_decay = -1; }, "weight_decay");
  run_named([](LmRunConfig& c) { c.grad_clip = -1; }, "grad_clip");
  run_named([](LmRunConfig& c) { c.model.d_k = 0; }, "d_k");
  EXPECT_EQ(parse_lm_init("unit"), LmInit::unit);
  EXPECT_EQ(parse_lm_init(to_string(LmInit::gpt2)), LmInit::gpt2);
  EXPECT_THROW(parse_lm_init("xavier"), Error);
  EXPECT_EQ(parse_lm_optimizer("sgd"), LmOptimizer::sgd);
  EXPECT_THROW(parse_lm_optimizer("adam"), Error);
}

// ---- runs ------------------------------------------------------------------------------

struct Fixture {
  TempDir dir;
  Corpus corpus = text_corpus(dir.write("words.txt", synthetic_text(60'000)));
};

LmRunConfig tiny_run(const Corpus& corpus) {
  LmRunConfig c;
  c.model = small_model(corpus.vocab());
  c.lr = 3e-3;
  c.steps = 60;
  c.warmup = 6;
  c.batch = 8;
  c.eval_every = 20;
  c.eval_windows = 16;
  return c;
}

TEST(LmRun, LearnsTheTextAndRecordsEveryEvaluation) {
  Fixture f;
  const LmRunConfig c = tiny_run(f.corpus);
  const LmRunResult r = train_lm_run(c, f.corpus);
  ASSERT_FALSE(r.diverged);
  ASSERT_EQ(r.curve.size(), 4u);  // steps 0, 20, 40, 60
  EXPECT_EQ(r.curve.back().step, 60);
  // At init the prediction is about uniform over the alphabet: log2(V) bits per character.
  EXPECT_NEAR(r.curve.front().val_bpc, std::log2(static_cast<double>(f.corpus.vocab())), 0.2);
  EXPECT_LT(r.final_val_bpc, r.curve.front().val_bpc - 1.0);
  EXPECT_EQ(r.final_val_bpc, r.curve.back().val_bpc);
  EXPECT_TRUE(std::isnan(r.curve.front().train_bpc));
  EXPECT_TRUE(std::isnan(r.curve.front().grad_norm_q));
  for (const auto& p : r.curve) {
    ASSERT_EQ(p.entropy.size(), 2u);
    ASSERT_EQ(p.max_prob.size(), 2u);
    for (size_t l = 0; l < 2; ++l) {
      // Causal rows see 1..16 keys: the mean entropy lies below the mean log of that.
      EXPECT_GT(p.entropy[l], 0.0);
      EXPECT_LT(p.entropy[l], std::log(16.0));
      EXPECT_GT(p.max_prob[l], 1.0 / 16);
      EXPECT_LE(p.max_prob[l], 1.0);
    }
    if (p.step > 0) {
      EXPECT_GT(p.grad_norm_q, 0.0);
      EXPECT_GT(p.grad_norm_k, 0.0);
      EXPECT_TRUE(std::isfinite(p.train_bpc));
    }
  }
  EXPECT_EQ(r.loss_spikes, 0);
}

TEST(LmRun, SgdLearnsToo) {
  Fixture f;
  LmRunConfig c = tiny_run(f.corpus);
  c.optimizer = LmOptimizer::sgd;
  c.lr = 0.3;
  const LmRunResult r = train_lm_run(c, f.corpus);
  ASSERT_FALSE(r.diverged);
  EXPECT_LT(r.final_val_bpc, r.curve.front().val_bpc - 0.5);
}

TEST(LmRun, BitwiseReproducibleAndThreadIndependent) {
  Fixture f;
  LmRunConfig c = tiny_run(f.corpus);
  c.steps = 12;
  c.eval_every = 6;
  c.model.scale = Scaling::qk_norm_temperature();
  const LmRunResult a = train_lm_run(c, f.corpus);
  // The same run twice at once on two other threads, as the study spreads runs over cores.
  LmRunResult b, b2;
  std::thread t1([&] { b = train_lm_run(c, f.corpus); }), t2([&] { b2 = train_lm_run(c, f.corpus); });
  t1.join();
  t2.join();
  ASSERT_EQ(b2.curve.size(), a.curve.size());
  EXPECT_EQ(b2.curve.back().val_bpc, a.curve.back().val_bpc);
  ASSERT_EQ(a.curve.size(), b.curve.size());
  for (size_t i = 0; i < a.curve.size(); ++i) {
    EXPECT_EQ(a.curve[i].val_bpc, b.curve[i].val_bpc);
    EXPECT_EQ(a.curve[i].entropy, b.curve[i].entropy);
    if (i > 0) {
      EXPECT_EQ(a.curve[i].train_bpc, b.curve[i].train_bpc);
      EXPECT_EQ(a.curve[i].grad_norm_q, b.curve[i].grad_norm_q);
    }
  }
  // Another seed trains on other windows from other weights.
  c.seed = 2;
  EXPECT_NE(train_lm_run(c, f.corpus).curve[1].train_bpc, a.curve[1].train_bpc);
}

TEST(LmRun, NonFiniteLossStopsTheRunAsDiverged) {
  Fixture f;
  LmRunConfig c = tiny_run(f.corpus);
  c.optimizer = LmOptimizer::sgd;
  c.lr = 1e30;  // the first update makes every weight overflow
  c.grad_clip = 0;
  c.warmup = 0;
  const LmRunResult r = train_lm_run(c, f.corpus);
  EXPECT_TRUE(r.diverged);
  EXPECT_TRUE(std::isnan(r.final_val_bpc));
  EXPECT_LT(r.curve.size(), 4u);
}

TEST(LmRun, ModelMustMatchTheCorpus) {
  Fixture f;
  LmRunConfig c = tiny_run(f.corpus);
  c.model.vocab += 1;
  EXPECT_THROW(train_lm_run(c, f.corpus), Error);
  c = tiny_run(f.corpus);
  c.model.context = 5000;  // longer than the validation text
  EXPECT_THROW(train_lm_run(c, f.corpus), Error);
}

}  // namespace
}  // namespace attnlab::train::lm
