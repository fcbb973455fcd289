#include "train/attention_layer.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <type_traits>

#include "attnlab/attention.hpp"
#include "attnlab/softmax.hpp"
#include "train/dense.hpp"
#include "train/engine_call.hpp"

namespace attnlab::train {
namespace {

template <class T>
void attend_forward(const T* q, const T* k, const T* v, T* out, T* lse, int64_t B, int64_t Nq, int64_t N, int64_t dk,
                    int64_t dv, ScalePolicy scale, AttentionStats* stats) {
  const ConstView<T> qv(q, {B, 1, Nq, dk}), kv(k, {B, 1, N, dk}), vv(v, {B, 1, N, dv});
  const TensorView<T> ov(out, {B, 1, Nq, dv}), lv(lse, {B, 1, Nq, 1});
  const ComputeConfig one_thread = single_thread();
  // Diagnostics are float's (AttentionStats holds floats): only the float model is evaluated.
  if constexpr (std::is_same_v<T, float>) {
    if (stats != nullptr) {
      const auto rows = static_cast<size_t>(B * Nq);
      stats->entropy.resize(rows);
      stats->jacobian_fro_sq.resize(rows);
      stats->max_prob.resize(rows);
      const RowDiagnostics<float> diag{TensorView<float>(stats->max_prob.data(), {B, 1, Nq, 1}),
                                       TensorView<float>(stats->entropy.data(), {B, 1, Nq, 1}),
                                       TensorView<float>(stats->jacobian_fro_sq.data(), {B, 1, Nq, 1})};
      attention_forward<T>(qv, kv, vv, attention_options<T>(scale), {ov, lv, diag}, one_thread);
      return;
    }
  }
  attention_forward<T>(qv, kv, vv, attention_options<T>(scale), {ov, lv}, one_thread);
}

template <class T>
void attend_backward(const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout, T* dq, T* dk_,
                     T* dv_, int64_t B, int64_t Nq, int64_t N, int64_t dk, int64_t dv, ScalePolicy scale) {
  attention_backward<T>(
      ConstView<T>(q, {B, 1, Nq, dk}), ConstView<T>(k, {B, 1, N, dk}), ConstView<T>(v, {B, 1, N, dv}),
      ConstView<T>(out, {B, 1, Nq, dv}), ConstView<T>(lse, {B, 1, Nq, 1}), ConstView<T>(dout, {B, 1, Nq, dv}),
      attention_options<T>(scale),
      {TensorView<T>(dq, {B, 1, Nq, dk}), TensorView<T>(dk_, {B, 1, N, dk}), TensorView<T>(dv_, {B, 1, N, dv})},
      single_thread());
}

}  // namespace

template <class T>
AttentionLayer<T>::AttentionLayer(const std::string& name, const ModelConfig& config)
    : w_q(name + ".w_q", config.d_model, config.d_k),
      w_k(name + ".w_k", config.d_model, config.d_k),
      w_v(name + ".w_v", config.d_model, config.d_model),
      w_o(name + ".w_o", config.d_model, config.d_model),
      log_temp(name + ".log_temp", 1, 1),
      w_a(name + ".w_a", config.d_k, 1),
      config_(config),
      D_(config.d_model),
      dk_(config.d_k) {
  if (config.layernorm) ln.emplace(name + ".ln", config.d_model);
}

template <class T>
void AttentionLayer<T>::init(std::mt19937_64& rng) {
  const double D = static_cast<double>(D_);
  // unit: components of q and k have variance ≈ 1 (inputs have unit variance);
  // small: variance ≈ 1/d_k; quarter: 1/√d_k (unit's draws times d_k^(−1/4)).
  const double dk = static_cast<double>(dk_);
  const double qk_std = config_.init == InitMode::unit    ? std::sqrt(1.0 / D)
                        : config_.init == InitMode::small ? std::sqrt(1.0 / (D * dk))
                                                          : std::sqrt(1.0 / (D * std::sqrt(dk)));
  w_q.fill_normal(rng, qk_std);
  w_k.fill_normal(rng, qk_std);
  w_v.fill_normal(rng, std::sqrt(1.0 / D));
  w_o.fill_normal(rng, std::sqrt(1.0 / D));
  // aᵀ tanh(·) with a ~ N(0, 1/d_k): the score's spread stays below 1 at every d_k. Drawn
  // only under additive, so that the other scalings' weights do not move.
  if (config_.scale.additive) w_a.fill_normal(rng, std::sqrt(1.0 / dk));
  log_temp.fill(static_cast<T>(qk_norm_initial_log_temperature(dk_)));
}

template <class T>
ScalePolicy AttentionLayer<T>::policy() const {
  if (config_.scale.qk_norm) return qk_norm_policy(static_cast<double>(log_temp.value[0]));
  return config_.scale.policy;
}

template <class T>
double AttentionLayer<T>::scale(int64_t n_keys) const {
  return policy()(dk_, n_keys);
}

template <class T>
std::vector<double> AttentionLayer<T>::logits() const {
  const bool qk_norm = config_.scale.qk_norm;
  const T* q = qk_norm ? qn_.data() : q_.data();  // [B·Nq, d_k]
  const T* k = qk_norm ? kn_.data() : k_.data();  // [B·N, d_k]
  const double s = scale(N_);
  if (config_.scale.additive) return additive_.scores;
  std::vector<double> out(static_cast<size_t>(B_ * Nq_ * N_));  // [B·Nq, N]
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t i = 0; i < Nq_; ++i)
      for (int64_t j = 0; j < N_; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < dk_; ++c)
          dot += static_cast<double>(q[(b * Nq_ + i) * dk_ + c]) * static_cast<double>(k[(b * N_ + j) * dk_ + c]);
        out[static_cast<size_t>((b * Nq_ + i) * N_ + j)] = s * dot;
      }
  return out;
}

