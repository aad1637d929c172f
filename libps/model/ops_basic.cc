// Op plumbing (shapes, variables, dispatch) and the element-wise and structural layers:
// dense, activation, dropout, layer_norm, concat, add, multiply, reshape, flatten.
#include <algorithm>
#include <cmath>
#include <utility>

#include "libps/core/text.h"
#include "libps/model/initializer.h"
#include "libps/model/ops.h"
#include "libps/model/plugins.h"

namespace ps::model {

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string ShapeString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Result<size_t> VarSet::Add(VariableDef def, const std::string& path) {
  for (const VariableDef& d : defs_) {
    if (d.name == def.name)
      return InvalidArgument(path + ": variable " + QuoteInput(def.name, '"') +
                             " is defined twice");
  }
  defs_.push_back(std::move(def));
  return defs_.size() - 1;
}

Result<VarSet::Table> VarSet::DeclareTable(const TableDecl& d, const std::string& path) {
  auto not_lazy = [&](bool lazy) -> Status {
    if (!d.row_policy_given || lazy) return Status::Ok();
    return InvalidArgument(path +
                           (d.row_policy.evicts() && !d.row_policy.admits() ? ".evict" : ".admit") +
                           ": applies to lazy tables only (set \"lazy\": true on table " +
                           QuoteInput(d.name, '"') + ")");
  };
  for (const Table& t : tables_) {
    if (t.name != d.name) continue;
    PS_RETURN_IF_ERROR(not_lazy(t.lazy));
    auto differs = [&](const std::string& key, const std::string& given, const std::string& first) {
      return InvalidArgument(path + "." + key + ": " + given + " differs from " + first +
                             " of table " + QuoteInput(t.name, '"') + " (" + t.first + ")");
    };
    if (d.rows_given && (d.rows_key == "num_buckets") != t.hashed) {
      return InvalidArgument(path + "." + d.rows_key + ": table " + QuoteInput(t.name, '"') +
                             " is declared with " + (t.hashed ? "num_buckets" : "vocab") + " by " +
                             t.first);
    }
    if (d.rows_given && d.rows != t.rows) {
      return differs(d.rows_key, std::to_string(d.rows), std::to_string(t.rows));
    }
    if (d.dim_given && d.dim != t.dim)
      return differs("dim", std::to_string(d.dim), std::to_string(t.dim));
    if (d.init_given && !(d.init == t.init)) {
      return differs("init", InitToJson(d.init).dump(), InitToJson(t.init).dump());
    }
    if (d.lazy_given && d.lazy != t.lazy) {
      return differs("lazy", d.lazy ? "true" : "false", t.lazy ? "true" : "false");
    }
    if (d.row_policy_given && !(d.row_policy == t.row_policy)) {
      return differs("admit/evict", RowPolicyToJson(d.row_policy).dump(),
                     RowPolicyToJson(t.row_policy).dump());
    }
    return t;
  }
  if (!d.rows_given)
    return InvalidArgument(path + ".vocab: required key is missing (or num_buckets)");
  if (!d.dim_given) return InvalidArgument(path + ".dim: required key is missing");
  PS_RETURN_IF_ERROR(not_lazy(d.lazy));
  Table t{d.name, d.rows, d.dim, d.init, d.lazy, d.row_policy, d.rows_key == "num_buckets",
          path,   0};
  PS_ASSIGN_OR_RETURN(
      t.var,
      Add({d.name + "/embeddings", {d.rows, d.dim}, d.init, true, d.lazy, d.row_policy}, path));
  tables_.push_back(t);
  return t;
}

void Op::CollectRows(const Batch&, std::vector<std::vector<int64_t>>*) const {}
void Op::LimitIds(std::vector<int64_t>*) const {}

void Op::SetShape(Shape s) {
  shape_ = std::move(s);
  size_ = NumElements(shape_);
}

Status RequireDenseInputs(const OpBuild& b, size_t min_inputs, size_t max_inputs) {
  const size_t n = b.in_shapes.size();
  if (n < min_inputs || n > max_inputs) {
    std::string want = min_inputs == max_inputs ? std::to_string(min_inputs)
                       : max_inputs == SIZE_MAX
                           ? "at least " + std::to_string(min_inputs)
                           : std::to_string(min_inputs) + " to " + std::to_string(max_inputs);
    return InvalidArgument(b.path + ".inputs: takes " + want + " input" + (want == "1" ? "" : "s") +
                           ", got " + std::to_string(n));
  }
  for (size_t i = 0; i < n; ++i) {
    if (b.in_sparse[i]) {
      return InvalidArgument(
          b.path + ".inputs[" + std::to_string(i) + "]: " + QuoteInput(b.in_names[i], '"') +
          " is a sparse input; only embedding and linear layers read sparse inputs");
    }
  }
  return Status::Ok();
}

Status ReadPositive(JsonReader& r, const char* key, int64_t* out, bool required, int64_t max) {
  if (required) {
    PS_RETURN_IF_ERROR(r.Get(key, out));
  } else {
    PS_RETURN_IF_ERROR(r.GetOr(key, out));
  }
  if (*out < 1) return InvalidArgument(r.Path(key) + ": must be > 0, got " + std::to_string(*out));
  if (*out > max) {
    return InvalidArgument(r.Path(key) + ": must be <= " + std::to_string(max) + ", got " +
                           std::to_string(*out));
  }
  return Status::Ok();
}

Status ReadActivationKey(JsonReader& r, Activation* out) {
  std::string name = ActivationName(*out);
  PS_RETURN_IF_ERROR(r.GetOr("activation", &name));
  if (!ParseActivation(name, out)) {
    return InvalidArgument(r.Path("activation") + ": unknown activation " + QuoteInput(name, '"') +
                           " (expected linear, relu, gelu, tanh or sigmoid)");
  }
  return Status::Ok();
}

Status ReadInitKey(JsonReader& r, const char* key, InitSpec* out) {
  if (const Json* j = r.Find(key)) {
    PS_ASSIGN_OR_RETURN(*out, ParseInit(*j, r.Path(key)));
  }
  return Status::Ok();
}

namespace {

std::span<float> Grad(const OpContext& ctx, size_t var) { return ctx.grads->values[var]; }

void AddTo(std::span<float> dst, std::span<const float> src) {
  for (size_t i = 0; i < dst.size(); ++i) dst[i] += src[i];
}

// ---------------------------------------------------------------------------------
// dense: y = act(flatten(x) · kernel + bias); kernel [in, units], bias [units].
class DenseOp final : public Op {
 public:
  DenseOp(int64_t in, int64_t units, Activation act, size_t kernel, size_t bias)
      : layer_(in, units, act), kernel_(kernel), bias_(bias) {
    SetShape({units});
    has_variables_ = true;
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    return layer_.Forward(in[0], ctx.batch_size, ctx.params->values[kernel_],
                          ctx.params->values[bias_]);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>> in,
                std::span<float> dout, std::span<const std::span<float>> din) override {
    layer_.Backward(in[0], dout, ctx.params->values[kernel_], Grad(ctx, kernel_), Grad(ctx, bias_),
                    din[0], true);
  }

