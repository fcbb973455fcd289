// LibTorch peer (see peers.hpp): torch::matmul, torch::softmax and autograd, the
// way a PyTorch user writes attention by hand. Built as a loadable module
// (libattnlab_torch_peer.so) that `attnlab bench` opens only when asked for
// libtorch: linking LibTorch into the CLI would cost every command ~230 MB of
// resident memory and its start-up time, and would pollute the engine's
// max_rss_mb. Its own translation unit: the LibTorch headers compile slowly.
#include <torch/torch.h>

#include <cmath>

#include "peers/peers.hpp"

namespace attnlab::bench {

class TorchPeer final : public Peer {
 public:
  TorchPeer(const PeerShape& s, int threads) : s_(s) {
    torch::set_num_threads(threads);
    if (s.causal) {
      // true above the diagonal: the keys a row may not see
      mask_ = torch::ones({s.N, s.N}, torch::kBool).triu(1);
    }
  }
  std::string name() const override { return "libtorch"; }

  void forward(const float* q, const float* k, const float* v, float* out) override {
    const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
    const std::vector<int64_t> shape{s_.B, s_.H, s_.N, s_.D};
    q_ = torch::from_blob(const_cast<float*>(q), shape, opts).clone().requires_grad_(true);
    k_ = torch::from_blob(const_cast<float*>(k), shape, opts).clone().requires_grad_(true);
    v_ = torch::from_blob(const_cast<float*>(v), shape, opts).clone().requires_grad_(true);
    auto s = torch::matmul(q_, k_.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(s_.D)));
    if (s_.causal) s = s.masked_fill(mask_, -std::numeric_limits<float>::infinity());
    o_ = torch::matmul(torch::softmax(s, -1), v_);
    std::memcpy(out, o_.data_ptr<float>(), sizeof(float) * static_cast<size_t>(s_.numel()));
  }

  void backward(const float* grad_out, float* dq, float* dk, float* dv) override {
    const auto g = torch::from_blob(const_cast<float*>(grad_out), {s_.B, s_.H, s_.N, s_.D}, torch::kFloat32);
    o_.backward(g);
    std::memcpy(dq, q_.grad().data_ptr<float>(), sizeof(float) * static_cast<size_t>(s_.numel()));
    std::memcpy(dk, k_.grad().data_ptr<float>(), sizeof(float) * static_cast<size_t>(s_.numel()));
    std::memcpy(dv, v_.grad().data_ptr<float>(), sizeof(float) * static_cast<size_t>(s_.numel()));
    q_ = k_ = v_ = o_ = torch::Tensor();  // free the graph, like a training step
  }

 private:
  PeerShape s_;
  torch::Tensor mask_, q_, k_, v_, o_;
};

}  // namespace attnlab::bench

// The module's one entry point, found by dlsym (libtorch_loader.cpp).
extern "C" attnlab::bench::Peer* attnlab_make_libtorch_peer(const attnlab::bench::PeerShape* shape, int threads) {
  return new attnlab::bench::TorchPeer(*shape, threads);
}
