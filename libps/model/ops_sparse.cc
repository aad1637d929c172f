// The layers over sparse inputs: embedding (pooled rows of a shared table per field) and
// linear (a weighted sum of one weight row per id plus a bias: logistic regression and the
// "wide" part of Wide & Deep).
#include <algorithm>
#include <limits>
#include <utility>

#include "libps/core/text.h"
#include "libps/model/initializer.h"
#include "libps/model/ops.h"

namespace ps::model {
namespace {

constexpr int64_t kMaxRows = int64_t{1} << 40;
constexpr int64_t kMaxDim = int64_t{1} << 16;

// The table row of a raw id: the id itself, or a hash of it into `rows` buckets.
int64_t RowOf(int64_t id, bool hashed, int64_t rows) {
  return hashed ? static_cast<int64_t>(SplitMix64(static_cast<uint64_t>(id)) %
                                       static_cast<uint64_t>(rows))
                : id;
}

class SparseOp : public Op {
 public:
  // Input k's ids address rows [first[k], first[k] + limit[k]) of the table; an empty
  // `first` means every input addresses the whole table (rows).
  SparseOp(std::vector<SparseInput> inputs, size_t var, int64_t rows, int64_t dim, bool hashed,
           std::vector<int64_t> first = {})
      : inputs_(std::move(inputs)),
        var_(var),
        rows_(rows),
        dim_(dim),
        hashed_(hashed),
        local_(inputs_.size()) {
    has_variables_ = true;
    if (first.empty()) {
      first_.assign(inputs_.size(), 0);
      limit_.assign(inputs_.size(), rows_);
    } else {
      first_ = std::move(first);
      for (size_t k = 0; k < inputs_.size(); ++k) {
        limit_.push_back((k + 1 < first_.size() ? first_[k + 1] : rows_) - first_[k]);
      }
    }
  }

  void CollectRows(const Batch& batch, std::vector<std::vector<int64_t>>* rows) const override {
    std::vector<int64_t>& out = (*rows)[var_];
    for (size_t k = 0; k < inputs_.size(); ++k) {
      for (int64_t id : batch.sparse[static_cast<size_t>(inputs_[k].field)].ids)
        out.push_back(Row(k, id));
    }
  }
  void LimitIds(std::vector<int64_t>* bound) const override {
    if (hashed_) return;
    for (size_t k = 0; k < inputs_.size(); ++k) {
      int64_t& b = (*bound)[static_cast<size_t>(inputs_[k].field)];
      b = std::min(b, limit_[k]);
    }
  }

 protected:
  // local_[k][j]: position of input k's j-th id's row in params.rows[var].
  Status MapIds(const OpContext& ctx, const std::string& var_name) {
    std::span<const int64_t> rows = ctx.params->rows[var_];
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const SparseField& f = Field(ctx, k);
      local_[k].resize(f.ids.size());
      for (size_t j = 0; j < f.ids.size(); ++j) {
        const int64_t row = Row(k, f.ids[j]);
        auto it = std::lower_bound(rows.begin(), rows.end(), row);
        if (it == rows.end() || *it != row) {
          return InvalidArgument("params.rows[" + var_name + "]: lacks row " + std::to_string(row) +
                                 " that the batch uses");
        }
        local_[k][j] = it - rows.begin();
      }
    }
    return Status::Ok();
  }
  int64_t Row(size_t k, int64_t id) const { return first_[k] + RowOf(id, hashed_, limit_[k]); }
  const SparseField& Field(const OpContext& ctx, size_t k) const {
    return ctx.batch->sparse[static_cast<size_t>(inputs_[k].field)];
  }