 private:
  DenseLayer layer_;
  size_t kernel_, bias_;
};

// activation: y = act(x), any shape.
class ActivationOp final : public Op {
 public:
  ActivationOp(Shape s, Activation act) : act_(act) { SetShape(std::move(s)); }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    y_.resize(static_cast<size_t>(ctx.batch_size * size_));
    ApplyActivation(act_, in[0].data(), y_.data(), static_cast<int64_t>(y_.size()));
    return std::span<const float>(y_);
  }
  void Backward(const OpContext&, std::span<const std::span<const float>> in, std::span<float> dout,
                std::span<const std::span<float>> din) override {
    if (din[0].empty()) return;
    ActivationBackward(act_, in[0].data(), y_.data(), dout.data(), static_cast<int64_t>(y_.size()));
    AddTo(din[0], dout);
  }

 private:
  Activation act_;
  std::vector<float> y_;
};

// dropout: while training, each element is kept with probability 1 - rate and scaled by
// 1 / (1 - rate); the mask of element i in training pass `step` is a hash of
// (seed, step, i). Outside training the identity.
class DropoutOp final : public Op {
 public:
  DropoutOp(Shape s, double rate, uint64_t seed) : rate_(rate), seed_(seed) {
    SetShape(std::move(s));
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    active_ = ctx.training && rate_ > 0;
    if (!active_) return in[0];
    const size_t n = static_cast<size_t>(ctx.batch_size * size_);
    mask_.resize(n);
    y_.resize(n);
    const float scale = static_cast<float>(1.0 / (1.0 - rate_));
    const uint64_t key = SplitMix64(seed_ ^ SplitMix64(ctx.step + 0x5DEECE66DULL));
    for (size_t i = 0; i < n; ++i) {
      const double u = static_cast<double>(SplitMix64(key + i) >> 11) * 0x1.0p-53;
      mask_[i] = u < rate_ ? 0.0f : scale;
      y_[i] = in[0][i] * mask_[i];
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext&, std::span<const std::span<const float>>, std::span<float> dout,
                std::span<const std::span<float>> din) override {
    if (din[0].empty()) return;
    if (!active_) {
      AddTo(din[0], dout);
      return;
    }
    for (size_t i = 0; i < dout.size(); ++i) din[0][i] += dout[i] * mask_[i];
  }

 private:
  double rate_;
  uint64_t seed_;
  bool active_ = false;
  std::vector<float> mask_;  // [batch * size]: 0 or 1 / (1 - rate)
  std::vector<float> y_;
};

// layer_norm over the last axis (width d): y = gamma * (x - mean) / sqrt(var + eps) + beta.
class LayerNormOp final : public Op {
 public:
  LayerNormOp(Shape s, double eps, size_t gamma, size_t beta)
      : eps_(eps), gamma_(gamma), beta_(beta) {
    d_ = s.back();
    SetShape(std::move(s));
    has_variables_ = true;
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    const int64_t rows = ctx.batch_size * size_ / d_;
    y_.resize(static_cast<size_t>(rows * d_));
    xhat_.resize(y_.size());
    inv_.resize(static_cast<size_t>(rows));
    std::span<const float> g = ctx.params->values[gamma_], b = ctx.params->values[beta_];
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = in[0].data() + r * d_;
      double mean = 0, var = 0;
      for (int64_t k = 0; k < d_; ++k) mean += x[k];
      mean /= static_cast<double>(d_);
      for (int64_t k = 0; k < d_; ++k) var += (x[k] - mean) * (x[k] - mean);
      var /= static_cast<double>(d_);
      const double inv = 1.0 / std::sqrt(var + eps_);
      inv_[r] = static_cast<float>(inv);
      float* xh = xhat_.data() + r * d_;
      float* y = y_.data() + r * d_;
      for (int64_t k = 0; k < d_; ++k) {
        xh[k] = static_cast<float>((x[k] - mean) * inv);
        y[k] = g[k] * xh[k] + b[k];
      }
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>>,
                std::span<float> dout, std::span<const std::span<float>> din) override {
    const int64_t rows = static_cast<int64_t>(inv_.size());
    std::span<float> dg = Grad(ctx, gamma_), db = Grad(ctx, beta_);
    std::fill(dg.begin(), dg.end(), 0.0f);
    std::fill(db.begin(), db.end(), 0.0f);
    std::span<const float> g = ctx.params->values[gamma_];
    for (int64_t r = 0; r < rows; ++r) {
      const float* dy = dout.data() + r * d_;
      const float* xh = xhat_.data() + r * d_;
      double m1 = 0, m2 = 0;  // mean(dxhat), mean(dxhat * xhat)
      for (int64_t k = 0; k < d_; ++k) {
        dg[k] += dy[k] * xh[k];
        db[k] += dy[k];
        const double dxh = double{dy[k]} * g[k];
        m1 += dxh;
        m2 += dxh * xh[k];
      }
      if (din[0].empty()) continue;
      m1 /= static_cast<double>(d_);
      m2 /= static_cast<double>(d_);
      float* dx = din[0].data() + r * d_;
      for (int64_t k = 0; k < d_; ++k) {
        dx[k] += static_cast<float>(inv_[r] * (double{dy[k]} * g[k] - m1 - xh[k] * m2));
      }
    }
  }

