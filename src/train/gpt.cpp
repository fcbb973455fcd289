#include "train/gpt.hpp"

#include <cmath>
#include <limits>
#include <span>
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/softmax.hpp"
#include "train/dense.hpp"
#include "train/engine_call.hpp"

namespace attnlab::train::lm {

const char* to_string(LmInit init) { return init == LmInit::gpt2 ? "gpt2" : "unit"; }

LmInit parse_lm_init(const std::string& text) {
  for (LmInit i : {LmInit::gpt2, LmInit::unit})
    if (text == to_string(i)) return i;
  throw Error("init: unknown initialisation '" + text + "' (expected gpt2 or unit)");
}

void validate(const GptConfig& c) {
  auto range = [](const char* field, int64_t value, int64_t lo, int64_t hi) {
    if (value < lo || value > hi)
      throw Error(std::string("lm model: ") + field + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                  "], got " + std::to_string(value));
  };
  range("vocab", c.vocab, 2, 65536);
  range("context", c.context, 1, 65536);
  range("d_model", c.d_model, 1, 65536);
  range("n_layers", c.n_layers, 1, 256);
  range("n_heads", c.n_heads, 1, c.d_model);
  range("d_k", c.d_k, 1, 65536);
  if (c.d_model % c.n_heads != 0)
    throw Error("lm model: d_model (" + std::to_string(c.d_model) + ") must be a multiple of n_heads (" +
                std::to_string(c.n_heads) + ")");
  if (c.scale.additive) throw Error("lm model: scale 'additive' is not available in the GPT (a policy or qknorm)");
  if (c.init != LmInit::gpt2 && c.init != LmInit::unit) throw Error("lm model: init must be gpt2 or unit");
}

namespace {
const GptConfig& checked(const GptConfig& c) {
  validate(c);
  return c;
}
}  // namespace

template <class T>
GptBlock<T>::GptBlock(const std::string& name, const GptConfig& config)
    : ln1(name + ".ln1", config.d_model),
      attn(name + ".attn", config),
      ln2(name + ".ln2", config.d_model),
      mlp(name + ".mlp", config.d_model, 4 * config.d_model) {}

template <class T>
Gpt<T>::Gpt(const GptConfig& config)
    : tok_emb("tok_emb", checked(config).vocab, config.d_model),
      pos_emb("pos_emb", config.context, config.d_model),
      ln_f("ln_f", config.d_model),
      config_(config) {
  blocks.reserve(static_cast<size_t>(config.n_layers));  // the layers keep pointers into their own members
  for (int64_t l = 0; l < config.n_layers; ++l) blocks.emplace_back("block" + std::to_string(l + 1), config);
  params_ = list_params();
}

template <class T>
void Gpt<T>::init(uint64_t seed) {
  std::mt19937_64 rng(seed);
  constexpr double kStd = 0.02;  // GPT-2's
  const double residual = kStd / std::sqrt(2.0 * static_cast<double>(config_.n_layers));
  const double qk = config_.init == LmInit::unit ? std::sqrt(1.0 / static_cast<double>(config_.d_model)) : kStd;
  tok_emb.fill_normal(rng, kStd);
  pos_emb.fill_normal(rng, kStd);
  for (auto& b : blocks) {
    b.attn.w_q.fill_normal(rng, qk);
    b.attn.w_k.fill_normal(rng, qk);
    b.attn.w_v.fill_normal(rng, kStd);
    b.attn.w_o.fill_normal(rng, residual);
    b.mlp.w_fc.fill_normal(rng, kStd);
    b.mlp.w_proj.fill_normal(rng, residual);
    b.attn.log_temp.fill(static_cast<T>(qk_norm_initial_log_temperature(config_.d_k)));
    for (auto* ln : {&b.ln1, &b.ln2}) {
      ln->gamma.fill(T(1));
      ln->beta.fill(T(0));
    }
  }
  ln_f.gamma.fill(T(1));
  ln_f.beta.fill(T(0));
}

template <class T>
std::vector<Param<T>*> Gpt<T>::list_params() {
  std::vector<Param<T>*> p{&tok_emb, &pos_emb};
  for (auto& b : blocks) {
    p.push_back(&b.ln1.gamma);
    p.push_back(&b.ln1.beta);
    for (auto* q : b.attn.params()) p.push_back(q);
    p.push_back(&b.ln2.gamma);
    p.push_back(&b.ln2.beta);
    for (auto* q : b.mlp.params()) p.push_back(q);
  }
  p.push_back(&ln_f.gamma);
  p.push_back(&ln_f.beta);
  return p;
}

template <class T>
std::vector<bool> Gpt<T>::decayed() const {
  std::vector<bool> d;
  for (auto* p : params_) d.push_back(p->rows > 1 && p != &pos_emb);
  return d;
}

template <class T>
void Gpt<T>::zero_grad() {
  for (auto* p : params_) p->zero_grad();
}

template <class T>
double Gpt<T>::forward(const LmBatch& batch, std::vector<AttentionSummary>* summary) {
  const int64_t V = config_.vocab, D = config_.d_model, L = config_.n_layers;
  B_ = batch.batch;
  N_ = batch.seq;
  const int64_t M = B_ * N_;
  if (B_ < 1 || N_ < 1 || N_ > config_.context || batch.tokens.size() != static_cast<size_t>(M) ||
      batch.targets.size() != static_cast<size_t>(M))
    throw Error("lm model: a batch of " + std::to_string(B_) + " windows of " + std::to_string(N_) +
                " tokens needs that many tokens and targets, and at most context (" +
                std::to_string(config_.context) + ") positions");
  tokens_ = batch.tokens;
  targets_ = batch.targets;
  const auto md = static_cast<size_t>(M * D);
  h_.resize(static_cast<size_t>(L + 1));
  mid_.resize(static_cast<size_t>(L));
  a_.resize(static_cast<size_t>(L));
  m_.resize(static_cast<size_t>(L));
  for (auto* v : {&h_, &mid_, &a_, &m_})
    for (auto& x : *v) x.resize(md);
  tmp_.resize(md);
  z_.resize(md);
  // h = E[x] + P[t]
  for (int64_t r = 0; r < M; ++r) {
    const int32_t x = tokens_[static_cast<size_t>(r)];
    const int32_t y = targets_[static_cast<size_t>(r)];
    if (x < 0 || x >= V || y < 0 || y >= V)
      throw Error("lm model: token " + std::to_string(x) + " or target " + std::to_string(y) + " outside the vocabulary");
    const T* e = tok_emb.value.data() + x * D;
    const T* p = pos_emb.value.data() + (r % N_) * D;
    T* h = h_[0].data() + r * D;
    for (int64_t c = 0; c < D; ++c) h[c] = e[c] + p[c];
  }
  // A diverged model: qk-norm's temperature exp(τ) overflowed (no scale policy can hold it).
  for (auto& b : blocks)
    if (config_.scale.qk_norm && !std::isfinite(std::exp(static_cast<double>(b.attn.log_temp.value[0]))))
      return std::numeric_limits<double>::quiet_NaN();
  if (summary != nullptr) summary->resize(static_cast<size_t>(L));
  for (size_t l = 0; l < blocks.size(); ++l) {
    auto& b = blocks[l];
    b.ln1.forward(h_[l].data(), a_[l].data(), M);
    b.attn.forward(a_[l].data(), tmp_.data(), B_, N_, summary != nullptr ? &(*summary)[l] : nullptr);
    for (size_t i = 0; i < md; ++i) mid_[l][i] = h_[l][i] + tmp_[i];
    b.ln2.forward(mid_[l].data(), m_[l].data(), M);
    b.mlp.forward(m_[l].data(), tmp_.data(), M);
    for (size_t i = 0; i < md; ++i) h_[l + 1][i] = mid_[l][i] + tmp_[i];
  }
  ln_f.forward(h_.back().data(), z_.data(), M);
  // logits = z Eᵀ, then softmax − onehot per row (the loss's gradient, scaled in backward)
  logits_.resize(static_cast<size_t>(M * V));
  probs_.resize(logits_.size());
  dense::matmul_a_bt(z_.data(), tok_emb.value.data(), logits_.data(), M, D, V, false);
  // A diverged model: the loss is not finite (the cross-entropy rejects such logits).
  for (T x : logits_)
    if (!std::isfinite(x)) return std::numeric_limits<double>::quiet_NaN();
  double loss = 0;
  for (int64_t r = 0; r < M; ++r) {
    const int32_t y = targets_[static_cast<size_t>(r)];
    const auto row = static_cast<size_t>(r * V);
    loss += softmax_cross_entropy<T>(std::span<const T>(logits_.data() + row, static_cast<size_t>(V)), y,
                                     std::span<T>(probs_.data() + row, static_cast<size_t>(V)));
  }
  return loss / static_cast<double>(M);
}

template <class T>
void Gpt<T>::backward() {
  const int64_t V = config_.vocab, D = config_.d_model, M = B_ * N_;
  const auto md = static_cast<size_t>(M * D);
  dh_.resize(md);
  dmid_.resize(md);
  dtmp_.resize(md);
  // ∂L/∂logits = (softmax − onehot)/M, in place of probs_ (forward left softmax − onehot there)
  const T inv_m = T(1) / static_cast<T>(M);
  for (T& g : probs_) g *= inv_m;
  const T* dlogits = probs_.data();
  dense::matmul_at_b_acc(dlogits, z_.data(), tok_emb.grad.data(), M, V, D);
  dense::matmul(dlogits, tok_emb.value.data(), dtmp_.data(), M, V, D, false);
  ln_f.backward(dtmp_.data(), dh_.data());
  for (size_t l = blocks.size(); l-- > 0;) {
    auto& b = blocks[l];
    // h_{l+1} = mid + MLP(LN₂(mid))
    b.mlp.backward(dh_.data(), dtmp_.data());
    b.ln2.backward(dtmp_.data(), dmid_.data());
    for (size_t i = 0; i < md; ++i) dmid_[i] += dh_[i];
    // mid = h_l + Attn(LN₁(h_l))
    b.attn.backward(dmid_.data(), dtmp_.data());
    b.ln1.backward(dtmp_.data(), dh_.data());
    for (size_t i = 0; i < md; ++i) dh_[i] += dmid_[i];
  }
  for (int64_t r = 0; r < M; ++r) {
    const T* g = dh_.data() + r * D;
    T* e = tok_emb.grad.data() + tokens_[static_cast<size_t>(r)] * D;
    T* p = pos_emb.grad.data() + (r % N_) * D;
    for (int64_t c = 0; c < D; ++c) {
      e[c] += g[c];
      p[c] += g[c];
    }
  }
}

template struct GptBlock<float>;
template struct GptBlock<double>;
template class Gpt<float>;
template class Gpt<double>;

}  // namespace attnlab::train::lm
