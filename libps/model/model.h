// ps::model::Model: the math a worker runs between pull and push. A model owns no
// parameters — the ps holds them. Per step the worker:
//   1. model.RowsNeeded(batch, &rows)      the embedding rows the batch touches
//   2. pulls every dense variable whole and rows[v] of every sparse variable v,
//      straight into buffers that Params points at
//   3. model.ForwardBackward(batch, params, &grads)
//   4. pushes grads (same layout as params)
//
// Thread-safety: a Model keeps scratch buffers between calls (no allocation in the
// steady state). One instance per thread; instances share nothing.
//
// ---------------------------------------------------------------------------------
// Model config (the "model" object of a job file), read strictly by BuildModel:
// unknown keys and out-of-range values are errors naming the key.
//
// {"type": "graph", "inputs": [...], "layers": [...], "outputs": [...]}  any model as
//   a layer graph (graph.h; docs/reference/job.md documents every key). The three types
//   below are shorthands that BuildModel writes as graphs and builds the same way.
//
// Output rule, all types: "classes": 1 means binary — one logit, sigmoid
// cross-entropy, labels 0/1 (any value in [0, 1] is accepted as a soft label);
// "classes" >= 2 means softmax cross-entropy over that many logits, labels are class
// indices 0..classes-1 stored as floats. A prediction is correct when the argmax
// logit (first on ties) equals the label, or for binary when (p >= 0.5) == (label >= 0.5).
// Loss is the mean over the batch's examples; StepOutput::loss_sum is its sum.
//
// {"type": "mlp", ...}  a multilayer perceptron over the batch's dense features.
//   input_dim   int > 0, required      batch.dense_dim must equal it; batch has no
//                                      sparse fields
//   hidden      [int > 0], default []  hidden layer widths
//   activation  "relu" (default) | "tanh" | "sigmoid" | "linear"   for hidden layers
//   classes     int >= 1, required     see the output rule
//
// {"type": "embedding_mlp", ...}  pooled embeddings of sparse fields (+ dense
//   features) -> MLP -> output. With "hidden": [] and "classes": 1 this is TF's
//   parameter-server tutorial model (embedding mean -> Dense(1, sigmoid)).
//   fields      [field], required (may be [] only if dense_dim > 0); field i reads
//               batch.sparse[i]
//     field.table     string, default "embedding_<i>"  fields naming the same table
//                     share it; the table's variable is "<table>/embeddings"
//     field.vocab     int > 0      rows of the table; required for the first field of
//                     a table, and must match it when repeated
//     field.dim       int > 0      embedding width; same rule as vocab
//     field.combiner  "mean" (default) | "sum" | "sqrtn"   pooling of one example's
//                     ids: with weights w_j (SparseField::values, or 1) and rows e_j,
//                     sum = Σ w_j e_j, mean = Σ w_j e_j / Σ w_j,
//                     sqrtn = Σ w_j e_j / sqrt(Σ w_j²). An example without ids (or
//                     with a zero divisor) pools to zeros. TF's combiner semantics.
//     field.init      initializer JSON (initializer.h), default
//                     {"type": "uniform", "minval": -0.05, "maxval": 0.05} (Keras
//                     Embedding); only on the first field of a table
//     field.lazy      bool, default false; only on the first field of a table. The ps
//                     creates a row on its first push instead of allocating the table
//                     up front (a hashed id space: vocab up to 2^40). A row never pushed
//                     pulls as its initial value, so training is bit-identical to a
//                     non-lazy table; checkpoints hold only created rows.
//     field.admit, field.evict   row admission and eviction of a lazy table
//                     (row_policy.h); only on the first field of a table
//   dense_dim   int >= 0, default 0    dense features appended after the pooled
//                                      embeddings; batch.dense_dim must equal it
//   hidden, activation, classes        as for mlp
//
// {"type": "logistic_regression", ...}  logit = bias + Σ_fields Σ_j w_j * W[id_j]
//   (sum combiner, all fields index one table: a hashed feature space).
//   num_features  int > 0, required    rows of the weight table
//   num_fields    int >= 1, default 1  batch.sparse.size() must equal it
//   lazy          bool, default false  the weight table's rows are created on first
//                                      push, as field.lazy above
//   admit, evict                       of the lazy weight table, as field.admit above
//   Binary only (sigmoid cross-entropy); labels 0/1.
//
// Limits: widths (input_dim, hidden[i], dense_dim, classes) <= 16777216,
// dim <= 65536, vocab and num_features <= 2^40.
//
// Variables, in order (shape; init; sparse?; lazy when the config says so):
//   embedding_mlp: "<table>/embeddings" [vocab, dim], field.init, sparse — one per
//                  table in order of first use; then the dense layers below
//   mlp / embedding_mlp: "dense_<l>/kernel" [in, out] glorot_uniform,
//                  "dense_<l>/bias" [out] zeros, for l = 0..hidden.size(); the last
//                  layer is the output layer (out = classes, linear: logits)
//   logistic_regression: "linear/weights" [num_features, 1] zeros, sparse;
//                  "linear/bias" [1] zeros
// ---------------------------------------------------------------------------------
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/model/batch.h"
#include "libps/model/initializer.h"
#include "libps/model/row_policy.h"