  std::vector<SparseInput> inputs_;
  size_t var_;
  int64_t rows_;
  int64_t dim_;
  bool hashed_;
  std::vector<int64_t> first_;  // [inputs] first table row of each input's block
  std::vector<int64_t> limit_;  // [inputs] rows in each input's block
  std::vector<std::vector<int64_t>> local_;
  std::vector<float> y_;
};

// embedding: input k's pooled row vector at [k, dim] of the output ([dim] for one input).
class EmbeddingOp final : public SparseOp {
 public:
  EmbeddingOp(std::vector<SparseInput> inputs, const VarSet::Table& t, Combiner combiner)
      : SparseOp(std::move(inputs), t.var, t.rows, t.dim, t.hashed),
        var_name_(t.name + "/embeddings"),
        combiner_(combiner) {
    SetShape(inputs_.size() == 1 ? Shape{dim_} : Shape{static_cast<int64_t>(inputs_.size()), dim_});
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>>) override {
    PS_RETURN_IF_ERROR(MapIds(ctx, var_name_));
    y_.resize(static_cast<size_t>(ctx.batch_size * size_));
    for (size_t k = 0; k < inputs_.size(); ++k) {
      EmbeddingBagForward(Field(ctx, k), local_[k], ctx.params->values[var_], dim_, combiner_,
                          y_.data() + static_cast<int64_t>(k) * dim_, size_, inputs_[k].weighted);
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>>,
                std::span<float> dout, std::span<const std::span<float>>) override {
    for (size_t k = 0; k < inputs_.size(); ++k) {
      EmbeddingBagBackward(Field(ctx, k), local_[k], dim_, combiner_,
                           dout.data() + static_cast<int64_t>(k) * dim_, size_,
                           ctx.grads->values[var_], inputs_[k].weighted);
    }
  }

 private:
  std::string var_name_;
  Combiner combiner_;
};

// linear: y[u] = bias[u] + Σ_inputs Σ_j w_j * weights[row(id_j), u].
class LinearOp final : public SparseOp {
 public:
  LinearOp(std::vector<SparseInput> inputs, std::string name, size_t weights, size_t bias,
           int64_t rows, int64_t units, bool hashed, std::vector<int64_t> first)
      : SparseOp(std::move(inputs), weights, rows, units, hashed, std::move(first)),
        var_name_(std::move(name)),
        bias_(bias) {
    SetShape({units});
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>>) override {
    PS_RETURN_IF_ERROR(MapIds(ctx, var_name_));
    const int64_t u = dim_;
    std::span<const float> bias = ctx.params->values[bias_];
    std::span<const float> w = ctx.params->values[var_];
    y_.resize(static_cast<size_t>(ctx.batch_size * u));
    for (int64_t i = 0; i < ctx.batch_size; ++i)
      std::copy(bias.begin(), bias.end(), y_.begin() + i * u);
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const SparseField& f = Field(ctx, k);
      const bool weighted = inputs_[k].weighted && !f.values.empty();
      for (int64_t i = 0; i < ctx.batch_size; ++i) {
        float* y = y_.data() + i * u;
        for (int64_t j = f.offsets[i]; j < f.offsets[i + 1]; ++j) {
          const float a = weighted ? f.values[j] : 1.0f;
          const float* row = w.data() + local_[k][j] * u;
          for (int64_t c = 0; c < u; ++c) y[c] += a * row[c];
        }
      }
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>>,
                std::span<float> dout, std::span<const std::span<float>>) override {
    const int64_t u = dim_;
    std::span<float> db = ctx.grads->values[bias_];
    std::fill(db.begin(), db.end(), 0.0f);
    for (int64_t i = 0; i < ctx.batch_size; ++i) {
      for (int64_t c = 0; c < u; ++c) db[c] += dout[i * u + c];
    }
    std::span<float> dw = ctx.grads->values[var_];
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const SparseField& f = Field(ctx, k);
      const bool weighted = inputs_[k].weighted && !f.values.empty();
      for (int64_t i = 0; i < ctx.batch_size; ++i) {
        const float* g = dout.data() + i * u;
        for (int64_t j = f.offsets[i]; j < f.offsets[i + 1]; ++j) {
          const float a = weighted ? f.values[j] : 1.0f;
          float* row = dw.data() + local_[k][j] * u;
          for (int64_t c = 0; c < u; ++c) row[c] += a * g[c];
        }
      }
    }
  }

 private:
  std::string var_name_;
  size_t bias_;
};

// vocab (ids must lie below it) or num_buckets (ids are hashed into that many rows).
Status ReadRows(JsonReader& r, VarSet::TableDecl* d, bool* hashed) {
  const bool has_vocab = r.Has("vocab");
  const bool has_buckets = r.Has("num_buckets");
  if (has_vocab && has_buckets) {
    return InvalidArgument(r.Path("num_buckets") + ": give either vocab or num_buckets, not both");
  }
  *hashed = has_buckets;
  if (!has_vocab && !has_buckets) return Status::Ok();
  d->rows_key = has_buckets ? "num_buckets" : "vocab";
  d->rows_given = true;
  return ReadPositive(r, d->rows_key.c_str(), &d->rows, true, kMaxRows);
}

}  // namespace

