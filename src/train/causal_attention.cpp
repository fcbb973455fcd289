#include "train/causal_attention.hpp"

#include "attnlab/attention.hpp"
#include "train/dense.hpp"
#include "train/engine_call.hpp"

namespace attnlab::train::lm {
namespace {

// [B·N, H·w] row-major, seen as [B, H, N, w]: head h of row b·N + t at columns h·w.
// P is T or const T (a ConstView).
template <class P>
TensorView<P> heads_view(P* data, int64_t B, int64_t H, int64_t N, int64_t w) {
  return TensorView<P>(data, {B, H, N, w}, {N * H * w, w, H * w, 1});
}

}  // namespace

template <class T>
CausalSelfAttention<T>::CausalSelfAttention(const std::string& name, const GptConfig& config)
    : w_q(name + ".w_q", config.d_model, config.n_heads * config.d_k),
      w_k(name + ".w_k", config.d_model, config.n_heads * config.d_k),
      w_v(name + ".w_v", config.d_model, config.d_model),
      w_o(name + ".w_o", config.d_model, config.d_model),
      log_temp(name + ".log_temp", 1, 1),
      qk_norm_(config.scale.qk_norm),
      scale_(config.scale.policy),
      D_(config.d_model),
      H_(config.n_heads),
      dk_(config.d_k),
      dv_(config.d_model / config.n_heads) {
  log_temp.fill(static_cast<T>(qk_norm_initial_log_temperature(dk_)));
}

template <class T>
ScalePolicy CausalSelfAttention<T>::policy() const {
  return qk_norm_ ? qk_norm_policy(static_cast<double>(log_temp.value[0])) : scale_;
}

template <class T>
std::vector<Param<T>*> CausalSelfAttention<T>::params() {
  std::vector<Param<T>*> p{&w_q, &w_k, &w_v, &w_o};
  if (qk_norm_) p.push_back(&log_temp);
  return p;
}

template <class T>
void CausalSelfAttention<T>::forward(const T* a, T* y, int64_t B, int64_t N, AttentionSummary* summary) {
  a_ = a;
  B_ = B;
  N_ = N;
  const int64_t M = B * N, Hk = H_ * dk_;
  q_.resize(static_cast<size_t>(M * Hk));
  k_.resize(q_.size());
  v_.resize(static_cast<size_t>(M * D_));
  o_.resize(v_.size());
  lse_.resize(static_cast<size_t>(M * H_));
  dense::matmul(a, w_q.value.data(), q_.data(), M, D_, Hk, false);
  dense::matmul(a, w_k.value.data(), k_.data(), M, D_, Hk, false);
  dense::matmul(a, w_v.value.data(), v_.data(), M, D_, D_, false);
  if (qk_norm_) {  // [B·N, H·d_k] is [B·N·H, d_k]: one row per head
    normalise_rows(q_, qn_, q_norm_, M * H_, dk_);
    normalise_rows(k_, kn_, k_norm_, M * H_, dk_);
  }
  const T* q_in = qk_norm_ ? qn_.data() : q_.data();
  const T* k_in = qk_norm_ ? kn_.data() : k_.data();
  const auto options = attention_options<T>(policy(), Causal::top_left);
  ForwardOutputs<T> out{heads_view(o_.data(), B, H_, N, dv_), TensorView<T>(lse_.data(), {B, H_, N, 1})};
  if (summary != nullptr) {
    max_prob_.resize(lse_.size());
    entropy_.resize(lse_.size());
    out.diagnostics = RowDiagnostics<T>{TensorView<T>(max_prob_.data(), {B, H_, N, 1}),
                                        TensorView<T>(entropy_.data(), {B, H_, N, 1}), TensorView<T>()};
  }
  attention_forward<T>(heads_view(q_in, B, H_, N, dk_), heads_view(k_in, B, H_, N, dk_),
                       heads_view<const T>(v_.data(), B, H_, N, dv_), options, out, single_thread());
  dense::matmul(o_.data(), w_o.value.data(), y, M, D_, D_, false);
  if (summary != nullptr) {
    double e = 0, p = 0;
    for (size_t i = 0; i < lse_.size(); ++i) {
      e += entropy_[i];
      p += max_prob_[i];
    }
    summary->entropy = e / static_cast<double>(lse_.size());
    summary->max_prob = p / static_cast<double>(lse_.size());
  }
}

template <class T>
void CausalSelfAttention<T>::backward(const T* dy, T* da) {
  const int64_t B = B_, N = N_, M = B * N, Hk = H_ * dk_;
  do_buf_.resize(static_cast<size_t>(M * D_));
  dv_buf_.resize(do_buf_.size());
  dq_buf_.resize(static_cast<size_t>(M * Hk));
  dk_buf_.resize(dq_buf_.size());
  // y = o W_o
  dense::matmul_at_b_acc(o_.data(), dy, w_o.grad.data(), M, D_, D_);
  dense::matmul_a_bt(dy, w_o.value.data(), do_buf_.data(), M, D_, D_, false);
  // o = attention(q, k, v)
  const T* q_in = qk_norm_ ? qn_.data() : q_.data();
  const T* k_in = qk_norm_ ? kn_.data() : k_.data();
  attention_backward<T>(heads_view(q_in, B, H_, N, dk_), heads_view(k_in, B, H_, N, dk_),
                        heads_view<const T>(v_.data(), B, H_, N, dv_), heads_view<const T>(o_.data(), B, H_, N, dv_),
                        ConstView<T>(lse_.data(), {B, H_, N, 1}), heads_view<const T>(do_buf_.data(), B, H_, N, dv_),
                        attention_options<T>(policy(), Causal::top_left),
                        {heads_view(dq_buf_.data(), B, H_, N, dk_), heads_view(dk_buf_.data(), B, H_, N, dk_),
                         heads_view(dv_buf_.data(), B, H_, N, dv_)},
                        single_thread());
  if (qk_norm_) {
    // ∂L/∂q̂_i = t Σ_j dS_ij k̂_j, so Σ_i q̂_i·∂L/∂q̂_i = t ∂L/∂t = ∂L/∂s for t = exp(s).
    double ds = 0;
    for (size_t i = 0; i < dq_buf_.size(); ++i) ds += static_cast<double>(qn_[i]) * dq_buf_[i];
    log_temp.grad[0] += static_cast<T>(ds);
    normalise_rows_backward(qn_, q_norm_, dq_buf_.data(), M * H_, dk_);
    normalise_rows_backward(kn_, k_norm_, dk_buf_.data(), M * H_, dk_);
  }
  // q = a W_q, k = a W_k, v = a W_v
  dense::matmul_at_b_acc(a_, dq_buf_.data(), w_q.grad.data(), M, D_, Hk);
  dense::matmul_at_b_acc(a_, dk_buf_.data(), w_k.grad.data(), M, D_, Hk);
  dense::matmul_at_b_acc(a_, dv_buf_.data(), w_v.grad.data(), M, D_, D_);
  dense::matmul_a_bt(dq_buf_.data(), w_q.value.data(), da, M, Hk, D_, false);
  dense::matmul_a_bt(dk_buf_.data(), w_k.value.data(), da, M, Hk, D_, true);
  dense::matmul_a_bt(dv_buf_.data(), w_v.value.data(), da, M, D_, D_, true);
}

template class CausalSelfAttention<float>;
template class CausalSelfAttention<double>;

}  // namespace attnlab::train::lm