namespace ps::model {

struct VariableDef {
  std::string name;            // unique within the model, e.g. "dense_0/kernel"
  std::vector<int64_t> shape;  // row-major; sparse variables are [rows, row_dim...]
  InitSpec init;
  bool sparse = false;  // pulled/pushed by rows (axis 0) instead of whole
  // Sparse only: the ps creates rows on first push (cluster::ShardLayout::lazy); nothing is
  // allocated up front, so shape[0] may be a hashed id space up to 2^40.
  bool lazy = false;
  // Lazy only: admission and eviction of its rows (row_policy.h); default: neither.
  RowPolicy rows = {};

  int64_t num_elements() const;
  // Elements of one row along axis 0 (prod(shape[1..])); 1 for rank <= 1.
  int64_t row_elements() const;
};

// Parameter values for one step, indexed like Model::variables(). The spans borrow the
// worker's pull buffers; they must stay valid for the call.
struct Params {
  // Dense variable v: [num_elements]. Sparse variable v: [rows[v].size() * row_elements],
  // row k holding the values of row rows[v][k].
  std::vector<std::span<const float>> values;
  // Sparse variable v: the row ids of values[v] — exactly what RowsNeeded returned
  // (sorted, unique). Dense variables: empty. May be shorter than values when the
  // model has no sparse variable after some index.
  std::vector<std::span<const int64_t>> rows;
};

// Gradients of the MEAN loss over the batch, same layout as Params: dense variable v
// [num_elements]; sparse variable v [rows[v].size() * row_elements], one row per needed
// row, already summed over every occurrence in the batch. ForwardBackward resizes and
// overwrites every entry; keep one Grads per worker thread to reuse its memory.
struct Grads {
  std::vector<std::vector<float>> values;
};

struct StepOutput {
  // Per-example loss summed over the batch; with several heads the weighted sum
  // Σ_h weight_h * loss_h (the objective whose mean is differentiated).
  double loss_sum = 0;
  int64_t examples = 0;
  int64_t correct = 0;  // see the output rule above; the first head's
};

enum class LossKind { kSoftmaxCrossEntropy, kSigmoidCrossEntropy, kMeanSquaredError };
const char* LossKindName(LossKind k);  // "softmax_cross_entropy", ...

// One output of a model with its loss (a "head"). outputs: classes for softmax, else 1.
struct HeadInfo {
  std::string name;
  LossKind loss = LossKind::kSigmoidCrossEntropy;
  int64_t outputs = 1;
  double weight = 1.0;  // loss weight
};

// A head's part of Forward's result.
struct HeadEval {
  double loss_sum = 0;  // unweighted; 0 without labels
  int64_t correct = 0;  // 0 for mean squared error
  // [examples * outputs]: softmax / sigmoid probabilities, or the regression output.
  std::vector<float> predictions;
  std::vector<float> labels;  // [examples] when labelled, else empty
};

struct EvalOutput {
  int64_t examples = 0;
  // Scores per example: 1 for binary models (P(label = 1)), classes for softmax models.
  int64_t outputs = 0;
  std::vector<float> probabilities;  // [examples * outputs], row-major
  // Only when the batch has labels (labels.size() == size); otherwise 0.
  bool has_labels = false;
  double loss_sum = 0;  // as StepOutput::loss_sum
  int64_t correct = 0;
  std::vector<HeadEval> heads;  // [model.heads().size()]; heads[0].predictions == probabilities
};

class Model {
 public:
  virtual ~Model() = default;

  const std::vector<VariableDef>& variables() const { return variables_; }
  // The first head's outputs: 1 for binary (and regression) models, else the number of
  // classes.
  int64_t outputs() const { return outputs_; }
  const std::vector<HeadInfo>& heads() const { return heads_; }

  // For each sparse variable, the sorted unique row ids the batch touches; dense
  // variables get an empty vector. rows_per_var is resized to variables().size() and
  // its vectors reused. Errors (InvalidArgument) for a batch that does not fit the
  // model: wrong field count, malformed CSR, ids outside the table, wrong dense_dim.
  virtual Status RowsNeeded(const Batch& batch,
                            std::vector<std::vector<int64_t>>* rows_per_var) = 0;

  // Loss over the batch and gradients of the mean loss. The batch must hold labels
  // and at least one example.
  virtual Result<StepOutput> ForwardBackward(const Batch& batch, const Params& params,
                                             Grads* grads) = 0;

  // Probabilities (and loss/correct when the batch has labels) without gradients.
  virtual Result<EvalOutput> Forward(const Batch& batch, const Params& params) = 0;

 protected:
  Model() = default;
  std::vector<VariableDef> variables_;
  int64_t outputs_ = 1;
  std::vector<HeadInfo> heads_;
};

// Builds a model from its config; `path` names the config in errors ("job.model").
Result<std::unique_ptr<Model>> BuildModel(const Json& config, std::string path);

}  // namespace ps::model
