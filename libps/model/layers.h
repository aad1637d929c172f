// Building blocks of the models: a dense layer, embedding-bag pooling and the two
// output losses. Shapes are row-major, batch first. Each object keeps its scratch
// buffers between calls and is not thread-safe (one per model instance).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "libps/model/batch.h"

namespace ps::model {

enum class Activation { kLinear, kRelu, kTanh, kSigmoid, kGelu };
const char* ActivationName(Activation a);
// Parses an activation name ("linear", "relu", "tanh", "sigmoid", "gelu"); false if unknown.
bool ParseActivation(std::string_view name, Activation* out);
// True when the derivative needs the pre-activation input (gelu), not only the output.
inline bool ActivationNeedsInput(Activation a) { return a == Activation::kGelu; }

// y[i] = act(z[i]) for n elements; y may alias z. gelu is the exact erf form (Keras'
// default): z * Φ(z).
void ApplyActivation(Activation act, const float* z, float* y, int64_t n);
// d[i] *= act'(z[i]), computed from the output y (and the input z for gelu; z may be
// null otherwise). Turns d(loss)/dy into d(loss)/dz in place.
void ActivationBackward(Activation act, const float* z, const float* y, float* d, int64_t n);

// y = act(x · W + b) with x [batch, in], W [in, out], b [out], y [batch, out].
class DenseLayer {
 public:
  DenseLayer(int64_t in, int64_t out, Activation act) : in_(in), out_(out), act_(act) {}

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  Activation activation() const { return act_; }

  // x: [batch * in]. Returns y [batch * out], owned by the layer and valid until the
  // next Forward.
  std::span<const float> Forward(std::span<const float> x, int64_t batch, std::span<const float> w,
                                 std::span<const float> b);
  std::span<const float> output() const { return {y_.data(), static_cast<size_t>(batch_ * out_)}; }

  // After Forward with the same x and w. dy [batch * out] is d(loss)/dy on entry and is
  // overwritten with d(loss)/d(pre-activation). Writes dw [in * out] and db [out]; writes
  // dx [batch * in] unless dx is empty (adds to it when accumulate_dx).
  void Backward(std::span<const float> x, std::span<float> dy, std::span<const float> w,
                std::span<float> dw, std::span<float> db, std::span<float> dx,
                bool accumulate_dx = false) const;

 private:
  int64_t in_;
  int64_t out_;
  Activation act_;
  int64_t batch_ = 0;
  std::vector<float> y_;
  std::vector<float> z_;  // [batch * out] pre-activation, kept only for gelu
};

enum class Combiner { kSum, kMean, kSqrtN };
const char* CombinerName(Combiner c);

// Embedding-bag pooling of one sparse field over a table given as local rows.
//   local: [field.ids.size()] index into the table's rows for each id
//   table: [n_rows * dim]
//   out:   example i's pooled vector is written to out[i * stride, i * stride + dim)
// With weights w_j (field.values, or 1): sum = Σ w_j e_j; mean = Σ w_j e_j / Σ w_j;
// sqrtn = Σ w_j e_j / sqrt(Σ w_j²). An empty example or a zero divisor gives zeros.
// The field's CSR must be valid (offsets[0] == 0, non-decreasing, back() == ids.size()).
// weighted = false ignores field.values (every w_j = 1).
void EmbeddingBagForward(const SparseField& field, std::span<const int64_t> local,
                         std::span<const float> table, int64_t dim, Combiner combiner, float* out,
                         int64_t stride, bool weighted = true);

// Accumulates (+=) the gradient of the pooled output into dtable [n_rows * dim]:
// dtable[local_j] += (w_j / divisor_i) * dout[i * stride, +dim). Duplicate ids add up.
void EmbeddingBagBackward(const SparseField& field, std::span<const int64_t> local, int64_t dim,
                          Combiner combiner, const float* dout, int64_t stride,
                          std::span<float> dtable, bool weighted = true);

// 1 / divisor of the combiner for one example (1 for sum; 0 when the divisor is 0).
float CombinerScale(const SparseField& field, int64_t example, Combiner combiner,
                    bool weighted = true);
bool ParseCombiner(std::string_view name, Combiner* out);

struct LossOutput {
  double loss_sum = 0;
  int64_t correct = 0;
};

// Softmax cross-entropy over logits [batch * classes] with labels [batch] holding class
// indices (validated by the caller). Stable: log-sum-exp with the row max subtracted.
// If dlogits is non-empty writes d(mean loss)/d(logits) = (softmax - onehot) / batch.
// If probs is non-empty writes softmax [batch * classes]. labels may be empty (no loss,
// no correct count; dlogits must then be empty).
LossOutput SoftmaxCrossEntropy(std::span<const float> logits, std::span<const float> labels,
                               int64_t batch, int64_t classes, std::span<float> dlogits,
                               std::span<float> probs);

// Sigmoid (binary) cross-entropy over logits [batch] with labels in [0, 1], in the
// logits form max(z, 0) - z*y + log1p(exp(-|z|)). dlogits = (sigmoid(z) - y) / batch;
// probs = sigmoid(z). Same conventions as above.
LossOutput SigmoidCrossEntropy(std::span<const float> logits, std::span<const float> labels,
                               int64_t batch, std::span<float> dlogits, std::span<float> probs);

// Squared error over predictions [batch] and labels [batch]: loss (p - y)^2 per example,
// dpred = 2 (p - y) / batch; probs (if non-empty) receives the predictions. correct stays 0.
LossOutput MeanSquaredError(std::span<const float> pred, std::span<const float> labels,
                            int64_t batch, std::span<float> dpred, std::span<float> probs);

// Numerically stable sigmoid.
inline float Sigmoid(float z) {
  if (z >= 0) return 1.0f / (1.0f + std::exp(-z));
  float e = std::exp(z);
  return e / (1.0f + e);
}

}  // namespace ps::model
