// Feature-interaction layers of the recommendation models: fm (DeepFM's second-order
// term), cross (DCN-v2, full-rank or low-rank) and dot_interaction (DLRM).
#include <algorithm>
#include <utility>

#include "libps/core/text.h"
#include "libps/model/blas.h"
#include "libps/model/ops.h"

namespace ps::model {
namespace {

// fm and dot_interaction see their inputs as one stack of n vectors of width d per
// example: an input of shape [d] adds one vector, [k, d] adds k.
class StackOp : public Op {
 protected:
  explicit StackOp(std::vector<int64_t> counts, int64_t d) : counts_(std::move(counts)), d_(d) {
    for (int64_t c : counts_) n_ += c;
  }
  // v_ [batch * n * d] from the inputs.
  void Gather(int64_t batch, std::span<const std::span<const float>> in) {
    v_.resize(static_cast<size_t>(batch * n_ * d_));
    for (int64_t i = 0; i < batch; ++i) {
      float* dst = v_.data() + i * n_ * d_;
      for (size_t k = 0; k < counts_.size(); ++k) {
        const int64_t len = counts_[k] * d_;
        std::copy_n(in[k].data() + i * len, len, dst);
        dst += len;
      }
    }
  }
  // Adds dv [batch * n * d] to the inputs' gradients.
  void Scatter(int64_t batch, std::span<const float> dv,
               std::span<const std::span<float>> din) const {
    for (int64_t i = 0; i < batch; ++i) {
      const float* src = dv.data() + i * n_ * d_;
      for (size_t k = 0; k < counts_.size(); ++k) {
        const int64_t len = counts_[k] * d_;
        if (!din[k].empty()) {
          float* dst = din[k].data() + i * len;
          for (int64_t j = 0; j < len; ++j) dst[j] += src[j];
        }
        src += len;
      }
    }
  }

  std::vector<int64_t> counts_;  // vectors per input
  int64_t n_ = 0;
  int64_t d_;
  std::vector<float> v_;   // [batch * n * d]
  std::vector<float> dv_;  // [batch * n * d]
  std::vector<float> y_;
};

// fm: y = 0.5 * Σ_k ((Σ_i v_ik)² - Σ_i v_ik²) = Σ_{i<j} <v_i, v_j>, shape [1].
class FmOp final : public StackOp {
 public:
  FmOp(std::vector<int64_t> counts, int64_t d) : StackOp(std::move(counts), d) { SetShape({1}); }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    const int64_t b = ctx.batch_size;
    Gather(b, in);
    sum_.assign(static_cast<size_t>(b * d_), 0.0f);
    y_.resize(static_cast<size_t>(b));
    for (int64_t e = 0; e < b; ++e) {
      const float* v = v_.data() + e * n_ * d_;
      float* s = sum_.data() + e * d_;
      double sq = 0;
      for (int64_t i = 0; i < n_; ++i) {
        for (int64_t k = 0; k < d_; ++k) {
          s[k] += v[i * d_ + k];
          sq += double{v[i * d_ + k]} * v[i * d_ + k];
        }
      }
      double ss = 0;
      for (int64_t k = 0; k < d_; ++k) ss += double{s[k]} * s[k];
      y_[e] = static_cast<float>(0.5 * (ss - sq));
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>>,
                std::span<float> dout, std::span<const std::span<float>> din) override {
    const int64_t b = ctx.batch_size;
    dv_.resize(v_.size());
    for (int64_t e = 0; e < b; ++e) {
      const float g = dout[e];
      const float* v = v_.data() + e * n_ * d_;
      const float* s = sum_.data() + e * d_;
      float* dv = dv_.data() + e * n_ * d_;
      for (int64_t i = 0; i < n_; ++i) {
        for (int64_t k = 0; k < d_; ++k) dv[i * d_ + k] = g * (s[k] - v[i * d_ + k]);
      }
    }
    Scatter(b, dv_, din);
  }

