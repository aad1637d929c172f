#include "libps/model/models.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "libps/core/status.h"

namespace ps::model {

namespace {

std::string FieldPath(size_t f) { return "batch.sparse[" + std::to_string(f) + "]"; }

// Checks the batch against what the model reads. vocab[f] bounds field f's ids.
Status ValidateBatch(const Batch& b, std::span<const int64_t> vocab, int64_t dense_dim,
                     int64_t outputs, bool require_labels) {
  if (b.size < 0) return InvalidArgument("batch.size: must not be negative, got " + std::to_string(b.size));
  if (b.dense_dim != dense_dim) {
    return InvalidArgument("batch.dense_dim: " + std::to_string(b.dense_dim) +
                           " does not match the model's " + std::to_string(dense_dim));
  }
  if (static_cast<int64_t>(b.dense.size()) != b.size * b.dense_dim) {
    return InvalidArgument("batch.dense: has " + std::to_string(b.dense.size()) +
                           " values, expected size * dense_dim = " +
                           std::to_string(b.size * b.dense_dim));
  }
  if (b.sparse.size() != vocab.size()) {
    return InvalidArgument("batch.sparse: has " + std::to_string(b.sparse.size()) +
                           " fields, the model reads " + std::to_string(vocab.size()));
  }
  for (size_t f = 0; f < b.sparse.size(); ++f) {
    const SparseField& s = b.sparse[f];
    if (static_cast<int64_t>(s.offsets.size()) != b.size + 1) {
      return InvalidArgument(FieldPath(f) + ".offsets: has " + std::to_string(s.offsets.size()) +
                             " entries, expected size + 1 = " + std::to_string(b.size + 1));
    }
    if (s.offsets[0] != 0) return InvalidArgument(FieldPath(f) + ".offsets[0]: must be 0");
    for (int64_t i = 0; i < b.size; ++i) {
      if (s.offsets[i + 1] < s.offsets[i]) {
        return InvalidArgument(FieldPath(f) + ".offsets[" + std::to_string(i + 1) +
                               "]: offsets must not decrease");
      }
    }
    if (s.offsets.back() != static_cast<int64_t>(s.ids.size())) {
      return InvalidArgument(FieldPath(f) + ".offsets[" + std::to_string(b.size) +
                             "]: must equal ids.size() = " + std::to_string(s.ids.size()));
    }
    if (!s.values.empty() && s.values.size() != s.ids.size()) {
      return InvalidArgument(FieldPath(f) + ".values: has " + std::to_string(s.values.size()) +
                             " entries, expected 0 or ids.size() = " + std::to_string(s.ids.size()));
    }
    for (size_t j = 0; j < s.ids.size(); ++j) {
      if (s.ids[j] < 0 || s.ids[j] >= vocab[f]) {
        return InvalidArgument(FieldPath(f) + ".ids[" + std::to_string(j) + "]: " +
                               std::to_string(s.ids[j]) + " is outside the table's " +
                               std::to_string(vocab[f]) + " rows");
      }
    }
  }
  if (b.labels.empty() && !require_labels) return Status::Ok();
  if (static_cast<int64_t>(b.labels.size()) != b.size) {
    return InvalidArgument("batch.labels: has " + std::to_string(b.labels.size()) +
                           " entries, expected size = " + std::to_string(b.size));
  }
  for (int64_t i = 0; i < b.size; ++i) {
    const float y = b.labels[i];
    const bool ok = outputs == 1 ? (y >= 0.0f && y <= 1.0f)
                                 : (y >= 0.0f && y < static_cast<float>(outputs) && std::floor(y) == y);
    if (!ok) {
      return InvalidArgument("batch.labels[" + std::to_string(i) + "]: " + std::to_string(y) +
                             (outputs == 1 ? " is not in [0, 1]"
                                           : " is not a class index in [0, " +
                                                 std::to_string(outputs) + ")"));
    }
  }
  return Status::Ok();
}

Status ValidateParams(const std::vector<VariableDef>& vars, const Params& p) {
  if (p.values.size() != vars.size()) {
    return InvalidArgument("params.values: has " + std::to_string(p.values.size()) +
                           " variables, the model has " + std::to_string(vars.size()));
  }
  for (size_t v = 0; v < vars.size(); ++v) {
    const VariableDef& def = vars[v];
    int64_t want = def.num_elements();
    if (def.sparse) {
      if (v >= p.rows.size()) return InvalidArgument("params.rows: missing rows of " + def.name);
      std::span<const int64_t> rows = p.rows[v];
      for (size_t k = 1; k < rows.size(); ++k) {
        if (rows[k] <= rows[k - 1]) {
          return InvalidArgument("params.rows[" + def.name + "]: must be sorted and unique");
        }
      }
      want = static_cast<int64_t>(rows.size()) * def.row_elements();
    }
    if (static_cast<int64_t>(p.values[v].size()) != want) {
      return InvalidArgument("params.values[" + def.name + "]: has " +
                             std::to_string(p.values[v].size()) + " floats, expected " +
                             std::to_string(want));
    }
  }
  return Status::Ok();
}

// local[j] = position of field.ids[j] in rows (sorted, unique).
Status MapIds(const SparseField& field, std::span<const int64_t> rows, const std::string& var,
              std::vector<int64_t>* local) {
  local->resize(field.ids.size());
  for (size_t j = 0; j < field.ids.size(); ++j) {
    auto it = std::lower_bound(rows.begin(), rows.end(), field.ids[j]);
    if (it == rows.end() || *it != field.ids[j]) {
      return InvalidArgument("params.rows[" + var + "]: lacks row " +
                             std::to_string(field.ids[j]) + " that the batch uses");
    }
    (*local)[j] = it - rows.begin();
  }
  return Status::Ok();
}

// Sorted unique ids over the given fields of the batch, into out (capacity reused).
void CollectRows(const Batch& b, const std::vector<size_t>& fields, std::vector<int64_t>* out) {
  out->clear();
  for (size_t f : fields) out->insert(out->end(), b.sparse[f].ids.begin(), b.sparse[f].ids.end());
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

void ResizeGrads(const std::vector<VariableDef>& vars, const Params& p, Grads* g) {
  g->values.resize(vars.size());
  for (size_t v = 0; v < vars.size(); ++v) {
    // Dense gradients are overwritten whole; sparse ones are accumulated, so zero them.
    g->values[v].resize(p.values[v].size());
    if (vars[v].sparse) std::fill(g->values[v].begin(), g->values[v].end(), 0.0f);
  }
}

LossOutput ApplyLoss(int64_t outputs, std::span<const float> logits, const Batch& b,
                     std::span<float> dlogits, std::span<float> probs) {
  std::span<const float> labels = b.labels;
  if (outputs == 1) return SigmoidCrossEntropy(logits, labels, b.size, dlogits, probs);
  return SoftmaxCrossEntropy(logits, labels, b.size, outputs, dlogits, probs);
}

// ---------------------------------------------------------------------------------

class EmbeddingMlp final : public Model {
 public:
  explicit EmbeddingMlp(EmbeddingMlpSpec spec) : spec_(std::move(spec)) {
    PS_ASSERT(spec_.classes >= 1 && spec_.dense_dim >= 0);
    outputs_ = spec_.classes;
    for (const EmbeddingTableSpec& t : spec_.tables) {
      PS_ASSERT(t.vocab > 0 && t.dim > 0);
      table_var_.push_back(variables_.size());
      variables_.push_back({t.name + "/embeddings", {t.vocab, t.dim}, t.init, true, t.lazy});
    }
    table_fields_.resize(spec_.tables.size());
    in_dim_ = 0;
    for (size_t f = 0; f < spec_.fields.size(); ++f) {
      const EmbeddingFieldSpec& fs = spec_.fields[f];
      PS_ASSERT(fs.table >= 0 && fs.table < static_cast<int>(spec_.tables.size()));
      table_fields_[fs.table].push_back(f);
      field_offset_.push_back(in_dim_);
      field_vocab_.push_back(spec_.tables[fs.table].vocab);
      in_dim_ += spec_.tables[fs.table].dim;
    }
    in_dim_ += spec_.dense_dim;
    PS_ASSERT(in_dim_ > 0);
    int64_t width = in_dim_;
    std::vector<int64_t> outs = spec_.hidden;
    outs.push_back(spec_.classes);
    for (size_t l = 0; l < outs.size(); ++l) {
      PS_ASSERT(outs[l] > 0);
      const bool last = l + 1 == outs.size();
      layers_.emplace_back(width, outs[l], last ? Activation::kLinear : spec_.activation);
      const std::string prefix = "dense_" + std::to_string(l);
      kernel_var_.push_back(variables_.size());
      variables_.push_back({prefix + "/kernel", {width, outs[l]}, InitSpec{InitKind::kGlorotUniform}, false});
      bias_var_.push_back(variables_.size());
      variables_.push_back({prefix + "/bias", {outs[l]}, InitSpec{InitKind::kZeros}, false});
      width = outs[l];
    }
    local_.resize(spec_.fields.size());
  }

  Status RowsNeeded(const Batch& batch, std::vector<std::vector<int64_t>>* rows) override {
    PS_RETURN_IF_ERROR(ValidateBatch(batch, field_vocab_, spec_.dense_dim, outputs_, false));
    rows->resize(variables_.size());
    for (size_t v = 0; v < variables_.size(); ++v) (*rows)[v].clear();
    for (size_t t = 0; t < spec_.tables.size(); ++t) {
      CollectRows(batch, table_fields_[t], &(*rows)[table_var_[t]]);
    }
    return Status::Ok();
  }

  Result<StepOutput> ForwardBackward(const Batch& batch, const Params& params,
                                     Grads* grads) override {
    PS_RETURN_IF_ERROR(ValidateBatch(batch, field_vocab_, spec_.dense_dim, outputs_, true));
    if (batch.size == 0) return InvalidArgument("batch.size: must be > 0 for a training step");
    PS_RETURN_IF_ERROR(ValidateParams(variables_, params));
    PS_ASSIGN_OR_RETURN(std::span<const float> logits, RunForward(batch, params));

    const int64_t b = batch.size;
    int64_t max_width = in_dim_;
    for (const DenseLayer& l : layers_) max_width = std::max(max_width, l.out());
    buf_a_.resize(static_cast<size_t>(b * max_width));
    buf_b_.resize(static_cast<size_t>(b * max_width));
    std::span<float> dy(buf_a_.data(), static_cast<size_t>(b * outputs_));
    LossOutput loss = ApplyLoss(outputs_, logits, batch, dy, {});

    ResizeGrads(variables_, params, grads);
    const bool need_input_grad = !spec_.fields.empty();
    float* spare = buf_b_.data();
    for (size_t l = layers_.size(); l-- > 0;) {
      const DenseLayer& layer = layers_[l];
      std::span<const float> x = l == 0 ? x_ : layers_[l - 1].output();
      std::span<float> dx;
      if (l > 0 || need_input_grad) dx = {spare, static_cast<size_t>(b * layer.in())};
      layer.Backward(x, dy, params.values[kernel_var_[l]], grads->values[kernel_var_[l]],
                     grads->values[bias_var_[l]], dx);
      spare = dy.data();
      dy = dx;
    }
    for (size_t f = 0; f < spec_.fields.size(); ++f) {
      const EmbeddingFieldSpec& fs = spec_.fields[f];
      EmbeddingBagBackward(batch.sparse[f], local_[f], spec_.tables[fs.table].dim, fs.combiner,
                           dy.data() + field_offset_[f], in_dim_,
                           grads->values[table_var_[fs.table]]);
    }
    return StepOutput{loss.loss_sum, b, loss.correct};
  }

  Result<EvalOutput> Forward(const Batch& batch, const Params& params) override {
    PS_RETURN_IF_ERROR(ValidateBatch(batch, field_vocab_, spec_.dense_dim, outputs_, false));
    PS_RETURN_IF_ERROR(ValidateParams(variables_, params));
    EvalOutput out;
    out.examples = batch.size;
    out.outputs = outputs_;
    out.probabilities.resize(static_cast<size_t>(batch.size * outputs_));
    if (batch.size == 0) return out;
    PS_ASSIGN_OR_RETURN(std::span<const float> logits, RunForward(batch, params));
    LossOutput loss = ApplyLoss(outputs_, logits, batch, {}, out.probabilities);
    out.has_labels = !batch.labels.empty();
    out.loss_sum = loss.loss_sum;
    out.correct = loss.correct;
    return out;
  }

 private:
  // Pools the embeddings into x_ (or points x_ at batch.dense) and runs the layers.
  // Returns the logits [size * outputs].
  Result<std::span<const float>> RunForward(const Batch& batch, const Params& params) {
    const int64_t b = batch.size;
    if (spec_.fields.empty()) {
      x_ = batch.dense;
    } else {
      input_.resize(static_cast<size_t>(b * in_dim_));
      for (size_t f = 0; f < spec_.fields.size(); ++f) {
        const EmbeddingFieldSpec& fs = spec_.fields[f];
        const size_t var = table_var_[fs.table];
        PS_RETURN_IF_ERROR(MapIds(batch.sparse[f], params.rows[var], variables_[var].name, &local_[f]));
        EmbeddingBagForward(batch.sparse[f], local_[f], params.values[var],
                            spec_.tables[fs.table].dim, fs.combiner,
                            input_.data() + field_offset_[f], in_dim_);
      }
      const int64_t d = spec_.dense_dim;
      if (d > 0) {
        const int64_t off = in_dim_ - d;
        for (int64_t i = 0; i < b; ++i) {
          std::copy(batch.dense.begin() + i * d, batch.dense.begin() + (i + 1) * d,
                    input_.begin() + i * in_dim_ + off);
        }
      }
      x_ = input_;
    }
    std::span<const float> h = x_;
    for (size_t l = 0; l < layers_.size(); ++l) {
      h = layers_[l].Forward(h, b, params.values[kernel_var_[l]], params.values[bias_var_[l]]);
    }
    return h;
  }

  EmbeddingMlpSpec spec_;
  int64_t in_dim_ = 0;                            // pooled embeddings + dense features
  std::vector<size_t> table_var_;                 // [tables] variable index
  std::vector<std::vector<size_t>> table_fields_; // [tables] fields reading the table
  std::vector<int64_t> field_offset_;             // [fields] column of the field in x
  std::vector<int64_t> field_vocab_;              // [fields]
  std::vector<size_t> kernel_var_;                // [layers]
  std::vector<size_t> bias_var_;                  // [layers]
  std::vector<DenseLayer> layers_;
  // Scratch, reused across calls.
  std::vector<std::vector<int64_t>> local_;  // [fields][ids] row position in params.rows
  std::vector<float> input_;                 // [size * in_dim] when there are fields
  std::span<const float> x_;                 // the first layer's input for this call
  std::vector<float> buf_a_;                 // gradient ping-pong buffers
  std::vector<float> buf_b_;
};

// ---------------------------------------------------------------------------------

class LogisticRegression final : public Model {
 public:
  explicit LogisticRegression(LogisticRegressionSpec spec) : spec_(spec) {
    PS_ASSERT(spec_.num_features > 0 && spec_.num_fields >= 1);
    outputs_ = 1;
    variables_.push_back(
        {"linear/weights", {spec_.num_features, 1}, InitSpec{InitKind::kZeros}, true, spec_.lazy});
    variables_.push_back({"linear/bias", {1}, InitSpec{InitKind::kZeros}, false});
    vocab_.assign(static_cast<size_t>(spec_.num_fields), spec_.num_features);
    for (size_t f = 0; f < vocab_.size(); ++f) all_fields_.push_back(f);
    local_.resize(vocab_.size());
  }

  Status RowsNeeded(const Batch& batch, std::vector<std::vector<int64_t>>* rows) override {
    PS_RETURN_IF_ERROR(ValidateBatch(batch, vocab_, 0, 1, false));
    rows->resize(2);
    (*rows)[1].clear();
    CollectRows(batch, all_fields_, &(*rows)[0]);
    return Status::Ok();
  }

  Result<StepOutput> ForwardBackward(const Batch& batch, const Params& params,
                                     Grads* grads) override {
    PS_RETURN_IF_ERROR(ValidateBatch(batch, vocab_, 0, 1, true));
    if (batch.size == 0) return InvalidArgument("batch.size: must be > 0 for a training step");
    PS_RETURN_IF_ERROR(ValidateParams(variables_, params));
    PS_RETURN_IF_ERROR(Logits(batch, params));
    dlogits_.resize(logits_.size());
    LossOutput loss = SigmoidCrossEntropy(logits_, batch.labels, batch.size, dlogits_, {});
    ResizeGrads(variables_, params, grads);
    std::vector<float>& dw = grads->values[0];
    float db = 0;
    for (float d : dlogits_) db += d;
    grads->values[1][0] = db;
    for (size_t f = 0; f < batch.sparse.size(); ++f) {
      const SparseField& s = batch.sparse[f];
      for (int64_t i = 0; i < batch.size; ++i) {
        for (int64_t j = s.offsets[i]; j < s.offsets[i + 1]; ++j) {
          dw[local_[f][j]] += (s.values.empty() ? 1.0f : s.values[j]) * dlogits_[i];
        }
      }
    }
    return StepOutput{loss.loss_sum, batch.size, loss.correct};
  }

  Result<EvalOutput> Forward(const Batch& batch, const Params& params) override {
    PS_RETURN_IF_ERROR(ValidateBatch(batch, vocab_, 0, 1, false));
    PS_RETURN_IF_ERROR(ValidateParams(variables_, params));
    PS_RETURN_IF_ERROR(Logits(batch, params));
    EvalOutput out;
    out.examples = batch.size;
    out.outputs = 1;
    out.probabilities.resize(static_cast<size_t>(batch.size));
    LossOutput loss = SigmoidCrossEntropy(logits_, batch.labels, batch.size, {}, out.probabilities);
    out.has_labels = !batch.labels.empty();
    out.loss_sum = loss.loss_sum;
    out.correct = loss.correct;
    return out;
  }

 private:
  Status Logits(const Batch& batch, const Params& params) {
    const float bias = params.values[1][0];
    logits_.assign(static_cast<size_t>(batch.size), bias);
    std::span<const float> w = params.values[0];
    for (size_t f = 0; f < batch.sparse.size(); ++f) {
      const SparseField& s = batch.sparse[f];
      PS_RETURN_IF_ERROR(MapIds(s, params.rows[0], variables_[0].name, &local_[f]));
      for (int64_t i = 0; i < batch.size; ++i) {
        float z = 0;
        for (int64_t j = s.offsets[i]; j < s.offsets[i + 1]; ++j) {
          z += (s.values.empty() ? 1.0f : s.values[j]) * w[local_[f][j]];
        }
        logits_[i] += z;
      }
    }
    return Status::Ok();
  }

  LogisticRegressionSpec spec_;
  std::vector<int64_t> vocab_;       // [fields], all num_features
  std::vector<size_t> all_fields_;   // 0..fields-1
  std::vector<std::vector<int64_t>> local_;
  std::vector<float> logits_;        // [size]
  std::vector<float> dlogits_;       // [size]
};

}  // namespace

std::unique_ptr<Model> MakeEmbeddingMlp(EmbeddingMlpSpec spec) {
  return std::make_unique<EmbeddingMlp>(std::move(spec));
}

std::unique_ptr<Model> MakeLogisticRegression(LogisticRegressionSpec spec) {
  return std::make_unique<LogisticRegression>(spec);
}

}  // namespace ps::model