 private:
  double eps_;
  size_t gamma_, beta_;
  int64_t d_ = 1;
  std::vector<float> y_, xhat_;  // [rows * d]
  std::vector<float> inv_;       // [rows] 1 / sqrt(var + eps)
};

// concat: the inputs flattened and joined per example.
class ConcatOp final : public Op {
 public:
  explicit ConcatOp(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {
    int64_t n = 0;
    for (int64_t s : sizes_) n += s;
    SetShape({n});
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    const int64_t b = ctx.batch_size;
    y_.resize(static_cast<size_t>(b * size_));
    int64_t off = 0;
    for (size_t k = 0; k < sizes_.size(); ++k) {
      const int64_t s = sizes_[k];
      for (int64_t i = 0; i < b; ++i) {
        std::copy_n(in[k].data() + i * s, s, y_.data() + i * size_ + off);
      }
      off += s;
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>>,
                std::span<float> dout, std::span<const std::span<float>> din) override {
    int64_t off = 0;
    for (size_t k = 0; k < sizes_.size(); ++k) {
      const int64_t s = sizes_[k];
      if (!din[k].empty()) {
        for (int64_t i = 0; i < ctx.batch_size; ++i) {
          const float* src = dout.data() + i * size_ + off;
          float* dst = din[k].data() + i * s;
          for (int64_t j = 0; j < s; ++j) dst[j] += src[j];
        }
      }
      off += s;
    }
  }

 private:
  std::vector<int64_t> sizes_;
  std::vector<float> y_;
};

// add / multiply: element-wise over inputs of one shape.
class AddOp final : public Op {
 public:
  AddOp(Shape s, size_t n, bool multiply) : n_(n), multiply_(multiply) { SetShape(std::move(s)); }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    const size_t len = static_cast<size_t>(ctx.batch_size * size_);
    y_.assign(in[0].begin(), in[0].begin() + static_cast<std::ptrdiff_t>(len));
    for (size_t k = 1; k < n_; ++k) {
      for (size_t i = 0; i < len; ++i) y_[i] = multiply_ ? y_[i] * in[k][i] : y_[i] + in[k][i];
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext&, std::span<const std::span<const float>> in, std::span<float> dout,
                std::span<const std::span<float>> din) override {
    for (size_t k = 0; k < n_; ++k) {
      if (din[k].empty()) continue;
      if (!multiply_) {
        AddTo(din[k], dout);
        continue;
      }
      for (size_t i = 0; i < dout.size(); ++i) {
        float p = dout[i];
        for (size_t j = 0; j < n_; ++j) {
          if (j != k) p *= in[j][i];
        }
        din[k][i] += p;
      }
    }
  }

 private:
  size_t n_;
  bool multiply_;
  std::vector<float> y_;
};

// reshape / flatten: the same values under another per-example shape.
class ReshapeOp final : public Op {
 public:
  explicit ReshapeOp(Shape s) { SetShape(std::move(s)); }
  Result<std::span<const float>> Forward(const OpContext&,
                                         std::span<const std::span<const float>> in) override {
    return in[0];
  }
  void Backward(const OpContext&, std::span<const std::span<const float>>, std::span<float> dout,
                std::span<const std::span<float>> din) override {
    if (!din[0].empty()) AddTo(din[0], dout);
  }
};

}  // namespace

Result<std::unique_ptr<Op>> MakeDenseOp(OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, 1));
  JsonReader& r = *b.config;
  int64_t units = 0;
  PS_RETURN_IF_ERROR(ReadPositive(r, "units", &units, true, kMaxWidth));
  Activation act = Activation::kLinear;
  PS_RETURN_IF_ERROR(ReadActivationKey(r, &act));
  InitSpec kernel_init{InitKind::kGlorotUniform};
  PS_RETURN_IF_ERROR(ReadInitKey(r, "kernel_init", &kernel_init));
  PS_RETURN_IF_ERROR(r.Finish());
  const int64_t in = NumElements(b.in_shapes[0]);
  PS_ASSIGN_OR_RETURN(size_t k,
                      b.vars->Add({b.name + "/kernel", {in, units}, kernel_init, false}, b.path));
  PS_ASSIGN_OR_RETURN(
      size_t bias,
      b.vars->Add({b.name + "/bias", {units}, InitSpec{InitKind::kZeros}, false}, b.path));
  return std::unique_ptr<Op>(std::make_unique<DenseOp>(in, units, act, k, bias));
}

Result<std::unique_ptr<Op>> MakeActivationOp(OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, 1));
  JsonReader& r = *b.config;
  if (!r.Has("activation"))
    return InvalidArgument(r.Path("activation") + ": required key is missing");
  Activation act = Activation::kLinear;
  PS_RETURN_IF_ERROR(ReadActivationKey(r, &act));
  PS_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Op>(std::make_unique<ActivationOp>(b.in_shapes[0], act));
}