 private:
  std::vector<float> sum_;  // [batch * d] Σ_i v_i
};

// dot_interaction: <v_i, v_j> for every pair i > j (and i == j with self_interaction),
// in the order (1,0), (2,0), (2,1), (3,0), ... (DLRM's lower triangle).
class DotInteractionOp final : public StackOp {
 public:
  DotInteractionOp(std::vector<int64_t> counts, int64_t d, bool self)
      : StackOp(std::move(counts), d), self_(self) {
    for (int64_t i = 0; i < n_; ++i) {
      for (int64_t j = 0; j < (self_ ? i + 1 : i); ++j) pairs_.emplace_back(i, j);
    }
    SetShape({static_cast<int64_t>(pairs_.size())});
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    const int64_t b = ctx.batch_size;
    Gather(b, in);
    y_.resize(static_cast<size_t>(b * size_));
    for (int64_t e = 0; e < b; ++e) {
      const float* v = v_.data() + e * n_ * d_;
      for (size_t p = 0; p < pairs_.size(); ++p) {
        y_[e * size_ + p] = Dot(d_, v + pairs_[p].first * d_, v + pairs_[p].second * d_);
      }
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>>,
                std::span<float> dout, std::span<const std::span<float>> din) override {
    const int64_t b = ctx.batch_size;
    dv_.assign(v_.size(), 0.0f);
    for (int64_t e = 0; e < b; ++e) {
      const float* v = v_.data() + e * n_ * d_;
      float* dv = dv_.data() + e * n_ * d_;
      for (size_t p = 0; p < pairs_.size(); ++p) {
        const float g = dout[e * size_ + p];
        const auto [i, j] = pairs_[p];
        for (int64_t k = 0; k < d_; ++k) {
          dv[i * d_ + k] += g * v[j * d_ + k];
          dv[j * d_ + k] += g * v[i * d_ + k];
        }
      }
    }
    Scatter(b, dv_, din);
  }

 private:
  bool self_;
  std::vector<std::pair<int64_t, int64_t>> pairs_;
};

// cross: x_{l+1} = x_0 ⊙ (x_l W_l + b_l) + x_l for l = 0..layers-1 over the flattened
// input x_0 [d]. Full rank: W_l = kernel_l [d, d]; low rank r: W_l = u_l [d, r] · v_l [r, d].
class CrossOp final : public Op {
 public:
  CrossOp(int64_t d, int64_t rank, std::vector<size_t> a, std::vector<size_t> v,
          std::vector<size_t> bias)
      : d_(d), rank_(rank), a_(std::move(a)), v_(std::move(v)), bias_(std::move(bias)) {
    SetShape({d});
    has_variables_ = true;
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    const int64_t b = ctx.batch_size, n = b * d_;
    const size_t layers = a_.size();
    x_.resize(layers + 1);
    z_.resize(layers);
    h_.resize(layers);
    x_[0].assign(in[0].begin(), in[0].begin() + n);
    for (size_t l = 0; l < layers; ++l) {
      std::vector<float>& z = z_[l];
      z.resize(static_cast<size_t>(n));
      std::span<const float> bias = ctx.params->values[bias_[l]];
      for (int64_t i = 0; i < b; ++i) std::copy(bias.begin(), bias.end(), z.begin() + i * d_);
      if (rank_ == 0) {
        Gemm(Trans::kNo, Trans::kNo, b, d_, d_, 1.0f, x_[l].data(), d_,
             ctx.params->values[a_[l]].data(), d_, 1.0f, z.data(), d_);
      } else {
        h_[l].resize(static_cast<size_t>(b * rank_));
        Gemm(Trans::kNo, Trans::kNo, b, rank_, d_, 1.0f, x_[l].data(), d_,
             ctx.params->values[a_[l]].data(), rank_, 0.0f, h_[l].data(), rank_);
        Gemm(Trans::kNo, Trans::kNo, b, d_, rank_, 1.0f, h_[l].data(), rank_,
             ctx.params->values[v_[l]].data(), d_, 1.0f, z.data(), d_);
      }
      x_[l + 1].resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x_[l + 1][i] = x_[0][i] * z[i] + x_[l][i];
    }
    return std::span<const float>(x_[layers]);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>>,
                std::span<float> dout, std::span<const std::span<float>> din) override {
    const int64_t b = ctx.batch_size, n = b * d_;
    g_.assign(dout.begin(), dout.end());  // d(loss)/d(x_l), from l = layers down
    gx0_.assign(static_cast<size_t>(n), 0.0f);
    dz_.resize(static_cast<size_t>(n));
    for (size_t l = a_.size(); l-- > 0;) {
      for (int64_t i = 0; i < n; ++i) {
        gx0_[i] += g_[i] * z_[l][i];
        dz_[i] = g_[i] * x_[0][i];
      }
      std::span<float> db = ctx.grads->values[bias_[l]];
      std::fill(db.begin(), db.end(), 0.0f);
      for (int64_t i = 0; i < b; ++i) {
        for (int64_t k = 0; k < d_; ++k) db[k] += dz_[i * d_ + k];
      }
      std::span<const float> a = ctx.params->values[a_[l]];
      if (rank_ == 0) {
        Gemm(Trans::kYes, Trans::kNo, d_, d_, b, 1.0f, x_[l].data(), d_, dz_.data(), d_, 0.0f,
             ctx.grads->values[a_[l]].data(), d_);
        Gemm(Trans::kNo, Trans::kYes, b, d_, d_, 1.0f, dz_.data(), d_, a.data(), d_, 1.0f,
             g_.data(), d_);
      } else {
        std::span<const float> v = ctx.params->values[v_[l]];
        Gemm(Trans::kYes, Trans::kNo, rank_, d_, b, 1.0f, h_[l].data(), rank_, dz_.data(), d_, 0.0f,
             ctx.grads->values[v_[l]].data(), d_);
        dh_.resize(static_cast<size_t>(b * rank_));
        Gemm(Trans::kNo, Trans::kYes, b, rank_, d_, 1.0f, dz_.data(), d_, v.data(), d_, 0.0f,
             dh_.data(), rank_);
        Gemm(Trans::kYes, Trans::kNo, d_, rank_, b, 1.0f, x_[l].data(), d_, dh_.data(), rank_, 0.0f,
             ctx.grads->values[a_[l]].data(), rank_);
        Gemm(Trans::kNo, Trans::kYes, b, d_, rank_, 1.0f, dh_.data(), rank_, a.data(), rank_, 1.0f,
             g_.data(), d_);
      }
    }
    if (din[0].empty()) return;
    for (int64_t i = 0; i < n; ++i) din[0][i] += g_[i] + gx0_[i];
  }

