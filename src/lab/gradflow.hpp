#pragma once
// The `gradflow` experiment's configuration and what it measures (exp_gradflow.cpp), shared with
// C6's verdict (c6_verdict.cpp), which judges the sweep and the table. Internal to the lab.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"
#include "attnlab/scale.hpp"
#include "lab/lab_util.hpp"
#include "lab/words.hpp"

namespace attnlab::lab {

struct GradflowConfig {
  std::vector<int64_t> dims{16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  std::vector<std::string> policies{"none", "inv_sqrt_d", "inv_d", "entropy_invariant"};
  int64_t n_keys = 128;
  int64_t trials = 2;
  std::string upstream = "unit_dp";  // dO ~ N(0, 1/d_v) so that dP = dO·v ~ N(0, 1) at every d; or "unit": dO ~ N(0, 1)
  std::string baseline = "none";     // the policy C6/C7 compare against the remedy
  std::string remedy = "inv_sqrt_d";
  double same_order_factor = 4.0;  // "stays of the same order": max/min of ‖dQ‖, ‖dK‖ over d_k within this factor
  double vanish_factor =
      10.0;  // "falls towards 0": without the scale the typical row falls by more than an order of magnitude
  std::vector<int64_t> model_dims{
      64, 256};  // the head sizes models use (BERT 64, most LLMs 128, some 256): marked in C7's figure
  // Where the typical query's gradient starts to fall without the scale (C6's boundary): more trials of the
  // baseline at d_k up to boundary_max_dim, where one trial is cheap and the steps are small.
  int64_t boundary_trials = 32;
  int64_t boundary_max_dim = 512;
  // The issue's table of median ‖J‖_F for 64 keys.
  int64_t table_keys = 64;
  std::vector<int64_t> table_dims{16, 64, 256, 1024};
  std::vector<double> table_unscaled{0.335, 0.22, 0.028, 1.8e-4};
  double table_scaled = 0.18;
  int64_t table_rows = 8192;
  int64_t table_groups = 16;
  double table_z = 4.0;          // agreement: |log(measured/expected)| ≤ table_z·SE + table_rounding
  double table_rounding = 0.05;  // the issue's numbers carry 2–3 significant digits ("≈ 0.18")
  void bind(Params& p) {
    using namespace rules;
    p.add("dims", dims, "head dims d_k", at_least_items(2) & each(positive()));
    p.add("policies", policies,
          "scale policies (ScalePolicy::parse names: none, inv_sqrt_d, inv_d, entropy_invariant, ssmax, or a number)",
          each(util::scale_policy_rule()));
    p.add("n_keys", n_keys, "queries and keys per problem (seq)", at_least(2));
    p.add("trials", trials, "independent problems per (policy, d_k)", positive());
    p.add("upstream", upstream,
          "upstream gradient dO: unit_dp (N(0, 1/d_v), so dO·v ~ N(0,1) for every d) or unit (N(0, 1))",
          one_of({"unit_dp", "unit"}));
    p.add("baseline", baseline, "policy judged as 'without the scale'");
    p.add("remedy", remedy, "policy judged as 'with the scale' (set inv_d to apply 1/√d twice: C6 must then fail)");
    p.add("same_order_factor", same_order_factor,
          "with the remedy, max/min of ‖dQ‖ and ‖dK‖ over d_k must stay below this");
    p.add("vanish_factor", vanish_factor,
          "without the scale, ‖J‖ and ‖dQ‖ must fall by more than this from the smallest to the largest d_k");
    p.add("model_dims", model_dims,
          "smallest and largest head size models use (marked in the figures, named in the verdicts)",
          each(positive()) & increasing());
    p.add("boundary_trials", boundary_trials,
          "trials of the baseline for C6's boundary (each step's change ± 2 standard errors)", positive());
    p.add("boundary_max_dim", boundary_max_dim,
          "largest d_k measured with boundary_trials (beyond it: the main trials)");
    p.add("table_keys", table_keys, "keys per row for the reproduced ‖J‖_F table");
    p.add("table_dims", table_dims, "d_k of the reproduced table", non_empty() & each(positive()));
    p.add("table_unscaled", table_unscaled, "expected median ‖J‖_F without scale (the issue's table)");
    p.add("table_scaled", table_scaled, "expected median ‖J‖_F with 1/√d (the issue's table)");
    p.add("table_rows", table_rows, "query rows sampled per table entry", positive());
    p.add("table_groups", table_groups, "row groups whose medians give the sampling error", at_least(2));
    p.add("table_z", table_z, "agreement in standard errors of log(median)");
    p.add("table_rounding", table_rounding, "extra allowance in log for the rounding of the issue's numbers");
    p.check({"table_unscaled", "table_dims"}, "as many values as table_dims",
            [this] { return table_unscaled.size() == table_dims.size(); });
    p.check({"model_dims"}, "two head sizes, smallest then largest", [this] { return model_dims.size() == 2; });
    const auto among_policies = [this](const std::string& name) {
      return std::find(policies.begin(), policies.end(), name) != policies.end();
    };
    p.check({"baseline", "policies"}, "baseline is one of the policies",
            [this, among_policies] { return among_policies(baseline); });
    p.check({"remedy", "policies"}, "remedy is one of the policies",
            [this, among_policies] { return among_policies(remedy); });
  }
};

struct Measure {
  double dq = 0, dk = 0, ds = 0, j_mean = 0, j_median = 0, saturated = 0, max_prob = 0;
  double dq_row = 0, dk_row = 0;  // medians over rows of ‖dQ_i‖, ‖dK_j‖: the typical query and key
};

// The policies to compare; C6 and C7 set `baseline` (no scale) against `remedy` (1/√d).
struct Policies {
  std::vector<ScalePolicy> list;
  size_t base = 0, remedy = 0;
};

struct PolicySweep {
  Table table{"gradflow",
              {"policy", "d_k", "scale", "norm_dQ", "norm_dK", "norm_dS", "mean_J_fro", "median_J_fro",
               "saturated_fraction", "mean_max_prob", "median_row_dQ", "median_row_dK"}};
  std::vector<std::vector<Measure>> by_policy;  // [policy][d_k], averaged over trials
  std::vector<std::vector<double>>
      base_dq_trials;  // [d_k][trial] the baseline's typical query gradient (C6's boundary)
};

// The issue's table of median ‖J‖_F, measured beside the values it quotes.
struct IssueTable {
  Table table{"jacobian_median_table",
              {"d_k", "unscaled_median", "unscaled_log_se", "unscaled_expected", "scaled_median", "scaled_log_se",
               "scaled_expected"}};
  double worst = 0;  // largest |log ratio| / allowance
  std::string text;
};

// C6 (c6_verdict.cpp). The main check, on the whole gradient reaching Q and K (‖dQ‖_F, ‖dK‖_F: what
// W_q's and W_k's gradients are made of): without the scale it falls towards 0 as d_k grows, with it it
// stays of the same order, and the ‖J‖_F table matches the issue's values; its ranges say at which d_k
// the unscaled total is smaller than the scaled one. Beside it ("typical_row"): the same on the typical
// row (median over rows), with where along d_k it starts to fall.
std::vector<Verdict> verdicts_c6(const GradflowConfig& c, const Policies& policies, const PolicySweep& sweep,
                                 const IssueTable& issue, const Words& words);

}  // namespace attnlab::lab