template <class T>
std::vector<Param<T>*> AttentionLayer<T>::params() {
  std::vector<Param<T>*> p{&w_q, &w_k, &w_v, &w_o};
  if (config_.scale.qk_norm) p.push_back(&log_temp);
  if (config_.scale.additive) p.push_back(&w_a);
  if (ln) {
    p.push_back(&ln->gamma);
    p.push_back(&ln->beta);
  }
  return p;
}

template <class T>
void AttentionLayer<T>::forward(const T* h, T* h_out, int64_t B, int64_t N, AttentionStats* stats, bool last_only) {
  B_ = B;
  N_ = N;
  Nq_ = last_only ? 1 : N;
  const int64_t M = B * N, Mq = B * Nq_;
  const auto md = static_cast<size_t>(M * D_);
  a_.resize(md);
  if (ln)
    ln->forward(h, a_.data(), M);
  else
    std::copy(h, h + M * D_, a_.begin());
  a_q_.resize(static_cast<size_t>(Mq * D_));
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(a_.data() + (b * N + N - Nq_) * D_, Nq_ * D_, a_q_.data() + b * Nq_ * D_);
  q_.resize(static_cast<size_t>(Mq * dk_));
  k_.resize(static_cast<size_t>(M * dk_));
  v_.resize(md);
  o_.resize(static_cast<size_t>(Mq * D_));
  lse_.resize(static_cast<size_t>(Mq));
  dense::matmul(a_q_.data(), w_q.value.data(), q_.data(), Mq, D_, dk_, false);
  dense::matmul(a_.data(), w_k.value.data(), k_.data(), M, D_, dk_, false);
  dense::matmul(a_.data(), w_v.value.data(), v_.data(), M, D_, D_, false);
  const bool qk_norm = config_.scale.qk_norm;
  if (qk_norm) {
    normalise_rows(q_, qn_, q_norm_, Mq, dk_);
    normalise_rows(k_, kn_, k_norm_, M, dk_);
  }
  const T* q_in = qk_norm ? qn_.data() : q_.data();
  const T* k_in = qk_norm ? kn_.data() : k_.data();
  if (config_.scale.additive)
    attend_additive(stats);
  else
    attend_forward(q_in, k_in, v_.data(), o_.data(), lse_.data(), B, Nq_, N, dk_, D_, policy(), stats);
  // h' = h + o W_o on the querying rows, h elsewhere.
  std::copy(h, h + M * D_, h_out);
  std::vector<T> update(static_cast<size_t>(Mq * D_));  // [B·Nq, D]
  dense::matmul(o_.data(), w_o.value.data(), update.data(), Mq, D_, D_, false);
  for (int64_t b = 0; b < B; ++b) {
    T* dst = h_out + (b * N + N - Nq_) * D_;
    const T* src = update.data() + b * Nq_ * D_;
    for (int64_t i = 0; i < Nq_ * D_; ++i) dst[i] += src[i];
  }
}