Result<std::unique_ptr<Op>> MakeDropoutOp(OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, 1));
  JsonReader& r = *b.config;
  double rate = 0;
  PS_RETURN_IF_ERROR(r.Get("rate", &rate));
  if (!(rate >= 0.0 && rate < 1.0)) {
    return InvalidArgument(r.Path("rate") + ": must be in [0, 1), got " + std::to_string(rate));
  }
  uint64_t seed = 0;
  PS_RETURN_IF_ERROR(r.GetOr("seed", &seed));
  PS_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Op>(std::make_unique<DropoutOp>(b.in_shapes[0], rate, seed));
}

Result<std::unique_ptr<Op>> MakeLayerNormOp(OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, 1));
  JsonReader& r = *b.config;
  double eps = 1e-3;  // Keras LayerNormalization
  PS_RETURN_IF_ERROR(r.GetOr("epsilon", &eps));
  if (!(eps > 0.0 && std::isfinite(eps))) {
    return InvalidArgument(r.Path("epsilon") + ": must be finite and > 0, got " +
                           std::to_string(eps));
  }
  PS_RETURN_IF_ERROR(r.Finish());
  const int64_t d = b.in_shapes[0].back();
  PS_ASSIGN_OR_RETURN(
      size_t g, b.vars->Add({b.name + "/gamma", {d}, InitSpec{InitKind::kOnes}, false}, b.path));
  PS_ASSIGN_OR_RETURN(
      size_t beta, b.vars->Add({b.name + "/beta", {d}, InitSpec{InitKind::kZeros}, false}, b.path));
  return std::unique_ptr<Op>(std::make_unique<LayerNormOp>(b.in_shapes[0], eps, g, beta));
}

