#include "train/model.hpp"

#include <cmath>
#include <span>
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/softmax.hpp"
#include "train/dense.hpp"

namespace attnlab::train {
namespace {

void check(const ModelConfig& m) {
  if (m.d_model < 2 || m.d_model > 4096) throw Error("model: d_model must be in [2, 4096], got " + std::to_string(m.d_model));
  if (m.d_k < 1 || m.d_k > 65536) throw Error("model: d_k must be in [1, 65536], got " + std::to_string(m.d_k));
  if (m.n_layers < 1 || m.n_layers > 2) throw Error("model: n_layers must be 1 or 2, got " + std::to_string(m.n_layers));
}

}  // namespace

template <class T>
Model<T>::Model(const ModelConfig& model, const TaskConfig& task)
    : tok_emb("tok_emb", (check(model), validate(task), vocab_size(task)), model.d_model),
      prev_emb("prev_emb", vocab_size(task) + 1, model.d_model),
      w_c("w_c", model.d_model, n_classes(task)),
      b_c("b_c", 1, n_classes(task)),
      config_(model),
      V_(vocab_size(task)),
      C_(n_classes(task)),
      D_(model.d_model) {
  for (int64_t l = 0; l < model.n_layers; ++l) layers_.emplace_back("layer" + std::to_string(l + 1), model);
  if (model.layernorm) ln_f.emplace("ln_f", model.d_model);
}

template <class T>
void Model<T>::init(uint64_t seed) {
  std::mt19937_64 rng(seed);
  // E[x] + F[prev] has unit-variance components.
  tok_emb.fill_normal(rng, std::sqrt(0.5));
  prev_emb.fill_normal(rng, std::sqrt(0.5));
  for (auto& layer : layers_) layer.init(rng);
  w_c.fill_normal(rng, std::sqrt(1.0 / static_cast<double>(D_)));
  b_c.fill(T(0));
}

template <class T>
std::vector<Param<T>*> Model<T>::params() {
  std::vector<Param<T>*> p{&tok_emb, &prev_emb};
  for (auto& layer : layers_)
    for (auto* q : layer.params()) p.push_back(q);
  if (ln_f) {
    p.push_back(&ln_f->gamma);
    p.push_back(&ln_f->beta);
  }
  p.push_back(&w_c);
  p.push_back(&b_c);
  return p;
}

template <class T>
void Model<T>::zero_grad() {
  for (auto* p : params()) p->zero_grad();
}

template <class T>
ForwardStats Model<T>::forward(const Batch& batch, bool with_stats) {
  B_ = batch.batch;
  N_ = batch.seq;
  if (B_ < 1 || N_ < 1 || batch.tokens.size() != static_cast<size_t>(B_ * N_) || batch.targets.size() != static_cast<size_t>(B_))
    throw Error("model: batch has inconsistent sizes");
  tokens_ = batch.tokens;
  targets_ = batch.targets;
  const auto md = static_cast<size_t>(B_ * N_ * D_);
  h_.assign(layers_.size() + 1, std::vector<T>(md));
  // Token-shift embedding: h_i = E[x_i] + F[x_{i−1}] (F[V] at i = 0).
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t i = 0; i < N_; ++i) {
      const int32_t x = tokens_[static_cast<size_t>(b * N_ + i)];
      const int64_t prev = i == 0 ? V_ : tokens_[static_cast<size_t>(b * N_ + i - 1)];
      if (x < 0 || x >= V_) throw Error("model: token " + std::to_string(x) + " outside the vocabulary");
      T* h = h_[0].data() + (b * N_ + i) * D_;
      for (int64_t c = 0; c < D_; ++c) h[c] = tok_emb.value[x * D_ + c] + prev_emb.value[prev * D_ + c];
    }
  ForwardStats out;
  if (with_stats) out.layers.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l)
    layers_[l].forward(h_[l].data(), h_[l + 1].data(), B_, N_, with_stats ? &out.layers[l] : nullptr,
                       /*last_only=*/l + 1 == layers_.size());
  // The classifier reads the last position.
  last_.resize(static_cast<size_t>(B_ * D_));
  z_.resize(last_.size());
  for (int64_t b = 0; b < B_; ++b)
    std::copy_n(h_.back().data() + (b * N_ + N_ - 1) * D_, D_, last_.data() + b * D_);
  if (ln_f)
    ln_f->forward(last_.data(), z_.data(), B_);
  else
    z_ = last_;
  std::vector<T> logits(static_cast<size_t>(B_ * C_));  // [B, C]
  dense::matmul(z_.data(), w_c.value.data(), logits.data(), B_, D_, C_, false);
  probs_.resize(logits.size());
  double loss = 0;
  for (int64_t b = 0; b < B_; ++b) {
    T* row = logits.data() + b * C_;
    for (int64_t c = 0; c < C_; ++c) row[c] += b_c.value[static_cast<size_t>(c)];
    const int32_t y = targets_[static_cast<size_t>(b)];
    if (y < 0 || y >= C_) throw Error("model: target " + std::to_string(y) + " outside the classes");
    const std::span<const T> x(row, static_cast<size_t>(C_));
    std::span<T> grad(probs_.data() + b * C_, static_cast<size_t>(C_));
    loss += softmax_cross_entropy<T>(x, y, grad);  // grad = softmax − onehot; one-hot added back below
    grad[static_cast<size_t>(y)] += T(1);
    out.correct += std::max_element(row, row + C_) - row == y;
  }
  out.loss = loss / static_cast<double>(B_);
  return out;
}

template <class T>
void Model<T>::backward() {
  // ∂L/∂logits = (p − y)/B
  std::vector<T> dlogits(probs_);
  for (int64_t b = 0; b < B_; ++b) dlogits[static_cast<size_t>(b * C_ + targets_[static_cast<size_t>(b)])] -= T(1);
  for (T& g : dlogits) g /= static_cast<T>(B_);
  dense::matmul_at_b_acc(z_.data(), dlogits.data(), w_c.grad.data(), B_, D_, C_);
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t c = 0; c < C_; ++c) b_c.grad[static_cast<size_t>(c)] += dlogits[static_cast<size_t>(b * C_ + c)];
  std::vector<T> dz(static_cast<size_t>(B_ * D_)), dlast(dz.size());
  dense::matmul_a_bt(dlogits.data(), w_c.value.data(), dz.data(), B_, C_, D_, false);
  if (ln_f)
    ln_f->backward(dz.data(), dlast.data());
  else
    dlast = dz;
  const auto md = static_cast<size_t>(B_ * N_ * D_);
  std::vector<T> dh(md, T(0)), dh_in(md);
  for (int64_t b = 0; b < B_; ++b) std::copy_n(dlast.data() + b * D_, D_, dh.data() + (b * N_ + N_ - 1) * D_);
  for (size_t l = layers_.size(); l-- > 0;) {
    layers_[l].backward(dh.data(), dh_in.data());
    dh.swap(dh_in);
  }
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t i = 0; i < N_; ++i) {
      const int32_t x = tokens_[static_cast<size_t>(b * N_ + i)];
      const int64_t prev = i == 0 ? V_ : tokens_[static_cast<size_t>(b * N_ + i - 1)];
      const T* g = dh.data() + (b * N_ + i) * D_;
      for (int64_t c = 0; c < D_; ++c) {
        tok_emb.grad[x * D_ + c] += g[c];
        prev_emb.grad[prev * D_ + c] += g[c];
      }
    }
}

template class Model<float>;
template class Model<double>;

}  // namespace attnlab::train
