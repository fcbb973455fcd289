// The catalogue of claims, transcribed from docs/claims.md.
#include "attnlab/lab.hpp"

namespace attnlab::lab {

const std::vector<ClaimInfo>& claims() {
  static const std::vector<ClaimInfo> all{
      {"C1", "Dot products grow with dimension",
       "For q, k with i.i.d. components of mean 0 and variance σ², q·k has mean 0 and variance d_k·σ⁴, "
       "whether Q Kᵀ is summarised per row, per column or over the whole matrix.",
       {"001", "002", "003", "004"}},
      {"C2", "Dividing by √d_k restores the spread",
       "Var(q·k/√d_k) = σ⁴ for every d_k. Seed 004: Q 10000×100 and K 100×10000 from N(0,1); "
       "QKᵀ/√100 has sample mean ≈ 0 and standard deviation ≈ 1.",
       {"002", "003", "004"}},
      {"C3", "Softmax is not scale-invariant",
       "softmax(a·x) tends to one-hot on argmax x as a grows and to uniform as a → 0; "
       "for seed 001's x = (1, 1, 2, 4) and large a the output is (0, 0, 0, 1).",
       {"000", "001", "002"}},
      {"C4", "The softmax Jacobian is diag(s) − s sᵀ",
       "∂s_i/∂x_j = s_i(δ_ij − s_j): symmetric, rows sum to 0, and zero exactly when s is one-hot.",
       {"000", "001", "002", "003"}},
      {"C5", "Back-propagation through softmax multiplies by that Jacobian",
       "g_x = Jᵀ g_s = s ⊙ (g_s − ⟨g_s, s⟩).", {"000"}},
      {"C6", "Large inputs make that gradient vanish",
       "As the logits grow, ‖J‖ and ‖g_x‖ fall towards 0. Without 1/√d_k the gradient reaching Q and K "
       "shrinks as d_k grows; with it, it stays of the same order.",
       {"000", "001", "002", "003"}},
      {"C7", "The remedy is 1/√d_k, and it is vanishing, not exploding",
       "Gradient norms without the scale are smaller, not larger, than with it: the scale prevents "
       "vanishing gradients, not exploding ones.",
       {"003"}},
      {"C8", "Learning slows or stops without the scale",
       "A model trained with unscaled dot-product attention at large d_k learns more slowly (or not at all) "
       "than the same model with 1/√d_k.",
       {"000", "002"}},
      {"C9", "Additive attention needs no scale",
       "Score(h, s) = vᵀ tanh(W₁h + W₂s) stays bounded, so its spread does not grow with d_k; "
       "multiplicative Score = (W₁h)ᵀ(W₂s) does.",
       {"002"}},
      {"C10", "The classifier's softmax needs no scale",
       "With cross-entropy the gradient at the logits is p − y: when a confident prediction is wrong its "
       "norm approaches √2, not 0.",
       {"002"}},
      {"C11", "Seed 001's BERT shapes",
       "Q, K of [batch, 12 heads, seq, d_k] give scores of [batch, heads, seq, seq]; the library handles "
       "such batched multi-head tensors.",
       {"001"}},
      {"C12", "Entropy view of the scale",
       "With 1/√d_k, attention entropy grows with sequence length n; a log n-aware scale (entropy-invariant, "
       "scalable softmax) keeps it near constant.",
       {"003"}},
  };
  return all;
}

const ClaimInfo& claim(const std::string& id) {
  for (const auto& c : claims())
    if (c.id == id) return c;
  throw Error("unknown claim '" + id + "' (C1..C12)");
}

}  // namespace attnlab::lab