Result<std::unique_ptr<Op>> MakeConcatOp(OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, SIZE_MAX));
  PS_RETURN_IF_ERROR(b.config->Finish());
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const Shape& s : b.in_shapes) {
    sizes.push_back(NumElements(s));
    total += sizes.back();
  }
  if (total > kMaxWidth) {
    return InvalidArgument(b.path + ".inputs: concatenated width " + std::to_string(total) +
                           " exceeds " + std::to_string(kMaxWidth));
  }
  return std::unique_ptr<Op>(std::make_unique<ConcatOp>(std::move(sizes)));
}

Result<std::unique_ptr<Op>> MakeAddOp(OpBuild& b, bool multiply) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 2, SIZE_MAX));
  PS_RETURN_IF_ERROR(b.config->Finish());
  for (size_t i = 1; i < b.in_shapes.size(); ++i) {
    if (b.in_shapes[i] != b.in_shapes[0]) {
      return InvalidArgument(b.path + ".inputs[" + std::to_string(i) + "]: shape " +
                             ShapeString(b.in_shapes[i]) + " of " + QuoteInput(b.in_names[i], '"') +
                             " differs from " + ShapeString(b.in_shapes[0]) + " of \"" +
                             b.in_names[0] + "\"");
    }
  }
  return std::unique_ptr<Op>(std::make_unique<AddOp>(b.in_shapes[0], b.in_shapes.size(), multiply));
}