template <class T>
void AttentionLayer<T>::attend_additive(AttentionStats* stats) {
  additive_forward(AdditiveShape{B_, Nq_, N_, dk_, D_}, q_.data(), k_.data(), v_.data(), w_a.value.data(), o_.data(),
                   additive_);
  if (stats == nullptr) return;
  // The engine's row diagnostics, from the weights themselves.
  const auto rows = static_cast<size_t>(B_ * Nq_);
  stats->entropy.resize(rows);
  stats->jacobian_fro_sq.resize(rows);
  stats->max_prob.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    const std::span<const double> p(additive_.probs.data() + r * static_cast<size_t>(N_), static_cast<size_t>(N_));
    stats->entropy[r] = static_cast<float>(entropy<double>(p));
    stats->jacobian_fro_sq[r] = static_cast<float>(jacobian_frobenius_sq<double>(p));
    stats->max_prob[r] = static_cast<float>(*std::max_element(p.begin(), p.end()));
  }
}

template <class T>
void AttentionLayer<T>::backward(const T* dh_out, T* dh) {
  const int64_t M = B_ * N_, Mq = B_ * Nq_;
  const auto md = static_cast<size_t>(M * D_), mqd = static_cast<size_t>(Mq * D_);
  std::vector<T> dupdate(mqd), d_o(mqd), dq(static_cast<size_t>(Mq * dk_)), dk(static_cast<size_t>(M * dk_)), dv(md),
      da(md), da_q(mqd);
  // h' = h + o W_o on the querying rows
  for (int64_t b = 0; b < B_; ++b)
    std::copy_n(dh_out + (b * N_ + N_ - Nq_) * D_, Nq_ * D_, dupdate.data() + b * Nq_ * D_);
  dense::matmul_at_b_acc(o_.data(), dupdate.data(), w_o.grad.data(), Mq, D_, D_);
  dense::matmul_a_bt(dupdate.data(), w_o.value.data(), d_o.data(), Mq, D_, D_, false);
  // o = attention(q, k, v)
  const bool qk_norm = config_.scale.qk_norm;
  const T* q_in = qk_norm ? qn_.data() : q_.data();
  const T* k_in = qk_norm ? kn_.data() : k_.data();
  if (config_.scale.additive)
    additive_backward(AdditiveShape{B_, Nq_, N_, dk_, D_}, v_.data(), w_a.value.data(), additive_, d_o.data(), dq.data(),
                      dk.data(), dv.data(), w_a.grad.data());
  else
    attend_backward(q_in, k_in, v_.data(), o_.data(), lse_.data(), d_o.data(), dq.data(), dk.data(), dv.data(), B_, Nq_,
                    N_, dk_, D_, policy());
  if (qk_norm) {
    // ∂L/∂q̂_i = t Σ_j dS_ij k̂_j, so Σ_i q̂_i·∂L/∂q̂_i = t Σ_ij dS_ij q̂_i·k̂_j = t ∂L/∂t = ∂L/∂s for t = exp(s).
    double ds = 0;
    for (size_t i = 0; i < dq.size(); ++i) ds += static_cast<double>(qn_[i]) * dq[i];
    log_temp.grad[0] += static_cast<T>(ds);
    normalise_rows_backward(qn_, q_norm_, dq.data(), Mq, dk_);
    normalise_rows_backward(kn_, k_norm_, dk.data(), M, dk_);
  }
  // q = a_q W_q, k = a W_k, v = a W_v
  dense::matmul_at_b_acc(a_q_.data(), dq.data(), w_q.grad.data(), Mq, D_, dk_);
  dense::matmul_at_b_acc(a_.data(), dk.data(), w_k.grad.data(), M, D_, dk_);
  dense::matmul_at_b_acc(a_.data(), dv.data(), w_v.grad.data(), M, D_, D_);
  dense::matmul_a_bt(dk.data(), w_k.value.data(), da.data(), M, dk_, D_, false);
  dense::matmul_a_bt(dv.data(), w_v.value.data(), da.data(), M, D_, D_, true);
  dense::matmul_a_bt(dq.data(), w_q.value.data(), da_q.data(), Mq, dk_, D_, false);
  for (int64_t b = 0; b < B_; ++b) {
    T* dst = da.data() + (b * N_ + N_ - Nq_) * D_;
    const T* src = da_q.data() + b * Nq_ * D_;
    for (int64_t i = 0; i < Nq_ * D_; ++i) dst[i] += src[i];
  }
  // a = LN(h), plus the residual path
  if (ln)
    ln->backward(da.data(), dh);
  else
    std::copy(da.begin(), da.end(), dh);
  for (size_t i = 0; i < md; ++i) dh[i] += dh_out[i];
}

template class AttentionLayer<float>;
template class AttentionLayer<double>;

}  // namespace attnlab::train
