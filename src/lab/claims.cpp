// The catalogue of claims and their sources, transcribed from docs/claims.md (the
// quotes of C1–C12 from ../shared/seeds/, as stored: [brackets] mark characters the stored
// copy of seed 003 lost to a broken encoding and that are restored here; those of C13
// onwards from the papers' abstracts and text, only where the wording is certain).
#include "attnlab/lab.hpp"

namespace attnlab::lab {

const std::vector<SourceInfo>& sources() {
  static const std::vector<SourceInfo> all{
      {"000", "Transformer networks: a mathematical explanation why scaling the dot products leads to more stable gradients",
       "变压器网络:为什么缩放点积会导致更稳定的梯度的数学解释",
       "https://towardsdatascience.com/transformer-networks-a-mathematical-explanation-why-scaling-the-dot-products-leads-to-more-stable-414f87391500",
       "a Chinese translation of the Towards Data Science article"},
      {"001", "Notes on BERT's attention shapes and vanishing softmax gradients", "softmax中的梯度消失", "",
       "the stored copy names no source"},
      {"002", "Why does attention divide by √d_k? (Zhihu question and answer)", "transformer[中]的attention为什么scaled?",
       "https://www.zhihu.com/question/339723385", ""},
      {"003", "The scale operation in attention (blog post, 2024-04-27)", "Attention[中]的scale[操]作", "",
       "the stored copy gives no address of its own; it answers the textbook at https://intro-llm.github.io/ (p. 16) "
       "and cites https://arxiv.org/abs/1706.03762"},
      {"004", "Why attention in the transformer divides by √d_k, with a NumPy experiment",
       "transfomer中attention为什么要除以根号d_k", "", "the stored copy names no source"},
      // The papers of C13 onwards: what models after 2017 do to keep attention logits in range.
      {"ssmax", "Ken M. Nakanishi, Scalable-Softmax Is Superior for Attention (arXiv:2501.19399, 2025)", "",
       "https://arxiv.org/abs/2501.19399", "its Figure 1 is reproduced exactly by C13", "Nakanishi 2025"},
      {"su8823", "Su Jianlin, Looking at attention's scale operation from entropy invariance (kexue.fm, 2021)",
       "从熵不变性看Attention的Scale操作", "https://kexue.fm/archives/8823",
       "the article that article 003 points to (there as spaces.ac.cn/archives/8823); its short derivation, with the "
       "assumption C14 tests, is “A quick derivation of entropy-invariant softmax”, https://kexue.fm/archives/9034",
       "Su 2021"},
      {"gemma2", "Gemma Team, Gemma 2: Improving Open Language Models at a Practical Size (arXiv:2408.00118, 2024)", "",
       "https://arxiv.org/abs/2408.00118", "logit soft-capping in every attention layer (c = 50) and the final layer (c = 30)",
       "Gemma Team 2024"},
      {"mup", "Greg Yang, Edward J. Hu et al., Tensor Programs V: Tuning Large Neural Networks via Zero-Shot Hyperparameter "
              "Transfer (arXiv:2203.03466, 2022)", "",
       "https://arxiv.org/abs/2203.03466", "μP: among its rules, attention logits scaled by 1/d instead of 1/√d",
       "Yang et al. 2022"},
      {"wortsman", "Mitchell Wortsman et al., Small-scale proxies for large-scale Transformer training instabilities "
                   "(arXiv:2309.14322, 2023)", "",
       "https://arxiv.org/abs/2309.14322",
       "after Dehghani et al., Scaling Vision Transformers to 22 Billion Parameters (arXiv:2302.05442, 2023), who "
       "introduced the QK layer norm against attention logit growth",
       "Wortsman et al. 2023"},
      {"zhai", "Shuangfei Zhai et al., Stabilizing Transformer Training by Preventing Attention Entropy Collapse "
               "(arXiv:2303.06296, ICML 2023)", "",
       "https://arxiv.org/abs/2303.06296", "", "Zhai et al. 2023"},
      // C19 and C20: the scale's own origins, measured in the training study.
      {"su8620", "Su Jianlin, A brief look at the initialisation, parametrisation and normalisation of the Transformer "
                 "(kexue.fm, 2021)",
       "浅谈Transformer的初始化、参数化与标准化", "https://kexue.fm/archives/8620",
       "cited by article 003 (there as spaces.ac.cn/archives/8620): the scale can be moved into the initialisation of "
       "W_q and W_k, as T5 does",
       "Su 2021b"},
      {"vaswani", "Ashish Vaswani et al., Attention Is All You Need (arXiv:1706.03762, NeurIPS 2017), §3.2.1 and its "
                  "footnote 4", "",
       "https://arxiv.org/abs/1706.03762",
       "the paper that introduced the 1/√d_k scale; its hedge cites Denny Britz et al., Massive Exploration of Neural "
       "Machine Translation Architectures (arXiv:1703.03906, 2017), where additive attention beat unscaled dot-product "
       "attention at large d_k",
       "Vaswani et al. 2017"},
  };
  return all;
}

const SourceInfo& source(const std::string& seed) {
  for (const auto& s : sources())
    if (s.seed == seed) return s;
  std::string known;
  for (const auto& s : sources()) known += (known.empty() ? "" : ", ") + s.seed;
  throw Error("unknown source '" + seed + "' (" + known + ")");
}

const std::vector<ClaimInfo>& claims() {
  static const std::vector<ClaimInfo> all{
      {"C1", "Dot products grow with dimension",
       "For q, k with i.i.d. components of mean 0 and variance σ², q·k has mean 0 and variance d_k·σ⁴, "
       "whether Q Kᵀ is summarised per row, per column or over the whole matrix.",
       {"001", "002", "003", "004"}, {{"002", "假设向量q和k的均值为0，方差为1，那么点积q * k的均值为0，方差为是dk，其中dk是向量q和k的维度。", "Suppose the vectors q and k have mean 0 and variance 1; then the dot product q·k has mean 0 and variance d_k, where d_k is the dimension of q and k."}, {"001", "计算期望与方差时 ,可以按照行,也可以按照列计算,看最后的实际用处。", "The mean and variance can be computed by row or by column, depending on what they are used for."}}},
      {"C2", "Dividing by √d_k restores the spread",
       "Var(q·k/√d_k) = σ⁴ for every d_k. Article 004's experiment: Q 10000×100 and K 100×10000 from N(0,1); "
       "QKᵀ/√100 has sample mean ≈ 0 and standard deviation ≈ 1.",
       {"002", "003", "004"}, {{"004", "因此对qk元素除以sqrt(dim)把标准差压回1.", "So dividing the entries of qk by sqrt(dim) brings the standard deviation back to 1."}}},
      {"C3", "Softmax is not scale-invariant",
       "softmax(a·x) tends to one-hot on argmax x as a grows and to uniform as a → 0; "
       "for article 001's x = (1, 1, 2, 4) and large a the output is (0, 0, 0, 1).",
       {"000", "001", "002"}, {{"000", "随着比例的增加，softmax 函数会将接近 1 的值分配给最大输入值，将 0 分配给所有其他值。", "As the scale increases, the softmax function assigns a value close to 1 to the largest input and 0 to all the others."}}},
      {"C4", "The softmax Jacobian is diag(s) − s sᵀ",
       "∂s_i/∂x_j = s_i(δ_ij − s_j): symmetric, rows sum to 0, and zero exactly when s is one-hot.",
       {"000", "001", "002", "003"}, {{"002", "softmax函数得到的分布向量y=g(x)对输入x的梯度为diag(y) - y*y^T，即y的对角矩阵减去y矩阵乘y矩阵的转置。", "The gradient of the distribution y = g(x) that softmax produces with respect to its input x is diag(y) − y·yᵀ: the diagonal matrix of y minus y times its transpose."}}},
      {"C5", "Back-propagation through softmax multiplies by that Jacobian",
       "g_x = Jᵀ g_s = s ⊙ (g_s − ⟨g_s, s⟩).", {"000"}, {{"000", "因此，通过 softmax 层反向传播相当于乘以其雅可比矩阵", "Back-propagating through the softmax layer therefore amounts to multiplying by its Jacobian matrix."}}},
      {"C6", "Large inputs make that gradient vanish",
       "As the logits grow, ‖J‖ and ‖g_x‖ fall towards 0. Without 1/√d_k the gradient reaching Q and K "
       "shrinks as d_k grows; with it, it stays of the same order.",
       {"000", "001", "002", "003"}, {{"000", "我们已经看到，当输入大幅增加时，softmax 函数的雅可比矩阵收敛为零矩阵。", "We have seen that when the inputs grow large, the Jacobian of the softmax function converges to the zero matrix."}, {"002", "此时计算出梯度消失为0，造成参数更新困难。", "The gradient computed then vanishes to 0, which makes the parameters hard to update."}}},
      {"C7", "The remedy is 1/√d_k, and it is vanishing, not exploding",
       "Gradient norms without the scale are smaller, not larger, than with it: the scale prevents "
       "vanishing gradients, not exploding ones.",
       {"003"}, {{"003", "√d 的作用应该是防[止]梯度消失", "The role of √d should be to prevent vanishing gradients (the article's heading, against a textbook that says the scale prevents gradient explosion)."}}},
      {"C8", "Learning slows or stops without the scale",
       "A model trained with unscaled dot-product attention at large d_k learns more slowly (or not at all) "
       "than the same model with 1/√d_k.",
       {"000", "002"}, {{"000", "在这种情况下，梯度流(误差传播)因此被 softmax 层扼杀，并且在 softmax 层之前的所有元素减慢学习或者甚至完全停止学习。", "In this case the gradient flow (error propagation) is choked by the softmax layer, and everything before the softmax layer learns more slowly or even stops learning completely."}, {"002", "Mul使用scaled的原因，是因为极大的点积值将softmax推向梯度平缓区，使得收敛非常困难，才有了scaled。", "Multiplicative attention uses the scale because very large dot products push softmax into a region where the gradient is flat, which makes convergence very hard; hence the scale."}}},
      {"C9", "Additive attention needs no scale",
       "Score(h, s) = vᵀ tanh(W₁h + W₂s) stays bounded, so its spread does not grow with d_k; "
       "multiplicative Score = (W₁h)ᵀ(W₂s) does.",
       {"002"}, {{"002", "而Add，右侧是tanh，分布在[-1, 1]，整体分布与dk没有关系。", "Whereas for additive attention the right-hand side is a tanh, which lies in [−1, 1], so the overall distribution has nothing to do with d_k."}}},
      {"C10", "The classifier's softmax gradient does not vanish",
       "With cross-entropy the gradient at the logits is p − y: when a confident prediction is wrong its "
       "norm approaches √2, not 0.",
       {"002"}, {{"002", "这一层的softmax通常和交叉熵联合求导，在某个目标类别上的整体梯度为yi` - yi，即预测值与真实值的差值。", "This layer's softmax is usually differentiated together with the cross-entropy; the gradient on a class is y′_i − y_i, the difference between prediction and truth."}, {"002", "如果是错误类别，则整体梯度为1，给出最大程度的负反馈。", "If it is the wrong class, the gradient is 1, the strongest possible negative feedback."}}},
      {"C11", "BERT's batched multi-head shapes",
       "Q, K of [batch, 12 heads, seq, d_k] give scores of [batch, heads, seq, seq]; the library handles "
       "such batched multi-head tensors.",
       {"001"}, {{"001", "在bert模型中的attention构造中 Q:[batch, 12, seq, dk] K:[batch, 12, seq, dk]", "In the attention of the BERT model, Q: [batch, 12, seq, dk], K: [batch, 12, seq, dk]."}}},
      {"C12", "Entropy view of the scale",
       "With 1/√d_k, attention entropy grows with sequence length n; a log n-aware scale (entropy-invariant, "
       "scalable softmax) keeps it near constant.",
       {"003"}, {{"003", "[从]熵[不变]性看Attention的Scale[操]作", "“Looking at attention's scale from entropy invariance”: the article by Su Jianlin that article 003 points to for a deeper treatment (https://spaces.ac.cn/archives/8823)."}}},
      // ---- after 2017: how today's models keep attention logits in range ----
      {"C13", "Attention fades as n grows; scalable softmax keeps it",
       "As the number of keys n grows, the largest softmax output goes to 0 even for a clearly preferred key: for "
       "logits −2 everywhere and one +3 it is 1/(1 + (n − 1)e⁻⁵), about 0.015 at n = 10⁴. SSMax multiplies the "
       "logits by s·ln n (s = 0.43 in the paper's Figure 1) and keeps it near 1; the same holds for a query with one "
       "matching key among random ones.",
       {"ssmax"}, {{"ssmax", "The maximum element of the vector output by the Softmax function approaches zero as the input vector size increases.", "", "en"},
                   {"ssmax", "… an analysis of attention scores reveals that SSMax enables the model to focus attention on key information even in long contexts.", "", "en"}}},
      {"C14", "The entropy-invariant scale log₅₁₂(n)/√d",
       "With the scale log₅₁₂(n)/√d (equal to 1/√d at n = 512, the length a model was tuned at), a row's attention "
       "entropy stays near constant as the number of keys n grows.",
       {"su8823"}, {{"su8823", "从熵不变性看Attention的Scale操作", "Looking at attention's scale operation from entropy invariance (the article's title)."},
                    {"su8823", "Attention(Q,K,V) = softmax(log₅₁₂n / √d · QKᵀ) V", "", "en"}}},
      {"C15", "A softcap bounds the logits",
       "Gemma 2 caps every attention logit after the scale, s ← c·tanh(s/c) with c = 50, so that it stays in (−c, c). "
       "With n keys a row's largest weight is then at most 1/(1 + (n − 1)e^(−2c)), however large the scores grow; what "
       "the cap does to the gradient is measured beside it.",
       {"gemma2"}, {{"gemma2", "logits ← soft_cap ∗ tanh(logits/soft_cap)", "", "en"}}},
      {"C16", "1/d_k keeps the logits' updates independent of width (μP)",
       "μP scales attention logits by 1/d_k instead of 1/√d_k. At initialisation that makes them shrink as d_k^−½; in "
       "training with Adam at one learning rate, the change of the logits in the first steps stays the same at every "
       "width under 1/d_k, while under 1/√d_k it grows as √d_k (μP's coordinate check).",
       {"mup"}, {}},
      {"C17", "Logits grow at high learning rates; QK-norm widens the range of good ones",
       "In small models trained at high learning rates the attention logits grow until attention is one-hot and the loss "
       "degrades or diverges; normalising q and k before their product removes the growth and widens the band of "
       "learning rates whose final loss is close to the best.",
       {"wortsman"}, {}},
      {"C18", "Entropy collapse comes before unstable training",
       "Pathologically low attention entropy goes with unstable training: in runs whose loss spikes or diverges at "
       "higher learning rates, the attention entropy collapses first.",
       {"zhai"}, {}},
      {"C19", "The scale is a smaller initialisation in disguise",
       "Unscaled attention whose W_q and W_k are initialised d_k^(−1/4) smaller starts from exactly the logits of "
       "1/√d_k attention and learns like it: at d_k = 256 with Adam it reaches 90 % held-out accuracy within the scaled "
       "runs' spread of steps, while unscaled attention with the usual initialisation does not.",
       {"su8620"}, {{"su8620", "当然，Google的T5确实是没有除以√d的，但它依然能够正常收敛，那是因为它在初始化策略上做了些调整，所以这个事情还跟初始化有关。",
                     "Of course Google's T5 does not divide by √d, yet it still converges normally, because it adjusted "
                     "its initialisation strategy; so this matter also has to do with initialisation."}}},
      {"C20", "Additive attention beats unscaled dot products at large d_k; the scale closes the gap",
       "Trained with the same budget and each at its best learning rate, additive attention learns better than unscaled "
       "dot-product attention at large d_k (up to 1024), and dot-product attention with 1/√d_k learns at least as well "
       "as additive attention.",
       {"vaswani"}, {{"vaswani", "While for small values of d_k the two mechanisms perform similarly, additive attention "
                                 "outperforms dot product attention without scaling for larger values of d_k [3]. We "
                                 "suspect that for large values of d_k, the dot products grow large in magnitude, pushing "
                                 "the softmax function into regions where it has extremely small gradients.", "", "en"}}},
  };
  return all;
}

const ClaimInfo& claim(const std::string& id) {
  for (const auto& c : claims())
    if (c.id == id) return c;
  throw Error("unknown claim '" + id + "' (C1.." + claims().back().id + ")");
}

}  // namespace attnlab::lab
