// A claim's overall verdict follows from its checks' outcomes by one rule (claim_verdict):
// each case of the rule, and over every combination of up to three checks, that a claim
// whose main check fails does not hold and one with any failed check is never confirmed. Then the catalogue it is read from (claims.json):
// its thresholds, and an unknown one refused by name.
#include <gtest/gtest.h>

#include "attnlab/lab.hpp"
#include "lab/claim_verdict.hpp"
#include "lab/claims_data.hpp"

namespace lab = attnlab::lab;
using lab::Outcome;

namespace {

// A check of C9 (whose main check is "statement"): the main one, or one beside it.
lab::Verdict check(Outcome outcome, bool side = false) {
  lab::Verdict v;
  v.claim = "C9";
  v.outcome = outcome;
  v.check = side ? "tanh_bound" : "statement";
  return v;
}

constexpr Outcome kAll[] = {Outcome::confirmed, Outcome::refuted, Outcome::inconclusive, Outcome::pending};

TEST(ClaimVerdict, NoChecksIsPending) { EXPECT_EQ(lab::claim_verdict({}), Outcome::pending); }

TEST(ClaimVerdict, TheMainCheckConfirmedAndNoSideCheckRefutedHolds) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed)}), Outcome::confirmed);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::inconclusive, true)}), Outcome::confirmed);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::confirmed, true)}), Outcome::confirmed);
}

// The rule's point: a side check that agrees never rescues a claim whose main check contradicts it
// (the old rule called this "mixed").
TEST(ClaimVerdict, TheMainCheckRefutedDoesNotHoldWhateverTheSideChecksSay) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::refuted), check(Outcome::confirmed, true)}), Outcome::refuted);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed, true), check(Outcome::refuted)}), Outcome::refuted);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::refuted), check(Outcome::inconclusive, true)}), Outcome::refuted);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::refuted)}), Outcome::refuted);
  // An experiment that reports the main check twice (two settings): one refuted refutes.
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::refuted)}), Outcome::refuted);
}

TEST(ClaimVerdict, AFailedSideCheckMakesAClaimThatHoldsMixed) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::refuted, true)}), Outcome::inconclusive);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::inconclusive), check(Outcome::refuted, true)}), Outcome::inconclusive);
}

TEST(ClaimVerdict, AnUndecidedMainCheckIsInconclusive) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::inconclusive)}), Outcome::inconclusive);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::pending), check(Outcome::confirmed, true)}), Outcome::inconclusive);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::pending)}), Outcome::inconclusive);
}

// Side checks alone (the main check's experiment not run) never decide a claim either way.
TEST(ClaimVerdict, SideChecksAloneAreInconclusive) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed, true)}), Outcome::inconclusive);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::refuted, true)}), Outcome::inconclusive);
}

// The main check is data: claims.json's main_check, e.g. Adam's run for C8, not SGD's.
TEST(ClaimVerdict, TheCatalogueNamesEachClaimsMainCheck) {
  EXPECT_EQ(lab::claim("C8").main_check, "lm_unit");
  EXPECT_EQ(lab::claim("C9").main_check, "statement");
  for (const auto& c : lab::claims()) EXPECT_FALSE(c.main_check.empty()) << c.id;
  lab::Verdict adam, sgd;  // the language models under the unit init (main) and GPT-2's init (beside it)
  adam.claim = sgd.claim = "C8";
  adam.check = "lm_unit", sgd.check = "lm_gpt2";
  adam.outcome = Outcome::refuted, sgd.outcome = Outcome::confirmed;
  EXPECT_EQ(lab::claim_verdict({adam, sgd}), Outcome::refuted);
  std::swap(adam.outcome, sgd.outcome);
  EXPECT_EQ(lab::claim_verdict({adam, sgd}), Outcome::inconclusive);
}

// The badge's promises over every combination of up to three checks, main or beside: a claim
// with a failed check never holds, and one whose main check fails never holds nor is mixed.
TEST(ClaimVerdict, AClaimWithAFailedCheckIsNeverConfirmed) {
  int combinations = 0;
  for (int n = 1; n <= 3; ++n) {
    const int kinds = 8;  // 4 outcomes × main or beside
    int total = 1;
    for (int i = 0; i < n; ++i) total *= kinds;
    for (int code = 0; code < total; ++code) {
      std::vector<lab::Verdict> checks;
      for (int i = 0, c = code; i < n; ++i, c /= kinds) checks.push_back(check(kAll[c % 4], (c / 4) % 2 == 1));
      bool any_failed = false, main_failed = false, any_main = false, every_main_holds = true;
      for (const auto& v : checks) {
        const bool main = v.check == "statement";
        any_main = any_main || main;
        any_failed = any_failed || v.outcome == Outcome::refuted;
        main_failed = main_failed || (main && v.outcome == Outcome::refuted);
        if (main) every_main_holds = every_main_holds && v.outcome == Outcome::confirmed;
      }
      const Outcome got = lab::claim_verdict(checks);
      if (any_failed) EXPECT_NE(got, Outcome::confirmed) << "combination " << code << " of " << n << " checks";
      EXPECT_EQ(got == Outcome::refuted, main_failed) << "combination " << code << " of " << n;
      EXPECT_EQ(got == Outcome::confirmed, any_main && every_main_holds && !any_failed) << "combination " << code << " of " << n;
      EXPECT_NE(got, Outcome::pending);
      ++combinations;
    }
  }
  EXPECT_EQ(combinations, 8 + 64 + 512);
}

TEST(LabCatalogue, ThresholdsComeFromTheData) {
  EXPECT_EQ(lab::claim_threshold("C7", "ratio"), 1.0);
  EXPECT_EQ(lab::claim_threshold("C18", "stable_collapsed_share"), 1.0 / 3);
  EXPECT_EQ(lab::claim_threshold("C19", "init_agreement"), 1e-4);
}

TEST(LabCatalogue, AMissingThresholdIsAnErrorNamingIt) {
  try {
    lab::claim_threshold("C7", "no_such_threshold");
    FAIL() << "no error";
  } catch (const attnlab::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("C7"), std::string::npos) << what;
    EXPECT_NE(what.find("no_such_threshold"), std::string::npos) << what;
    EXPECT_NE(what.find("ratio"), std::string::npos) << what;  // the thresholds C7 does have
  }
  EXPECT_THROW(lab::claim_threshold("C1", "ratio"), attnlab::Error);   // C1 has none
  EXPECT_THROW(lab::claim_threshold("C99", "ratio"), attnlab::Error);  // no such claim
}

TEST(LabCatalogue, EveryClaimNamesKnownSources) {
  ASSERT_GE(lab::claims().size(), 20u);
  EXPECT_EQ(lab::claims().front().id, "C1");
  for (const auto& c : lab::claims()) {
    EXPECT_FALSE(c.title.empty()) << c.id;
    EXPECT_FALSE(c.statement.empty()) << c.id;
    for (const auto& s : c.seeds) EXPECT_NO_THROW(lab::source(s)) << c.id;
    for (const auto& q : c.quotes) EXPECT_NO_THROW(lab::source(q.seed)) << c.id;
  }
  EXPECT_EQ(lab::source("ssmax").cite, "Nakanishi 2025");
}

}  // namespace
