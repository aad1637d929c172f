// GraphModel: runs a GraphPlan's ops forward in topological order and backward in
// reverse, accumulating each node's output gradient from all of its consumers.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "libps/core/text.h"
#include "libps/model/graph.h"

namespace ps::model {
namespace {

std::string FieldPath(size_t f) { return "batch.sparse[" + std::to_string(f) + "]"; }

// Checks the batch's structure against what the model reads. bound[f]: ids of field f
// must lie in [0, bound[f]).
Status ValidateStructure(const Batch& b, std::span<const int64_t> bound, int64_t dense_dim) {
  if (b.size < 0)
    return InvalidArgument("batch.size: must not be negative, got " + std::to_string(b.size));
  if (b.dense_dim != dense_dim) {
    return InvalidArgument("batch.dense_dim: " + std::to_string(b.dense_dim) +
                           " does not match the model's " + std::to_string(dense_dim));
  }
  if (static_cast<int64_t>(b.dense.size()) != b.size * b.dense_dim) {
    return InvalidArgument(
        "batch.dense: has " + std::to_string(b.dense.size()) +
        " values, expected size * dense_dim = " + std::to_string(b.size * b.dense_dim));
  }
  if (b.sparse.size() != bound.size()) {
    return InvalidArgument("batch.sparse: has " + std::to_string(b.sparse.size()) +
                           " fields, the model reads " + std::to_string(bound.size()));
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
      return InvalidArgument(
          FieldPath(f) + ".values: has " + std::to_string(s.values.size()) +
          " entries, expected 0 or ids.size() = " + std::to_string(s.ids.size()));
    }
    for (size_t j = 0; j < s.ids.size(); ++j) {
      if (s.ids[j] < 0 || s.ids[j] >= bound[f]) {
        return InvalidArgument(
            FieldPath(f) + ".ids[" + std::to_string(j) + "]: " + std::to_string(s.ids[j]) +
            (s.ids[j] < 0 ? " is negative"
                          : " is outside the table's " + std::to_string(bound[f]) + " rows"));
      }
    }
  }
  return Status::Ok();
}

Status ValidateLabel(const HeadInfo& h, float y, const std::string& where) {
  bool ok = false;
  std::string want;
  switch (h.loss) {
    case LossKind::kSigmoidCrossEntropy:
      ok = y >= 0.0f && y <= 1.0f;
      want = " is not in [0, 1]";
      break;
    case LossKind::kSoftmaxCrossEntropy:
      ok = y >= 0.0f && y < static_cast<float>(h.outputs) && std::floor(y) == y;
      want = " is not a class index in [0, " + std::to_string(h.outputs) + ")";
      break;
    case LossKind::kMeanSquaredError:
      ok = std::isfinite(y);
      want = " is not finite";
      break;
  }
  return ok ? Status::Ok() : InvalidArgument(where + ": " + std::to_string(y) + want);
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
        if (rows[k] <= rows[k - 1])
          return InvalidArgument("params.rows[" + def.name + "]: must be sorted and unique");
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

class GraphModel final : public Model {
 public:
  explicit GraphModel(GraphPlan plan) : plan_(std::move(plan)) {
    variables_ = plan_.variables;
    for (const GraphHead& h : plan_.heads) heads_.push_back(h.info);
    outputs_ = heads_.front().outputs;
    bound_.assign(static_cast<size_t>(plan_.num_fields), std::numeric_limits<int64_t>::max());
    for (const GraphNode& n : plan_.nodes) {
      if (n.op) n.op->LimitIds(&bound_);
    }
    values_.resize(plan_.nodes.size());
    buffers_.resize(plan_.nodes.size());
    grads_.resize(plan_.nodes.size());
  }

  Status RowsNeeded(const Batch& batch, std::vector<std::vector<int64_t>>* rows) override {
    PS_RETURN_IF_ERROR(ValidateStructure(batch, bound_, plan_.dense_dim));
    rows->resize(variables_.size());
    for (auto& r : *rows) r.clear();
    for (const GraphNode& n : plan_.nodes) {
      if (n.op) n.op->CollectRows(batch, rows);
    }
    for (size_t v = 0; v < variables_.size(); ++v) {
      std::vector<int64_t>& r = (*rows)[v];
      std::sort(r.begin(), r.end());
      r.erase(std::unique(r.begin(), r.end()), r.end());
    }
    return Status::Ok();
  }

  Result<StepOutput> ForwardBackward(const Batch& batch, const Params& params,
                                     Grads* grads) override {
    PS_RETURN_IF_ERROR(ValidateStructure(batch, bound_, plan_.dense_dim));
    PS_RETURN_IF_ERROR(ValidateLabels(batch, true));
    if (batch.size == 0) return InvalidArgument("batch.size: must be > 0 for a training step");
    PS_RETURN_IF_ERROR(ValidateParams(variables_, params));
    OpContext ctx{&batch, &params, grads, batch.size, true, steps_++};
    PS_RETURN_IF_ERROR(RunForward(ctx));

    grads->values.resize(variables_.size());
    for (size_t v = 0; v < variables_.size(); ++v) {
      // Dense gradients are overwritten whole by their op; sparse ones are accumulated.
      grads->values[v].resize(params.values[v].size());
      if (variables_[v].sparse) std::fill(grads->values[v].begin(), grads->values[v].end(), 0.0f);
    }
    for (size_t i = 0; i < plan_.nodes.size(); ++i) {
      if (plan_.nodes[i].needs_grad)
        grads_[i].assign(static_cast<size_t>(batch.size * plan_.nodes[i].size), 0.0f);
    }
    StepOutput out{0, batch.size, 0};
    for (size_t h = 0; h < plan_.heads.size(); ++h) {
      const GraphHead& head = plan_.heads[h];
      std::vector<float>& d = head_grad_;
      d.resize(static_cast<size_t>(batch.size * head.info.outputs));
      LossOutput loss = ApplyLoss(head, batch, d, {});
      out.loss_sum += head.info.weight * loss.loss_sum;
      if (h == 0) out.correct = loss.correct;
      if (!plan_.nodes[static_cast<size_t>(head.node)].needs_grad)
        continue;  // nothing to train below it
      std::vector<float>& g = grads_[static_cast<size_t>(head.node)];
      const float w = static_cast<float>(head.info.weight);
      for (size_t i = 0; i < d.size(); ++i) g[i] += w * d[i];
    }
    for (size_t i = plan_.nodes.size(); i-- > 0;) {
      GraphNode& n = plan_.nodes[i];
      if (!n.op || !n.needs_grad) continue;
      ins_.clear();
      dins_.clear();
      for (int in : n.inputs) {
        ins_.push_back(values_[in]);
        dins_.push_back(plan_.nodes[in].needs_grad ? std::span<float>(grads_[in])
                                                   : std::span<float>());
      }
      n.op->Backward(ctx, ins_, grads_[i], dins_);
    }
    return out;
  }

  Result<EvalOutput> Forward(const Batch& batch, const Params& params) override {
    PS_RETURN_IF_ERROR(ValidateStructure(batch, bound_, plan_.dense_dim));
    PS_RETURN_IF_ERROR(ValidateLabels(batch, false));
    PS_RETURN_IF_ERROR(ValidateParams(variables_, params));
    EvalOutput out;
    out.examples = batch.size;
    out.outputs = outputs_;
    out.has_labels = !batch.labels.empty() || !UsesBatchLabels();
    out.heads.resize(plan_.heads.size());
    for (size_t h = 0; h < plan_.heads.size(); ++h) {
      out.heads[h].predictions.resize(
          static_cast<size_t>(batch.size * plan_.heads[h].info.outputs));
    }
    if (batch.size > 0) {
      OpContext ctx{&batch, &params, nullptr, batch.size, false, steps_};
      PS_RETURN_IF_ERROR(RunForward(ctx));
      for (size_t h = 0; h < plan_.heads.size(); ++h) {
        HeadEval& e = out.heads[h];
        LossOutput loss = ApplyLoss(plan_.heads[h], batch, {}, e.predictions);
        e.loss_sum = loss.loss_sum;
        e.correct = loss.correct;
        if (out.has_labels) {
          std::span<const float> labels = Labels(plan_.heads[h], batch);
          e.labels.assign(labels.begin(), labels.end());
        }
        out.loss_sum += plan_.heads[h].info.weight * loss.loss_sum;
      }
      out.correct = out.heads[0].correct;
    }
    out.probabilities = out.heads[0].predictions;
    return out;
  }

 private:
  bool UsesBatchLabels() const {
    return std::any_of(plan_.heads.begin(), plan_.heads.end(),
                       [](const GraphHead& h) { return h.label_column < 0; });
  }

  // Labels of a head: batch.labels, or a column of batch.dense gathered into scratch.
  std::span<const float> Labels(const GraphHead& h, const Batch& b) {
    if (h.label_column < 0) return b.labels;
    std::vector<float>& col = label_columns_[h.info.name];
    col.resize(static_cast<size_t>(b.size));
    for (int64_t i = 0; i < b.size; ++i) col[i] = b.dense[i * b.dense_dim + h.label_column];
    return col;
  }

  Status ValidateLabels(const Batch& b, bool require) {
    if (b.labels.empty() && !require) {
      if (!UsesBatchLabels()) return CheckLabelColumns(b);
      return Status::Ok();
    }
    if (UsesBatchLabels() && static_cast<int64_t>(b.labels.size()) != b.size) {
      return InvalidArgument("batch.labels: has " + std::to_string(b.labels.size()) +
                             " entries, expected size = " + std::to_string(b.size));
    }
    for (const GraphHead& h : plan_.heads) {
      if (h.label_column >= 0) continue;
      for (int64_t i = 0; i < b.size; ++i) {
        PS_RETURN_IF_ERROR(
            ValidateLabel(h.info, b.labels[i], "batch.labels[" + std::to_string(i) + "]"));
      }
    }
    return CheckLabelColumns(b);
  }

  Status CheckLabelColumns(const Batch& b) {
    for (const GraphHead& h : plan_.heads) {
      if (h.label_column < 0) continue;
      for (int64_t i = 0; i < b.size; ++i) {
        PS_RETURN_IF_ERROR(ValidateLabel(h.info, b.dense[i * b.dense_dim + h.label_column],
                                         "batch.dense[" + std::to_string(i) + "][" +
                                             std::to_string(h.label_column) + "] (label of head " +
                                             QuoteInput(h.info.name, '"') + ")"));
      }
    }
    return Status::Ok();
  }

  LossOutput ApplyLoss(const GraphHead& h, const Batch& b, std::span<float> dlogits,
                       std::span<float> probs) {
    std::span<const float> logits = values_[static_cast<size_t>(h.node)];
    std::span<const float> labels;
    if (h.label_column >= 0 || !b.labels.empty()) labels = Labels(h, b);
    switch (h.info.loss) {
      case LossKind::kSoftmaxCrossEntropy:
        return SoftmaxCrossEntropy(logits, labels, b.size, h.info.outputs, dlogits, probs);
      case LossKind::kSigmoidCrossEntropy:
        return SigmoidCrossEntropy(logits, labels, b.size, dlogits, probs);
      case LossKind::kMeanSquaredError:
        return MeanSquaredError(logits, labels, b.size, dlogits, probs);
    }
    return {};
  }

  Status RunForward(const OpContext& ctx) {
    const Batch& b = *ctx.batch;
    for (size_t i = 0; i < plan_.nodes.size(); ++i) {
      GraphNode& n = plan_.nodes[i];
      if (n.op) {
        ins_.clear();
        for (int in : n.inputs) ins_.push_back(values_[in]);
        PS_ASSIGN_OR_RETURN(values_[i], n.op->Forward(ctx, ins_));
      } else if (n.sparse) {
        values_[i] = {};
      } else if (n.dense_offset == 0 && n.size == b.dense_dim) {
        values_[i] = b.dense;
      } else {
        std::vector<float>& buf = buffers_[i];
        buf.resize(static_cast<size_t>(b.size * n.size));
        for (int64_t e = 0; e < b.size; ++e) {
          std::copy_n(b.dense.data() + e * b.dense_dim + n.dense_offset, n.size,
                      buf.data() + e * n.size);
        }
        values_[i] = buf;
      }
    }
    return Status::Ok();
  }

  GraphPlan plan_;
  std::vector<int64_t> bound_;  // [num_fields] exclusive id bound per field
  uint64_t steps_ = 0;          // training passes so far (dropout masks)
  // Per node, reused across calls.
  std::vector<std::span<const float>> values_;  // outputs of the current pass
  std::vector<std::vector<float>> buffers_;     // dense inputs copied out of batch.dense
  std::vector<std::vector<float>> grads_;       // d(loss)/d(output), accumulated
  std::vector<float> head_grad_;
  std::map<std::string, std::vector<float>> label_columns_;
  std::vector<std::span<const float>> ins_;
  std::vector<std::span<float>> dins_;
};

}  // namespace

std::unique_ptr<Model> MakeGraphModel(GraphPlan plan) {
  return std::make_unique<GraphModel>(std::move(plan));
}

}  // namespace ps::model
