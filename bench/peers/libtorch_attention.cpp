// LibTorch peer (see peers.hpp): torch::matmul, torch::softmax and autograd, the
// way a PyTorch user writes attention by hand. With grouped-query heads (Hkv < Hq)
// K and V are first repeated to Hq heads, as Hugging Face's `repeat_kv` does for
// torch versions without scaled_dot_product_attention(enable_gqa=True) (1.13 here):
// a copy of K and V per query head, which autograd sums back into dK and dV. Built as a loadable module
// (libattnlab_torch_peer.so) that `attnlab bench` opens only when asked for
// libtorch: linking LibTorch into the CLI would cost every command ~230 MB of
// resident memory and its start-up time, and would pollute the engine's
// max_rss_mb. Its own translation unit: the LibTorch headers compile slowly.
// In bfloat16 (`--dtype bf16`), the same formula on bfloat16 tensors (the inputs rounded
// to bfloat16 as they are copied in, the results widened to float32 as they are copied
// out), as a PyTorch user runs it with `.to(torch.bfloat16)`: the peer in the engine's
// own precision.
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "peers/peers.hpp"

namespace attnlab::bench {

class TorchPeer final : public Peer {
 public:
  TorchPeer(const PeerShape& s, int threads, torch::ScalarType type) : s_(s), type_(type) {
    torch::set_num_threads(threads);
    if (s.causal != PeerCausal::none) {
      // true where key j lies past row i's key_end: the keys the row may not see
      std::vector<int64_t> end(static_cast<size_t>(s.Nq));
      for (int64_t i = 0; i < s.Nq; ++i) end[static_cast<size_t>(i)] = s.key_end(i);
      const auto ends = torch::tensor(end, torch::kInt64).unsqueeze(1);
      mask_ = torch::arange(s.Nk, torch::kInt64).unsqueeze(0).ge(ends);
    }
  }
  std::string name() const override { return "libtorch"; }

  void forward(const float* q, const float* k, const float* v, float* out) override {
    const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
    const std::vector<int64_t> q_shape{s_.B, s_.Hq, s_.Nq, s_.D}, kv_shape{s_.B, s_.Hkv, s_.Nk, s_.D};
    q_ = in_type(torch::from_blob(const_cast<float*>(q), q_shape, opts)).requires_grad_(true);
    k_ = in_type(torch::from_blob(const_cast<float*>(k), kv_shape, opts)).requires_grad_(true);
    v_ = in_type(torch::from_blob(const_cast<float*>(v), kv_shape, opts)).requires_grad_(true);
    const auto kr = repeat_kv(k_), vr = repeat_kv(v_);
    auto s = torch::matmul(q_, kr.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(s_.D)));
    if (mask_.defined()) s = s.masked_fill(mask_, -std::numeric_limits<float>::infinity());
    o_ = torch::matmul(torch::softmax(s, -1), vr);
    copy_out(o_, out, s_.q_numel());
  }

  void backward(const float* grad_out, float* dq, float* dk, float* dv) override {
    const auto g = torch::from_blob(const_cast<float*>(grad_out), {s_.B, s_.Hq, s_.Nq, s_.D}, torch::kFloat32);
    o_.backward(g.to(type_));
    copy_out(q_.grad(), dq, s_.q_numel());
    copy_out(k_.grad(), dk, s_.kv_numel());
    copy_out(v_.grad(), dv, s_.kv_numel());
    q_ = k_ = v_ = o_ = torch::Tensor();  // free the graph, like a training step
  }

 private:
  // A copy of the caller's floats in the peer's type (rounded for bfloat16).
  torch::Tensor in_type(const torch::Tensor& x) const { return type_ == torch::kFloat32 ? x.clone() : x.to(type_); }
  // n values of x (contiguous) into the caller's floats.
  static void copy_out(const torch::Tensor& x, float* dst, int64_t n) {
    const torch::Tensor f = x.scalar_type() == torch::kFloat32 ? x.contiguous() : x.to(torch::kFloat32).contiguous();
    std::memcpy(dst, f.data_ptr<float>(), sizeof(float) * static_cast<size_t>(n));
  }

  // [B, Hkv, Nk, D] → [B, Hq, Nk, D], key/value head h / group for query head h
  // (Hugging Face's repeat_kv: expand, then reshape, which copies).
  torch::Tensor repeat_kv(const torch::Tensor& x) const {
    if (s_.group() == 1) return x;
    return x.unsqueeze(2).expand({s_.B, s_.Hkv, s_.group(), s_.Nk, s_.D}).reshape({s_.B, s_.Hq, s_.Nk, s_.D});
  }

  PeerShape s_;
  torch::ScalarType type_;
  torch::Tensor mask_, q_, k_, v_, o_;
};

}  // namespace attnlab::bench

// The module's entry point, found by dlsym (libtorch_loader.cpp): the peer in float32, or in
// bfloat16 when `bf16` is non-zero.
extern "C" attnlab::bench::Peer* attnlab_make_libtorch_peer(const attnlab::bench::PeerShape* shape, int threads,
                                                            int bf16) {
  return new attnlab::bench::TorchPeer(*shape, threads, bf16 != 0 ? torch::kBFloat16 : torch::kFloat32);
}
