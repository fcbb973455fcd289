// `attnlab attention`: attention forward on .npy files (see npy_attention.hpp for
// shapes, dtypes and masks). Writes out [.., Nq, dv] and optionally lse [.., Nq];
// existing output files are replaced only when the whole run succeeded.
#include <memory>

#include "command.hpp"
#include "context_parallel.hpp"
#include "npy_attention.hpp"

namespace attnlab::cli {
namespace {

struct AttentionCommand {
  AttentionFlags flags;
  std::string out, lse, dropout_mask;
  bool context_parallel = false;

  template <class T>
  void run(AttentionProblem<T>&& p) const {
    struct {
      Tensor<T> out;
      Tensor<ScalarOf<T>> lse;
    } f{Tensor<T>({p.q.shape()[0], p.q.shape()[1], p.q.shape()[2], p.v.shape()[3]}),
        Tensor<ScalarOf<T>>({p.q.shape()[0], p.q.shape()[1], p.q.shape()[2], 1})};
    Tensor<uint8_t> mask({p.q.shape()[0], p.q.shape()[1], p.q.shape()[2], dropout_mask.empty() ? 0 : p.k.shape()[2]});
    if (context_parallel)
      cp::lead_forward(flags, p, f.out, f.lse);
    else
      attention_forward(
          p.q.view(), p.k.view(), p.v.view(), p.options,
          {f.out.view(), f.lse.view(), std::nullopt, dropout_mask.empty() ? TensorView<uint8_t>() : mask.view()},
          p.config);
    std::vector<std::pair<std::string, std::string>> outputs{{out, encode_result(f.out, p.rank)}};
    if (!lse.empty()) outputs.emplace_back(lse, encode_result(f.lse, p.rank, /*drop_last=*/true));
    if (!dropout_mask.empty()) {
      const std::vector<int64_t> shape(mask.shape().end() - p.rank, mask.shape().end());
      outputs.emplace_back(dropout_mask, npy::encode_bool(mask.storage(), shape));
    }
    io::write_files_atomically(outputs, input_files(flags));
  }
};

}  // namespace

Command attention_command() {
  return {"attention", "Attention forward on .npy files: softmax(q k^T * scale + mask) v", [](CLI::App& sub) {
            auto cmd = std::make_shared<AttentionCommand>();
            cmd->flags.add_to(sub);
            sub.add_option("--out", cmd->out, "output .npy: [B, Hq, Nq, dv] in the inputs' dtype")->required();
            sub.add_option("--lse", cmd->lse,
                           "also write the log-sum-exp per row, [B, Hq, Nq] (-inf for a fully masked row)");
            sub.add_option("--dropout-mask", cmd->dropout_mask,
                           "also write the dropout mask applied, bool [B, Hq, Nq, Nk] (True = kept and visible)");
            sub.add_flag("--context-parallel", cmd->context_parallel,
                         "under mpirun: the sequence sharded over the ranks, ring attention (rank 0 reads and writes)");
            sub.callback([cmd] {
              auto read_and_run = [&] { with_problem(cmd->flags, [&](auto&& p) { cmd->run(std::move(p)); }); };
              if (cmd->context_parallel)
                cp::run(cmd->flags, read_and_run, [&] { cp::follow_forward(cmd->flags); });
              else
                read_and_run();
            });
          }};
}
}  // namespace attnlab::cli