Result<std::unique_ptr<Op>> MakeEmbeddingOp(OpBuild& b, bool linear) {
  if (b.in_shapes.empty())
    return InvalidArgument(b.path + ".inputs: takes at least 1 sparse input, got 0");
  std::vector<SparseInput> inputs;
  for (size_t i = 0; i < b.in_shapes.size(); ++i) {
    if (!b.in_sparse[i]) {
      return InvalidArgument(b.path + ".inputs[" + std::to_string(i) +
                             "]: " + QuoteInput(b.in_names[i], '"') + " is not a sparse input; " +
                             (linear ? "linear" : "embedding") + " layers read sparse inputs only");
    }
    inputs.push_back(b.sparse[i]);
  }
  JsonReader& r = *b.config;
  VarSet::TableDecl d;
  d.name = b.name;
  bool hashed = false;
  if (linear) {
    // "vocab": [v_0, v_1, ...]: input k owns its own block of v_k rows.
    std::vector<int64_t> first;
    if (r.object().contains("vocab") && r.object()["vocab"].is_array()) {
      std::vector<int64_t> vocabs;
      PS_RETURN_IF_ERROR(r.Get("vocab", &vocabs));
      if (vocabs.size() != inputs.size()) {
        return InvalidArgument(r.Path("vocab") + ": has " + std::to_string(vocabs.size()) +
                               " entries for " + std::to_string(inputs.size()) + " inputs");
      }
      d.rows = 0;
      for (size_t k = 0; k < vocabs.size(); ++k) {
        if (vocabs[k] < 1 || vocabs[k] > kMaxRows) {
          return InvalidArgument(r.Path("vocab") + "[" + std::to_string(k) +
                                 "]: must be in [1, 2^40], got " + std::to_string(vocabs[k]));
        }
        first.push_back(d.rows);
        d.rows += vocabs[k];
      }
      if (d.rows > kMaxRows)
        return InvalidArgument(r.Path("vocab") + ": more than 2^40 rows in all");
      d.rows_given = true;
    } else {
      PS_RETURN_IF_ERROR(ReadRows(r, &d, &hashed));
    }
    if (!d.rows_given)
      return InvalidArgument(r.Path("vocab") + ": required key is missing (or num_buckets)");
    int64_t units = 1;
    PS_RETURN_IF_ERROR(ReadPositive(r, "units", &units, false, kMaxDim));
    InitSpec init{InitKind::kZeros};
    PS_RETURN_IF_ERROR(ReadInitKey(r, "init", &init));
    bool lazy = false;
    PS_RETURN_IF_ERROR(r.GetOr("lazy", &lazy));
    RowPolicy row_policy;
    PS_RETURN_IF_ERROR(ReadRowPolicy(r, lazy, &row_policy));
    PS_RETURN_IF_ERROR(r.Finish());
    const std::string wname = b.name + "/weights";
    PS_ASSIGN_OR_RETURN(
        size_t w, b.vars->Add({wname, {d.rows, units}, init, true, lazy, row_policy}, b.path));
    PS_ASSIGN_OR_RETURN(
        size_t bias,
        b.vars->Add({b.name + "/bias", {units}, InitSpec{InitKind::kZeros}, false}, b.path));
    return std::unique_ptr<Op>(std::make_unique<LinearOp>(std::move(inputs), wname, w, bias, d.rows,
                                                          units, hashed, std::move(first)));
  }
  PS_RETURN_IF_ERROR(ReadRows(r, &d, &hashed));
  PS_RETURN_IF_ERROR(r.GetOr("table", &d.name));
  if (d.name.empty() || d.name.find('/') != std::string::npos) {
    return InvalidArgument(r.Path("table") + ": must be a non-empty name without '/'");
  }
  if (r.Has("dim")) {
    d.dim_given = true;
    PS_RETURN_IF_ERROR(ReadPositive(r, "dim", &d.dim, true, kMaxDim));
  }
  std::string combiner_name = "mean";
  PS_RETURN_IF_ERROR(r.GetOr("combiner", &combiner_name));
  Combiner combiner = Combiner::kMean;
  if (!ParseCombiner(combiner_name, &combiner)) {
    return InvalidArgument(r.Path("combiner") + ": unknown combiner " +
                           QuoteInput(combiner_name, '"') + " (expected mean, sum or sqrtn)");
  }
  d.init_given = r.Has("init");
  PS_RETURN_IF_ERROR(ReadInitKey(r, "init", &d.init));
  d.lazy_given = r.Has("lazy");
  PS_RETURN_IF_ERROR(r.GetOr("lazy", &d.lazy));
  // A layer re-using a table without "lazy" inherits it: check admit/evict against the
  // declared table in DeclareTable, and here only when this layer states lazy itself.
  PS_RETURN_IF_ERROR(ReadRowPolicy(r, d.lazy || !d.lazy_given, &d.row_policy, &d.row_policy_given));
  PS_RETURN_IF_ERROR(r.Finish());
  PS_ASSIGN_OR_RETURN(VarSet::Table t, b.vars->DeclareTable(d, b.path));
  return std::unique_ptr<Op>(std::make_unique<EmbeddingOp>(std::move(inputs), t, combiner));
}

}  // namespace ps::model