 private:
  int64_t d_;
  int64_t rank_;                       // 0: full rank
  std::vector<size_t> a_, v_, bias_;   // per layer: kernel (or u), v (low rank), bias
  std::vector<std::vector<float>> x_;  // [layers + 1][batch * d]
  std::vector<std::vector<float>> z_;  // [layers][batch * d]: x_l W_l + b_l
  std::vector<std::vector<float>> h_;  // [layers][batch * rank]: x_l u_l
  std::vector<float> g_, gx0_, dz_, dh_;
};

// Checks fm / dot_interaction inputs: rank 1 or 2, one common last dimension.
Result<std::vector<int64_t>> StackCounts(const OpBuild& b, int64_t* d) {
  std::vector<int64_t> counts;
  for (size_t i = 0; i < b.in_shapes.size(); ++i) {
    const Shape& s = b.in_shapes[i];
    const std::string where = b.path + ".inputs[" + std::to_string(i) + "]";
    if (s.size() != 1 && s.size() != 2) {
      return InvalidArgument(where + ": " + QuoteInput(b.in_names[i], '"') + " has shape " +
                             ShapeString(s) + "; expected [dim] or [n, dim]");
    }
    if (i == 0) *d = s.back();
    if (s.back() != *d) {
      return InvalidArgument(where + ": " + QuoteInput(b.in_names[i], '"') + " has shape " +
                             ShapeString(s) + ", its last dimension " + std::to_string(s.back()) +
                             " differs from " + std::to_string(*d) + " of " +
                             QuoteInput(b.in_names[0], '"'));
    }
    counts.push_back(s.size() == 1 ? 1 : s[0]);
  }
  return counts;
}

}  // namespace

Result<std::unique_ptr<Op>> MakeFmOp(OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, SIZE_MAX));
  PS_RETURN_IF_ERROR(b.config->Finish());
  int64_t d = 0;
  PS_ASSIGN_OR_RETURN(std::vector<int64_t> counts, StackCounts(b, &d));
  return std::unique_ptr<Op>(std::make_unique<FmOp>(std::move(counts), d));
}

