// The study's CSV tables with names spelled out (train/csv.hpp).
#include "train/csv.hpp"

#include <fmt/format.h>
#include <limits>

namespace attnlab::train {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

std::string runs_csv(const StudyResult& study) {
  std::string s =
      "task,init,optimizer,d_k,scale,seed,lr,steps,steps_to_threshold,final_accuracy,final_loss,diverged,"
      "entropy_init,jacobian_fro_init,grad_qk_first,seconds\n";
  for (const auto& r : study.runs) {
    const auto& c = r.config;
    const CurvePoint* first = r.first_trained_point();
    s += fmt::format("{},{},{},{},{},{},{},{},{},{:.4f},{:.5g},{},{:.5g},{:.5g},{:.5g},{:.3f}\n", to_string(c.task.kind),
                     to_string(c.model.init), to_string(c.optimizer), c.model.d_k, c.model.scale.name(), c.seed,
                     c.lr > 0 ? c.lr : default_lr(c.optimizer), c.steps, r.steps_to_threshold, r.final_accuracy,
                     r.final_loss, r.diverged ? 1 : 0, r.curve.front().entropy, r.curve.front().jacobian_fro,
                     first ? first->grad_qk : kNaN, r.seconds);
  }
  return s;
}

std::string curves_csv(const StudyResult& study) {
  std::string s =
      "task,init,optimizer,d_k,scale,seed,step,train_loss,eval_loss,eval_accuracy,entropy,jacobian_fro,max_prob,"
      "grad_qk,temperature,max_logit\n";
  for (const auto& r : study.runs) {
    const auto& c = r.config;
    for (const auto& p : r.curve)
      s += fmt::format("{},{},{},{},{},{},{},{:.5g},{:.5g},{:.4f},{:.5g},{:.5g},{:.5g},{:.5g},{:.5g},{:.5g}\n",
                       to_string(c.task.kind), to_string(c.model.init), to_string(c.optimizer), c.model.d_k,
                       c.model.scale.name(), c.seed, p.step, p.train_loss, p.eval_loss, p.eval_accuracy, p.entropy,
                       p.jacobian_fro, p.max_prob, p.grad_qk, p.temperature, p.max_logit);
  }
  return s;
}

std::string cells_csv(const std::vector<CellSummary>& cells) {
  std::string s =
      "task,init,optimizer,d_k,scale,runs,reached,median_steps,median_censored,mean_final_accuracy,"
      "min_final_accuracy,entropy_start,entropy_end,jacobian_fro_start,jacobian_fro_end,grad_qk_first,diverged\n";
  for (const auto& c : cells)
    s += fmt::format("{},{},{},{},{},{},{},{:.0f},{},{:.4f},{:.4f},{:.5g},{:.5g},{:.5g},{:.5g},{:.5g},{}\n",
                     to_string(c.task), to_string(c.init), to_string(c.optimizer), c.d_k, c.scale.name(), c.runs,
                     c.reached, c.median_steps, c.median_censored ? 1 : 0, c.mean_final_accuracy, c.min_final_accuracy,
                     c.mean_entropy_start, c.mean_entropy_end, c.mean_jacobian_start, c.mean_jacobian_end,
                     c.mean_grad_qk_first, c.diverged);
  return s;
}

}  // namespace attnlab::train