Result<std::unique_ptr<Op>> MakeReshapeOp(OpBuild& b, bool flatten) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, 1));
  JsonReader& r = *b.config;
  const int64_t n = NumElements(b.in_shapes[0]);
  Shape shape{n};
  if (!flatten) {
    PS_RETURN_IF_ERROR(r.Get("shape", &shape));
    if (shape.empty()) return InvalidArgument(r.Path("shape") + ": must not be empty");
    int unknown = -1;
    int64_t known = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == -1 && unknown < 0) {
        unknown = static_cast<int>(i);
      } else if (shape[i] < 1) {
        return InvalidArgument(r.Path("shape") + "[" + std::to_string(i) +
                               "]: must be > 0 (or one -1), got " + std::to_string(shape[i]));
      } else {
        known *= shape[i];
      }
    }
    if (unknown >= 0 && known > 0 && n % known == 0)
      shape[static_cast<size_t>(unknown)] = n / known;
    if (NumElements(shape) != n || (unknown >= 0 && shape[static_cast<size_t>(unknown)] == -1)) {
      return InvalidArgument(r.Path("shape") + ": " + ShapeString(shape) + " does not hold the " +
                             std::to_string(n) + " values of input shape " +
                             ShapeString(b.in_shapes[0]));
    }
  }
  PS_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Op>(std::make_unique<ReshapeOp>(std::move(shape)));
}

const char* OpTypeList() {
  return "dense, activation, dropout, layer_norm, concat, add, multiply, reshape, flatten, embedding, linear, "
         "fm, cross, dot_interaction, conv2d, max_pool2d, avg_pool2d";
}

Result<std::unique_ptr<Op>> MakeOp(const std::string& type, OpBuild& b) {
  if (type == "dense") return MakeDenseOp(b);
  if (type == "activation") return MakeActivationOp(b);
  if (type == "dropout") return MakeDropoutOp(b);
  if (type == "layer_norm") return MakeLayerNormOp(b);
  if (type == "concat") return MakeConcatOp(b);
  if (type == "add") return MakeAddOp(b, false);
  if (type == "multiply") return MakeAddOp(b, true);
  if (type == "reshape") return MakeReshapeOp(b, false);
  if (type == "flatten") return MakeReshapeOp(b, true);
  if (type == "embedding") return MakeEmbeddingOp(b, false);
  if (type == "linear") return MakeEmbeddingOp(b, true);
  if (type == "fm") return MakeFmOp(b);
  if (type == "cross") return MakeCrossOp(b);
  if (type == "dot_interaction") return MakeDotInteractionOp(b);
  if (type == "conv2d") return MakeConv2dOp(b);
  if (type == "max_pool2d") return MakePool2dOp(b, true);
  if (type == "avg_pool2d") return MakePool2dOp(b, false);
  if (const pstrain::plugin::LayerType* t = FindPluginLayer(type)) return MakePluginOp(*t, b);
  return InvalidArgument(b.path + ".type: unknown layer type " + QuoteInput(type, '"') +
                         " (expected " + OpTypeList() +
                         ", or a type of a plug-in in the job's \"plugins\")");
}

}  // namespace ps::model
