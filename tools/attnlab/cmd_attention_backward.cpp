// `attnlab attention-backward`: gradients of attention on .npy files. The forward
// (out, lse) is recomputed from q, k, v and the same options, so the gradients
// cannot be paired with a stale forward. dk and dv sum over the query heads that
// share a key/value head. Outputs are replaced only when the whole run succeeded.
#include <memory>
#include <span>
#include <vector>

#include "command.hpp"
#include "context_parallel.hpp"
#include "npy_attention.hpp"

namespace attnlab::cli {
namespace {

struct AttentionBackwardCommand {
  AttentionFlags flags;
  std::string grad_out, dq, dk, dv, dsinks;
  bool context_parallel = false;

  template <class T>
  void run(AttentionProblem<T>&& p) const {
    npy::Array g = npy::load(grad_out);
    if (g.dtype != p.dtype)
      throw Error(fmt::format("{}: dtype {} does not match q's ({})", grad_out, npy::to_string(g.dtype),
                              npy::to_string(p.dtype)));
    if (rank_of(g) != p.rank)
      throw Error(fmt::format("{}: {} dimensions; expected {} like q", grad_out, rank_of(g), p.rank));
    const Tensor<T> dO = to_tensor<T>(std::move(g));
    struct {
      Tensor<T> dq, dk, dv;
    } grads{Tensor<T>(p.q.shape()), Tensor<T>(p.k.shape()), Tensor<T>(p.v.shape())};
    if (!dsinks.empty() && p.sinks.empty()) throw Error("--dsinks: given without --sinks (there is no sink)");
    using S = ScalarOf<T>;
    std::vector<S> ds(dsinks.empty() ? 0 : p.sinks.size());
    Tensor<T> out({p.q.shape()[0], p.q.shape()[1], p.q.shape()[2], p.v.shape()[3]});
    Tensor<S> lse({p.q.shape()[0], p.q.shape()[1], p.q.shape()[2], 1});
    if (context_parallel) {
      cp::lead_backward(flags, p, dO, grads.dq, grads.dk, grads.dv, ds);
    } else {
      attention_forward(p.q.view(), p.k.view(), p.v.view(), p.options, {out.view(), lse.view()}, p.config);
      attention_backward(p.q.view(), p.k.view(), p.v.view(), out.view(), lse.view(), dO.view(), p.options,
                         {grads.dq.view(), grads.dk.view(), grads.dv.view(), std::span<S>(ds)}, p.config);
    }
    std::vector<std::pair<std::string, std::string>> outputs{{dq, encode_result(grads.dq, p.rank)},
                                                             {dk, encode_result(grads.dk, p.rank)},
                                                             {dv, encode_result(grads.dv, p.rank)}};
    if (!dsinks.empty()) {
      const std::vector<int64_t> shape{static_cast<int64_t>(ds.size())};
      outputs.emplace_back(dsinks, npy::encode(std::span<const S>(ds), shape));
    }
    auto inputs = input_files(flags);
    inputs.push_back(grad_out);
    io::write_files_atomically(outputs, inputs);
  }
};

}  // namespace

Command attention_backward_command() {
  return {"attention-backward", "Gradients dq, dk, dv of attention on .npy files, given dLoss/dout", [](CLI::App& sub) {
            auto cmd = std::make_shared<AttentionBackwardCommand>();
            cmd->flags.add_to(sub);
            sub.add_option("--grad-out", cmd->grad_out, "dLoss/dout .npy: [B, Hq, Nq, dv]")->required();
            sub.add_option("--dq", cmd->dq, "output .npy: [B, Hq, Nq, d]")->required();
            sub.add_option("--dk", cmd->dk, "output .npy: [B, Hkv, Nk, d]")->required();
            sub.add_option("--dv", cmd->dv, "output .npy: [B, Hkv, Nk, dv]")->required();
            sub.add_option("--dsinks", cmd->dsinks, "with --sinks: also write dLoss/dsinks, [Hq]");
            sub.add_flag("--context-parallel", cmd->context_parallel,
                         "under mpirun: the sequence sharded over the ranks, ring attention (rank 0 reads "
                         "and writes)");
            sub.callback([cmd] {
              auto read_and_run = [&] { with_problem(cmd->flags, [&](auto&& p) { cmd->run(std::move(p)); }); };
              if (cmd->context_parallel)
                cp::run(cmd->flags, read_and_run, [&] { cp::follow_backward(cmd->flags, !cmd->dsinks.empty()); });
              else
                read_and_run();
            });
          }};
}
}  // namespace attnlab::cli
