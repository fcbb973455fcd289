// Every experiment runs on its quick configuration and gives its verdicts; a
// configuration where the claim must fail turns the verdict (verdicts are computed,
// not written down); bad parameters are errors naming the key.
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>

#include "attnlab/lab.hpp"
#include "core/address_sanitizer.hpp"
#include "lab/claim_verdict.hpp"

namespace lab = attnlab::lab;

namespace {

lab::Result run_quick(const std::string& name, lab::Config overrides = {}) {
  const lab::Experiment* e = lab::find_experiment(name);
  if (e == nullptr) throw std::runtime_error("experiment not registered: " + name);
  lab::Config c = e->quick;
  for (const auto& [k, v] : overrides) c[k] = v;
  return lab::run(name, c, 1);
}

lab::Outcome outcome(const lab::Result& r, const std::string& claim) {
  for (const auto& v : r.verdicts)
    if (v.claim == claim && !v.supplementary) return v.outcome;
  throw std::runtime_error("no verdict on " + claim);
}

std::string describe(const lab::Result& r) {
  std::string s;
  for (const auto& v : r.verdicts) s += v.claim + " " + lab::to_string(v.outcome) + ": " + v.measured_text + "\n";
  return s;
}

}  // namespace

TEST(Experiments, AllRegisteredWithClaimsAndParameters) {
  for (const char* name : {"variance", "saturation", "jacobian", "gradflow", "classifier", "heads", "additive", "entropy",
                           "fading", "invariance", "softcap", "mup", "qknorm", "collapse", "reparam", "hedge"}) {
    const lab::Experiment* e = lab::find_experiment(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_FALSE(e->claims.empty()) << name;
    const auto params = e->parameters();
    EXPECT_FALSE(params.empty()) << name;
    for (const auto& p : params) {
      EXPECT_FALSE(p.help.empty()) << name << "." << p.name;
      EXPECT_FALSE(p.default_value.empty()) << name << "." << p.name;
    }
  }
}

struct Case {
  const char* experiment;
  std::vector<std::pair<std::string, lab::Outcome>> expected;
  const char* breaking_claim;  // this claim must be refuted under `breaking`
  lab::Config breaking;
  const char* why;
};
// What ctest shows beside the test name (instead of the struct's raw bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.experiment << ", breaking: " << c.why; }

class ExperimentCase : public ::testing::TestWithParam<Case> {};

TEST_P(ExperimentCase, QuickRunConfirmsAndBreakingConfigRefutes) {
  const Case& c = GetParam();
#ifndef ATTNLAB_ASAN  // sanitized, the breaking run alone: report.browser runs each quick one (2 min there)
  const auto r = run_quick(c.experiment);
  EXPECT_FALSE(r.figures.empty());
  EXPECT_FALSE(r.tables.empty());
  for (const auto& v : r.verdicts) {
    // A reader is told what each number of the check is (a unit, or what it is a ratio of),
    // in the page's notation rather than code's.
    if (std::isfinite(v.measured) || std::isfinite(v.tolerance))
      EXPECT_FALSE(v.unit.empty()) << v.claim << " (" << v.title << "): its numbers say no unit";
    for (const std::string* text : {&v.theory_text, &v.measured_text, &v.method, &v.plain})
      for (const char* code : {"sqrt(", "`", ">=", "<="})
        EXPECT_EQ(text->find(code), std::string::npos) << v.claim << " writes " << code << ": " << *text;
    if (!v.figure.empty()) {
      bool found = false;
      for (const auto& f : r.figures) found = found || f.name == v.figure;
      EXPECT_TRUE(found) << v.claim << " names a missing figure " << v.figure;
    }
  }
  for (const auto& [claim, expected] : c.expected)
    EXPECT_EQ(outcome(r, claim), expected) << c.experiment << "\n" << describe(r);
#endif
  const auto broken = run_quick(c.experiment, c.breaking);
  EXPECT_EQ(outcome(broken, c.breaking_claim), lab::Outcome::refuted)
      << c.experiment << " with " << c.why << "\n" << describe(broken);
}

using O = lab::Outcome;
INSTANTIATE_TEST_SUITE_P(
    Lab, ExperimentCase,
    ::testing::Values(
        Case{"variance", {{"C2", O::confirmed}, {"C1", O::confirmed}}, "C2", {{"scale_exponent", "1.0"}}, "the scale applied twice"},
        Case{"variance", {{"C1", O::confirmed}}, "C1", {{"keys", "same_as_queries"}}, "K = Q (not independent)"},
        Case{"saturation", {{"C3", O::confirmed}}, "C3", {{"x", "1,4,4"}}, "a tied argmax (no one-hot limit)"},
        Case{"jacobian", {{"C4", O::confirmed}, {"C5", O::confirmed}}, "C4", {{"formula", "diag"}}, "J = diag(s)"},
        // C7 is judged over the range measured: from d_k 16 to 4096 the softmax Jacobian without the scale is
        // larger up to 64–128 and smaller beyond, so the verdict depends on d_k (inconclusive). C6 is judged on
        // the whole gradient reaching Q and K, which does not vanish without the scale (C6IsJudgedOnTheWholeGradient).
        Case{"gradflow", {{"C6", O::refuted}, {"C7", O::inconclusive}}, "C6", {{"remedy", "inv_d"}}, "1/d (1/√d applied twice)"},
        // A sweep that stops at d_k = 32 must not confirm "vanishing": there the Jacobian is larger without the scale.
        Case{"gradflow", {{"C6", O::refuted}}, "C7", {{"dims", "16,32"}}, "a sweep stopping at d_k = 32"},
        Case{"classifier", {{"C10", O::confirmed}}, "C10", {{"loss", "softmax_mse"}}, "squared error on p"},
        Case{"heads", {{"C11", O::confirmed}}, "C11", {{"layout", "bshd_misread"}}, "[B,S,H,D] memory read as [B,H,S,D]"},
        Case{"additive", {{"C9", O::confirmed}}, "C9", {{"init", "standard_normal"}}, "weights without fan scaling"},
        // C12's quick verdict is inconclusive (one log n-aware policy holds the entropy, the other does
        // not: see docs/lab.md), so only its refutation is pinned down here.
        Case{"entropy", {}, "C12", {{"policies", "inv_sqrt_d,ssmax:0.05"}}, "a log n scale too small to matter"},
        // SSMax with s = 0.05: s·ln n grows too slowly to offset n − 1 competing keys, so it fades too.
        Case{"fading", {{"C13", O::confirmed}}, "C13", {{"ssmax_s", "0.05"}}, "SSMax's s too small to matter"},
        // C14 depends on the input (near constant only where one key stands out), so only its refutation is pinned.
        Case{"invariance", {{"C14", O::inconclusive}}, "C14", {{"candidate", "inv_d"}}, "a scale that does not grow with n (1/d_k)"},
        // The cap applied to the unit logits before the scale σ: the logits reach σ·c.
        Case{"softcap", {{"C15", O::confirmed}}, "C15", {{"cap_order", "before_scale"}}, "the cap applied before the scale"},
        // SGD's update carries the scale itself: 1/√d_k's change is then flat and 1/d_k's shrinks as d_k^−1.
        Case{"mup", {{"C16", O::confirmed}}, "C16", {{"optimizer", "sgd"}}, "SGD instead of Adam"},
        // No scale at all as the candidate: its best loss is far from 1/√d_k's, so it has no good rate.
        Case{"qknorm", {{"C17", O::confirmed}}, "C17", {{"candidate", "none"}}, "no scale instead of QK-norm"},
        // C18's outcome varies with the seeds (docs/lab.md), so only its refutation is pinned: a collapse threshold
        // no run reaches cannot come before any spike.
        Case{"collapse", {}, "C18", {{"collapse", "1e-6"}}, "a collapse threshold no run reaches"},
        // The "unscaled" arm given the scale: it learns as well as additive attention.
        Case{"hedge", {{"C20", O::confirmed}}, "C20", {{"scores", "additive,additive_unit,inv_sqrt_d,inv_sqrt_d"}},
             "the unscaled arm scaled"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.experiment) + std::to_string(info.index); });

// C7's verdict carries its outcome per range of d_k, and says in words which quantity turns where.
TEST(Experiments, C7IsJudgedOverTheRangeMeasured) {
  const auto r = run_quick("gradflow");
  const lab::Verdict* c7 = nullptr;
  for (const auto& v : r.verdicts)
    if (v.claim == "C7" && !v.supplementary) c7 = &v;
  ASSERT_NE(c7, nullptr);
  EXPECT_EQ(c7->figure, "gradflow_ratio");
  EXPECT_EQ(c7->range_variable, "d_k");
  ASSERT_GE(c7->ranges.size(), 2u) << describe(r);
  EXPECT_EQ(c7->ranges.front().outcome, O::refuted) << "small d_k: larger without the scale";
  EXPECT_EQ(c7->ranges.back().outcome, O::confirmed) << "d_k 4096: smaller without the scale";
  EXPECT_NE(c7->plain.find("vanishing, not explosion"), std::string::npos) << c7->plain;
  const auto stop_at_32 = run_quick("gradflow", {{"dims", "16,32"}});
  for (const auto& v : stop_at_32.verdicts)
    if (v.claim == "C7" && !v.supplementary) {
      EXPECT_NE(v.outcome, O::confirmed) << v.plain;
      ASSERT_EQ(v.ranges.size(), 1u);
      EXPECT_NE(v.plain.find("at no d_k up to 32"), std::string::npos) << v.plain;
    }
}

// C9 rests on v's initialisation: with v ~ N(0, 1) the additive score's spread grows as √d_k too,
// so the check of the claim's reason, "tanh's bound alone keeps it flat", is refuted beside the
// check of its conclusion, which holds with Xavier's v.
TEST(Experiments, C9ShowsBothInitialisationsOfV) {
  const auto r = run_quick("additive");
  ASSERT_EQ(r.verdicts.size(), 2u);
  EXPECT_EQ(outcome(r, "C9"), O::confirmed);
  const lab::Verdict& tanh_alone = r.verdicts[1];
  EXPECT_TRUE(tanh_alone.supplementary);  // a side check (claims.json: C9's main check is its conclusion)
  EXPECT_EQ(tanh_alone.outcome, O::refuted) << tanh_alone.measured_text;
  EXPECT_NEAR(tanh_alone.measured, 0.5, 0.15);  // the fitted power of d_k with v ~ N(0, 1)
  EXPECT_FALSE(r.tables[0].column("additive_unit_v_std").empty());
}

// C12: an entropy held flat counts only where the rows are not saturated. With the rule
// off (a limit above 1), the saturated planted SSMax case would count as holding.
TEST(Experiments, C12FlatEntropyCountsOnlyWithoutSaturation) {
  auto held = [](const lab::Result& r) {
    for (const auto& v : r.verdicts)
      if (!v.supplementary) return v.measured;
    return -1.0;
  };
  const auto with_rule = run_quick("entropy");
  const auto without_rule = run_quick("entropy", {{"saturation_limit", "1.01"}});
  EXPECT_LT(held(with_rule), held(without_rule)) << describe(with_rule) << describe(without_rule);
  for (const auto& v : with_rule.verdicts)
    if (!v.supplementary) EXPECT_NE(v.plain.find("flat only because the rows are saturated"), std::string::npos) << v.plain;
}

TEST(Experiments, EntropyGivesAVerdictOnC12) {
  const auto r = run_quick("entropy");
  bool main = false, supplementary = false;
  for (const auto& v : r.verdicts) {
    EXPECT_EQ(v.claim, "C12");
    EXPECT_NE(v.outcome, O::pending);
    (v.supplementary ? supplementary : main) = true;
  }
  EXPECT_TRUE(main);
  EXPECT_TRUE(supplementary);
}

// C13 reproduces the paper's Figure 1 exactly: the reference's largest softmax output for
// logits −2 and one +3 is 1/(1 + (n − 1)e⁻⁵), 0.0146 at n = 10⁴, and SSMax (s = 0.43) stays near 1.
TEST(Experiments, C13ReproducesFigure1Exactly) {
  const auto r = run_quick("fading");
  const lab::Table& t = r.tables.at(0);
  ASSERT_EQ(t.name, "fading_exact");
  const auto& n = t.column("n");
  for (size_t i = 0; i < t.rows(); ++i) {
    EXPECT_NEAR(t.column("softmax_max")[i], 1 / (1 + (n[i] - 1) * std::exp(-5.0)), 1e-12) << n[i];
    if (n[i] == 10000) EXPECT_NEAR(t.column("softmax_max")[i], 0.01463, 5e-5);
    if (n[i] >= 100) EXPECT_GT(t.column("ssmax_max")[i], 0.99) << n[i];
  }
}

// C14 explains C12's split by the derivation's assumption: on random inputs (β = 0) the row's
// weight is spread and log₅₁₂(n)/√d keeps most of 1/√d's rise in entropy; with one key standing
// out it keeps little. The share kept falls as the weight concentrates.
TEST(Experiments, C14TheAssumptionDecides) {
  const auto r = run_quick("invariance");
  const lab::Table& t = r.tables.at(1);
  ASSERT_EQ(t.name, "invariance_summary");
  ASSERT_GE(t.rows(), 3u);
  EXPECT_EQ(t.column("beta")[0], 0.0);
  EXPECT_EQ(t.column("assumption")[0], 0.0) << "random rows are spread";
  EXPECT_GT(t.column("ratio")[0], 0.5) << "random rows: most of 1/√d's rise is kept";
  EXPECT_LT(t.column("ratio").back(), 0.25) << "a key standing out: near constant";
  EXPECT_GT(t.column("anchor_max_prob").back(), t.column("anchor_max_prob")[0]);
}

// C15's check beside the claim: a cap keeps the typical row's gradient where the uncapped softmax
// saturates (σ far above the cap), and the check turns when the sweep stops before the rows saturate.
TEST(Experiments, C15GradientCheckDependsOnSaturation) {
  auto gradient_check = [](const lab::Result& r) {
    for (const auto& v : r.verdicts)
      if (v.claim == "C15" && v.supplementary) return v.outcome;
    throw std::runtime_error("no gradient check");
  };
  const auto r = run_quick("softcap");
  EXPECT_EQ(gradient_check(r), O::confirmed) << describe(r);
  const auto short_sweep = run_quick("softcap", {{"sigma_max", "2"}});
  EXPECT_EQ(gradient_check(short_sweep), O::refuted) << describe(short_sweep);
  // The bound itself: every capped logit below its cap, read from the forward's lse and max p.
  const lab::Table& t = r.tables.at(0);
  for (size_t i = 0; i < t.rows(); ++i)
    if (t.column("cap")[i] > 0) EXPECT_LE(t.column("max_logit")[i], t.column("cap")[i] * (1 + 1e-12));
}

// C17: at the highest rate the logits under 1/√d_k grow far beyond their size at initialisation
// and attention goes nearly one-hot; under QK-norm they stay bounded by the learned temperature.
TEST(Experiments, C17LogitsGrowWithoutQkNorm) {
  const auto r = run_quick("qknorm");
  const lab::Table& t = r.tables.at(0);
  ASSERT_EQ(t.name, "qknorm_runs");
  const double top = t.column("lr").back();
  double base = 0, cand = 0, init = 0;
  for (size_t i = 0; i < t.rows(); ++i)
    if (t.column("lr")[i] == top) {
      (t.column("scaling")[i] == 0 ? base : cand) = std::max(t.column("scaling")[i] == 0 ? base : cand, t.column("max_logit")[i]);
      init = std::max(init, t.column("max_logit_init")[i]);
    }
  EXPECT_GT(base, 20 * init) << "1/√d_k's logits grow at a high rate";
  EXPECT_LT(cand, 5 * init) << "QK-norm's stay near their initial size";
}

// C18's second check: on associative recall the stable runs' entropy falls below the collapse
// threshold too (the task's solution is one-hot attention), so low entropy does not single out
// the unstable runs; the check says so and cannot confirm (its entropy reaches exactly 0 in
// float, so no threshold separates them on this task).
TEST(Experiments, C18StableRunsCollapseTooOnRecall) {
  auto association = [](const lab::Result& r) {
    for (const auto& v : r.verdicts)
      if (v.claim == "C18" && v.title == "Low entropy singles out the unstable runs") return v;
    throw std::runtime_error("no association check");
  };
  const auto r = lab::run("collapse", {}, 0);
  const lab::Verdict v = association(r);
  EXPECT_TRUE(v.supplementary);  // a side check: C18's main check is "collapse comes first"
  EXPECT_EQ(v.outcome, O::inconclusive) << v.measured_text;
  EXPECT_NE(v.plain.find("one-hot attention"), std::string::npos) << v.plain;
}

TEST(Experiments, BadParametersNameTheKey) {
  auto message = [](const std::string& name, const lab::Config& c) {
    try {
      lab::run(name, c);
    } catch (const attnlab::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("variance", {{"dims", "0,4"}}).find("dims"), std::string::npos);
  EXPECT_NE(message("variance", {{"distributions", "cauchy"}}).find("distributions"), std::string::npos);
  EXPECT_NE(message("gradflow", {{"policies", "bogus"}}).find("policies"), std::string::npos);
  EXPECT_NE(message("gradflow", {{"remedy", "inv_d"}, {"policies", "none,inv_sqrt_d"}}).find("remedy"), std::string::npos);
  EXPECT_NE(message("saturation", {{"a_min", "-1"}}).find("a_min"), std::string::npos);
  EXPECT_NE(message("heads", {{"layout", "sideways"}}).find("layout"), std::string::npos);
  EXPECT_NE(message("entropy", {{"policies", "entropy_invariant"}}).find("policies"), std::string::npos);
  EXPECT_NE(message("classifier", {{"classes", "1"}}).find("classes"), std::string::npos);
  EXPECT_NE(message("additive", {{"init", "he"}}).find("init"), std::string::npos);
  EXPECT_NE(message("jacobian", {{"trials", "x"}}).find("trials"), std::string::npos);
  EXPECT_NE(message("fading", {{"headline_n", "12345"}}).find("headline_n"), std::string::npos);
  EXPECT_NE(message("fading", {{"high_logit", "-3"}}).find("high_logit"), std::string::npos);
  EXPECT_NE(message("invariance", {{"anchor_n", "500"}}).find("anchor_n"), std::string::npos);
  EXPECT_NE(message("invariance", {{"candidate", "bogus"}}).find("candidate"), std::string::npos);
  EXPECT_NE(message("softcap", {{"caps", "10,2"}}).find("caps"), std::string::npos);
  EXPECT_NE(message("softcap", {{"cap_order", "sideways"}}).find("cap_order"), std::string::npos);
  EXPECT_NE(message("mup", {{"optimizer", "lion"}}).find("optimizer"), std::string::npos);
  EXPECT_NE(message("mup", {{"widths", "64,16"}}).find("widths"), std::string::npos);
  EXPECT_NE(message("qknorm", {{"candidate", "inv_sqrt_d"}}).find("candidate"), std::string::npos);
  EXPECT_NE(message("qknorm", {{"rates", "0.1,0.01"}}).find("rates"), std::string::npos);
  EXPECT_NE(message("collapse", {{"precede_fraction", "0.2"}}).find("precede_fraction"), std::string::npos);
  EXPECT_NE(message("jacobian", {{"nonsense", "1"}}).find("nonsense"), std::string::npos);
}

TEST(Experiments, SameSeedSameNumbers) {
  const auto a = run_quick("saturation"), b = run_quick("saturation");
  ASSERT_EQ(a.tables.size(), b.tables.size());
  EXPECT_EQ(a.tables[0].columns, b.tables[0].columns);
  const auto c = lab::run("saturation", lab::find_experiment("saturation")->quick, 2);
  EXPECT_NE(a.tables[0].column("random_max_median"), c.tables[0].column("random_max_median"));
}

// Bitwise equal tables (a NaN, "no theory here", equals a NaN).
bool same_bits(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t c = 0; c < a.size(); ++c) {
    if (a[c].size() != b[c].size()) return false;
    if (std::memcmp(a[c].data(), b[c].data(), a[c].size() * sizeof(double)) != 0) return false;
  }
  return true;
}

// The lab's loops run on OpenMP with each index writing its own slot, combined in
// index order: every table is bitwise identical for 1, 2 and 3 threads (3 oversubscribes
// a 2-core machine). Covers every experiment with a parallel loop.
TEST(Experiments, SameNumbersForAnyThreadCount) {
#ifdef ATTNLAB_ASAN
  // A comparison of bits, which the sanitizers add nothing to (99 s there); the same quick runs
  // are sanitized in report.browser.
  GTEST_SKIP() << "release suite only (a comparison of bits)";
#endif
  for (const char* name : {"variance", "additive", "gradflow", "entropy", "fading", "invariance", "softcap", "mup"}) {
    const lab::Experiment* e = lab::find_experiment(name);
    ASSERT_NE(e, nullptr) << name;
    std::vector<lab::Result> runs;
    for (int threads : {1, 2, 3}) {
      lab::RunContext ctx;
      ctx.seed = 5;
      ctx.threads = threads;
      runs.push_back(e->run(e->quick, ctx));
    }
    for (size_t i = 1; i < runs.size(); ++i) {
      ASSERT_EQ(runs[0].tables.size(), runs[i].tables.size()) << name;
      for (size_t t = 0; t < runs[0].tables.size(); ++t)
        EXPECT_TRUE(same_bits(runs[0].tables[t].columns, runs[i].tables[t].columns))  // exact, NaN where NaN
            << name << " table " << runs[0].tables[t].name << ", threads 1 vs " << i + 1;
    }
  }
}

// ---- verdicts that must say no more than the data (issue 45) ---------------------------

namespace {
// A claim's overall outcome from its checks (the report's rule, lab/claim_verdict.hpp).
lab::Outcome overall(const lab::Result& r, const std::string& claim) {
  std::vector<lab::Verdict> checks;
  for (const auto& v : r.verdicts)
    if (v.claim == claim) checks.push_back(v);
  if (checks.empty()) throw std::runtime_error("no verdict on " + claim);
  return lab::claim_verdict(checks);
}

const lab::Verdict& main_check(const lab::Result& r, const std::string& claim) {
  for (const auto& v : r.verdicts)
    if (v.claim == claim && !v.supplementary) return v;
  throw std::runtime_error("no verdict on " + claim);
}
}  // namespace

// C7 is judged on the softmax Jacobian, the quantity article 003 argues about: its answer and the d_k
// where it turns are the same whether the sweep stops at 1024 or goes on to 4096. (On the combined
// query-and-key gradient, dominated by the key's, the sweep to 1024 said "refuted", the full one
// "depends on d_k".)
TEST(Experiments, C7DoesNotFlipWhereTheSweepStops) {
#ifdef ATTNLAB_ASAN
  // Two gradflow runs at the report's configuration: 2.3 min under the sanitizers. The release
  // suite runs it; under ASan the quick experiment cases run the same code.
  GTEST_SKIP() << "release suite only (two gradflow runs at the report's configuration)";
#endif
  // The report's configuration (128 keys, d_k 16–4096), two policies to save time.
  const lab::Config c{{"policies", "none,inv_sqrt_d"}, {"table_rows", "256"}};
  lab::Config stop = c;
  stop["dims"] = "16,32,64,128,256,512,1024";
  const auto full = lab::run("gradflow", c, 0);
  const auto to_1024 = lab::run("gradflow", stop, 0);
  EXPECT_EQ(overall(full, "C7"), overall(to_1024, "C7")) << describe(full) << describe(to_1024);
  auto turn = [](const lab::Result& r) {
    const auto& v = main_check(r, "C7");
    return v.ranges.empty() || v.ranges.back().outcome != O::confirmed ? -1.0 : v.ranges.back().from;
  };
  EXPECT_EQ(turn(full), turn(to_1024)) << describe(full) << describe(to_1024);
}

// C7 reports the Jacobian, the query's and the key's gradient separately, each by range of d_k.
TEST(Experiments, C7ReportsJacobianQueryAndKeySeparately) {
  const auto r = run_quick("gradflow");
  std::vector<const lab::Verdict*> c7;
  for (const auto& v : r.verdicts)
    if (v.claim == "C7") c7.push_back(&v);
  ASSERT_EQ(c7.size(), 3u) << describe(r);
  EXPECT_FALSE(c7[0]->supplementary);
  EXPECT_NE(c7[0]->measured_text.find("‖J‖"), std::string::npos) << c7[0]->measured_text;
  EXPECT_TRUE(c7[1]->supplementary && c7[2]->supplementary);
  EXPECT_NE(c7[1]->title.find("query"), std::string::npos) << c7[1]->title;
  EXPECT_NE(c7[2]->title.find("key"), std::string::npos) << c7[2]->title;
  for (const auto* v : c7) EXPECT_EQ(v->range_variable, "d_k");
}

// C6 is judged on ‖dQ‖_F and ‖dK‖_F, the gradient the weights receive: without the scale it does not vanish
// (it is larger than with the scale at every d_k), so the claim does not hold, whatever the typical row says.
// Beside it the typical row's gradient does vanish, and turns on 1/d (the scale applied twice).
TEST(Experiments, C6IsJudgedOnTheWholeGradient) {
  const auto r = run_quick("gradflow");
  const lab::Verdict& total = main_check(r, "C6");
  EXPECT_EQ(total.outcome, O::refuted) << describe(r);
  EXPECT_NE(total.plain.find("‖dQ‖_F"), std::string::npos) << total.plain;
  ASSERT_FALSE(total.ranges.empty());
  for (const auto& range : total.ranges) EXPECT_EQ(range.outcome, O::refuted) << range.text;
  EXPECT_EQ(overall(r, "C6"), O::refuted);
  auto row_check = [](const lab::Result& res) -> const lab::Verdict* {
    for (const auto& v : res.verdicts)
      if (v.claim == "C6" && v.check == "typical_row") return &v;
    return nullptr;
  };
  ASSERT_NE(row_check(r), nullptr);
  EXPECT_TRUE(row_check(r)->supplementary);
  EXPECT_EQ(row_check(r)->outcome, O::confirmed) << describe(r);
  const auto twice = run_quick("gradflow", {{"remedy", "inv_d"}});
  ASSERT_NE(row_check(twice), nullptr);
  EXPECT_EQ(row_check(twice)->outcome, O::refuted) << describe(twice);
}

// C6 states where, along d_k, the typical query's gradient starts to fall, with the trial-to-trial
// uncertainty of each step; another seed's boundary is the same or the neighbouring d_k (a step whose
// change is within 2 standard errors is called neither way, so the boundary is known to one step).
TEST(Experiments, C6StatesItsBoundaryWithUncertainty) {
#ifdef ATTNLAB_ASAN
  // Gradflow runs at six d_k up to 512: 2.5 min under the sanitizers. The release suite runs
  // it; under ASan the quick experiment cases run the same code.
  GTEST_SKIP() << "release suite only (gradflow runs at d_k up to 512)";
#endif
  auto row = [](const lab::Result& r) -> const lab::Verdict& {
    for (const auto& v : r.verdicts)
      if (v.claim == "C6" && v.check == "typical_row") return v;
    throw std::runtime_error("no typical-row check of C6");
  };
  auto boundary = [&](const lab::Result& r) {
    const auto& v = row(r);
    for (const auto& range : v.ranges) EXPECT_NE(range.text.find("±"), std::string::npos) << range.text;
    return v.ranges.empty() ? -1.0 : v.ranges.back().from;
  };
  const lab::Config c{{"dims", "16,32,64,128,256,512"}, {"n_keys", "128"}};
  const double b1 = boundary(run_quick("gradflow", c));
  const auto r2 = run_quick("gradflow", c);
  const lab::Result other_seed = lab::run("gradflow", [&] {
    lab::Config q = lab::find_experiment("gradflow")->quick;
    for (const auto& [k, v] : c) q[k] = v;
    return q;
  }(), 2);
  const double b2 = boundary(other_seed);
  EXPECT_GT(b1, 16);
  EXPECT_LE(std::max(b1, b2) / std::min(b1, b2), 2.0) << describe(r2) << describe(other_seed);
  EXPECT_NE(row(r2).plain.find("trials"), std::string::npos) << row(r2).plain;
}

// C19 under C8's seed rule: at the same learning rate the smaller init reaches 90 % in fewer seeds than 1/√d_k
// (2 of 3 against 3 of 3 in seed 0's quick run, its median within the scaled runs' spread), which counts as
// worse: the claim does not hold. With W_q's and W_k's
// rate matched (× d_k^(−1/4) under Adam) the stand-in is the scaled model reparametrised: its first step moves the
// logits as far and it learns like it; given the usual init instead (the breaking configuration) it cannot.
TEST(Experiments, C19IsJudgedByC8sSeedRuleBesideAMatchedRate) {
  auto check = [](const lab::Result& r, const std::string& name) -> const lab::Verdict& {
    for (const auto& v : r.verdicts)
      if (v.claim == "C19" && v.check == name) return v;
    throw std::runtime_error("no C19 check " + name);
  };
  const auto r = lab::run("reparam", lab::find_experiment("reparam")->quick, 0);
  EXPECT_NE(check(r, "statement").measured_text.find("2 of 3 seeds"), std::string::npos) << describe(r);
  EXPECT_EQ(check(r, "statement").outcome, O::refuted) << describe(r);
  EXPECT_EQ(overall(r, "C19"), O::refuted);
  const auto& matched = check(r, "matched_rate");
  EXPECT_TRUE(matched.supplementary);
  EXPECT_EQ(matched.outcome, O::confirmed) << describe(r);
  EXPECT_NEAR(matched.measured, matched.theory, 1e-9) << "the matched arm follows the scaled one step for step";
  const auto broken = run_quick("reparam", {{"small_init", "unit"}});
  EXPECT_EQ(check(broken, "matched_rate").outcome, O::refuted) << describe(broken);
}

// C20's side checks: Vaswani's "similar for small d_k" at the smallest d_k, additive attention without the
// 1/√d_k hidden in its init (a ~ N(0, 1)), and the scale closing the gap; the rates are chosen on held-out
// tuning seeds (cached from --full by default, tuned in the run with rate_choice=tuned), never the reported ones.
TEST(Experiments, C20ChecksTheHiddenScaleAndSmallDkOnHeldOutRates) {
  const auto r = run_quick("hedge");
  std::vector<std::string> checks;
  for (const auto& v : r.verdicts) checks.push_back(v.check);
  EXPECT_EQ(checks, (std::vector<std::string>{"statement", "small_similar", "hidden_scale", "scale_closes"}));
  EXPECT_EQ(r.config.at("rate_choice"), "cached");
  const auto tuned = run_quick("hedge", {{"rate_choice", "tuned"}, {"rates", "3e-3,1e-2"}, {"dims", "16,64"}, {"steps", "60"}});
  EXPECT_EQ(tuned.config.at("rate_choice"), "tuned");
  bool tuning_table = false;
  for (const auto& t : tuned.tables) tuning_table = tuning_table || t.name == "hedge_tuning";
  EXPECT_TRUE(tuning_table);
  EXPECT_NE(tuned.setup.find("held-out tuning seeds"), std::string::npos) << tuned.setup;
}

// C18: when every run collapses, stable ones included, collapse cannot single out unstable training:
// the claim must not be confirmed (seed 0's default study: all 18 runs collapse).
TEST(Experiments, C18NotConfirmedWhenEveryRunCollapses) {
  const auto r = lab::run("collapse", {}, 0);
  const lab::Table& runs = r.tables.at(0);
  ASSERT_EQ(runs.name, "collapse_runs");
  for (double step : runs.column("collapse_step")) ASSERT_GE(step, 0) << "the premise: every run collapses";
  EXPECT_NE(overall(r, "C18"), O::confirmed) << describe(r);
}

// C9's stated reason is tanh's bound: the check of it sits beside the claim's conclusion, and it fails
// (with v ~ N(0, 1) the spread grows as √d_k), so C9 cannot be confirmed: it is mixed.
TEST(Experiments, C9TanhBoundFailingMakesItMixed) {
  const auto r = run_quick("additive");
  bool tanh_check = false;
  for (const auto& v : r.verdicts)
    if (v.claim == "C9" && v.check == "tanh_bound" && v.outcome == O::refuted) tanh_check = std::abs(v.measured - 0.5) < 0.15;
  EXPECT_TRUE(tanh_check) << describe(r);
  EXPECT_EQ(overall(r, "C9"), O::inconclusive);
}

// C10 measured the gradient at the logits, not whether the final logits need controlling.
TEST(Experiments, C10SaysNoMoreThanMeasured) {
  const auto r = run_quick("classifier");
  const auto& v = main_check(r, "C10");
  EXPECT_EQ(v.title.find("needs no scale"), std::string::npos) << v.title;
  EXPECT_NE(v.plain.find("30"), std::string::npos) << v.plain;
  EXPECT_NE(v.plain.find("z-loss"), std::string::npos) << v.plain;
}

// C12 says where the entropy view holds: a log n-aware case that keeps the entropy flat without
// saturating (SSMax on random inputs) bears it out, named as such, not folded into "not borne out".
TEST(Experiments, C12NamesWhereTheEntropyViewHolds) {
  const auto r = lab::run("entropy", {}, 0);
  const auto& v = main_check(r, "C12");
  ASSERT_GT(v.measured, 0) << "the premise: a case holds without saturating\n" << describe(r);
  EXPECT_NE(v.plain.find("borne out, away from saturation, for SSMax"), std::string::npos) << v.plain;
}

// C14 is the entropy-invariant scale's claim without its escape clause: near constant on
// concentrated rows, not on spread ones, so it depends on the input.
TEST(Experiments, C14DependsOnTheInput) {
  const auto r = run_quick("invariance");
  const auto& v = main_check(r, "C14");
  EXPECT_EQ(overall(r, "C14"), O::inconclusive) << describe(r);
  EXPECT_EQ(v.statement.find("C12"), std::string::npos) << v.statement;
  ASSERT_GE(v.ranges.size(), 2u);
  EXPECT_EQ(v.ranges.front().outcome, O::refuted) << "spread rows";
  EXPECT_EQ(v.ranges.back().outcome, O::confirmed) << "concentrated rows";
}