Result<std::unique_ptr<Op>> MakeDotInteractionOp(OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, SIZE_MAX));
  bool self = false;
  PS_RETURN_IF_ERROR(b.config->GetOr("self_interaction", &self));
  PS_RETURN_IF_ERROR(b.config->Finish());
  int64_t d = 0;
  PS_ASSIGN_OR_RETURN(std::vector<int64_t> counts, StackCounts(b, &d));
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  if (n > 4096)
    return InvalidArgument(b.path + ".inputs: " + std::to_string(n) + " vectors exceed 4096");
  if (n < 2 && !self)
    return InvalidArgument(b.path + ".inputs: needs at least 2 vectors (or self_interaction)");
  return std::unique_ptr<Op>(std::make_unique<DotInteractionOp>(std::move(counts), d, self));
}

Result<std::unique_ptr<Op>> MakeCrossOp(OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, 1));
  JsonReader& r = *b.config;
  int64_t layers = 1;
  PS_RETURN_IF_ERROR(ReadPositive(r, "num_layers", &layers, false, 64));
  int64_t rank = 0;
  PS_RETURN_IF_ERROR(r.GetOr("rank", &rank));
  const int64_t d = NumElements(b.in_shapes[0]);
  if (d > 65536)
    return InvalidArgument(b.path + ".inputs: width " + std::to_string(d) + " exceeds 65536");
  if (rank < 0 || rank > d) {
    return InvalidArgument(r.Path("rank") + ": must be in [0, " + std::to_string(d) +
                           "] (0: full rank), got " + std::to_string(rank));
  }
  PS_RETURN_IF_ERROR(r.Finish());
  std::vector<size_t> a, v, bias;
  for (int64_t l = 0; l < layers; ++l) {
    std::string s = "_";
    s += std::to_string(l);
    const InitSpec glorot{InitKind::kGlorotUniform};
    if (rank == 0) {
      PS_ASSIGN_OR_RETURN(size_t k,
                          b.vars->Add({b.name + "/kernel" + s, {d, d}, glorot, false}, b.path));
      a.push_back(k);
    } else {
      PS_ASSIGN_OR_RETURN(size_t u,
                          b.vars->Add({b.name + "/u" + s, {d, rank}, glorot, false}, b.path));
      PS_ASSIGN_OR_RETURN(size_t vv,
                          b.vars->Add({b.name + "/v" + s, {rank, d}, glorot, false}, b.path));
      a.push_back(u);
      v.push_back(vv);
    }
    PS_ASSIGN_OR_RETURN(
        size_t bb,
        b.vars->Add({b.name + "/bias" + s, {d}, InitSpec{InitKind::kZeros}, false}, b.path));
    bias.push_back(bb);
  }
  return std::unique_ptr<Op>(
      std::make_unique<CrossOp>(d, rank, std::move(a), std::move(v), std::move(bias)));
}

}  // namespace ps::model
