// A claim's overall verdict follows from its checks' outcomes by one rule (claim_verdict):
// each case of the rule, and over every combination of up to three checks, that a claim
// with a failed check is never confirmed. Then the catalogue it is read from (claims.json):
// its thresholds, and an unknown one refused by name.
#include <gtest/gtest.h>

#include "attnlab/lab.hpp"
#include "lab/claim_verdict.hpp"
#include "lab/claims_data.hpp"

namespace lab = attnlab::lab;
using lab::Outcome;

namespace {

lab::Verdict check(Outcome outcome, bool supplementary = false) {
  lab::Verdict v;
  v.claim = "C9";
  v.outcome = outcome;
  v.supplementary = supplementary;
  return v;
}

constexpr Outcome kAll[] = {Outcome::confirmed, Outcome::refuted, Outcome::inconclusive, Outcome::pending};

TEST(ClaimVerdict, NoChecksIsPending) { EXPECT_EQ(lab::claim_verdict({}), Outcome::pending); }

TEST(ClaimVerdict, EveryMainCheckConfirmedHolds) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed)}), Outcome::confirmed);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::confirmed)}), Outcome::confirmed);
  // A supplementary check that holds or cannot decide leaves a claim that holds as it is.
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::inconclusive, true)}), Outcome::confirmed);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::confirmed, true)}), Outcome::confirmed);
}

TEST(ClaimVerdict, MainChecksRefutedWithNoneConfirmedDoesNotHold) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::refuted)}), Outcome::refuted);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::refuted), check(Outcome::inconclusive)}), Outcome::refuted);
  // A supplementary check that holds does not rescue a claim whose main checks fail.
  EXPECT_EQ(lab::claim_verdict({check(Outcome::refuted), check(Outcome::confirmed, true)}), Outcome::refuted);
}

// C9 in the default report: the spread check holds, tanh's bound (the claim's stated reason) fails.
TEST(ClaimVerdict, AMainCheckThatHoldsBesideOneThatFailsIsMixed) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::refuted)}), Outcome::inconclusive);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::refuted), check(Outcome::confirmed)}), Outcome::inconclusive);
}

TEST(ClaimVerdict, AnUndecidedMainCheckIsInconclusive) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::inconclusive)}), Outcome::inconclusive);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::pending)}), Outcome::inconclusive);
  // C18 in the default report: both checks undecided.
  EXPECT_EQ(lab::claim_verdict({check(Outcome::inconclusive), check(Outcome::inconclusive)}), Outcome::inconclusive);
}

TEST(ClaimVerdict, AFailedSupplementaryCheckMakesAClaimThatHoldsMixed) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed), check(Outcome::refuted, true)}), Outcome::inconclusive);
  // C12 in the default report: main check undecided, the one beside it fails.
  EXPECT_EQ(lab::claim_verdict({check(Outcome::inconclusive), check(Outcome::refuted, true)}), Outcome::inconclusive);
}

TEST(ClaimVerdict, OnlySupplementaryChecksCountAsMain) {
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed, true)}), Outcome::confirmed);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::refuted, true)}), Outcome::refuted);
  EXPECT_EQ(lab::claim_verdict({check(Outcome::confirmed, true), check(Outcome::refuted, true)}),
            Outcome::inconclusive);
}

// The badge's promise over every combination of up to three checks, main or beside: a claim
// with a failed check never holds, and one holds only when every main check does.
TEST(ClaimVerdict, AClaimWithAFailedCheckIsNeverConfirmed) {
  int combinations = 0;
  for (int n = 1; n <= 3; ++n) {
    const int kinds = 8;  // 4 outcomes × main or supplementary
    int total = 1;
    for (int i = 0; i < n; ++i) total *= kinds;
    for (int code = 0; code < total; ++code) {
      std::vector<lab::Verdict> checks;
      for (int i = 0, c = code; i < n; ++i, c /= kinds) checks.push_back(check(kAll[c % 4], (c / 4) % 2 == 1));
      bool any_failed = false, any_main = false, every_main_holds = true;
      for (const auto& v : checks) any_main = any_main || !v.supplementary;
      for (const auto& v : checks) {
        any_failed = any_failed || v.outcome == Outcome::refuted;
        if (!any_main || !v.supplementary) every_main_holds = every_main_holds && v.outcome == Outcome::confirmed;
      }
      const Outcome got = lab::claim_verdict(checks);
      if (any_failed) EXPECT_NE(got, Outcome::confirmed) << "combination " << code << " of " << n << " checks";
      EXPECT_EQ(got == Outcome::confirmed, every_main_holds && !any_failed) << "combination " << code << " of " << n;
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
