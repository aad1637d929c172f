#include "libps/model/layers.h"

#include <algorithm>
#include <cmath>

#include "libps/core/status.h"
#include "libps/model/blas.h"

namespace ps::model {

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kLinear:
      return "linear";
    case Activation::kRelu:
      return "relu";
    case Activation::kTanh:
      return "tanh";
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kGelu:
      return "gelu";
  }
  return "unknown";
}

bool ParseActivation(std::string_view name, Activation* out) {
  for (Activation a : {Activation::kLinear, Activation::kRelu, Activation::kTanh,
                       Activation::kSigmoid, Activation::kGelu}) {
    if (name == ActivationName(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

bool ParseCombiner(std::string_view name, Combiner* out) {
  for (Combiner c : {Combiner::kMean, Combiner::kSum, Combiner::kSqrtN}) {
    if (name == CombinerName(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

void ApplyActivation(Activation act, const float* z, float* y, int64_t n) {
  switch (act) {
    case Activation::kLinear:
      if (y != z) std::copy(z, z + n, y);
      break;
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = z[i] > 0.0f ? z[i] : 0.0f;
      break;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(z[i]);
      break;
    case Activation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = Sigmoid(z[i]);
      break;
    case Activation::kGelu:
      for (int64_t i = 0; i < n; ++i) {
        y[i] = static_cast<float>(0.5 * z[i] * (1.0 + std::erf(z[i] * 0.7071067811865476)));
      }
      break;
  }
}

void ActivationBackward(Activation act, const float* z, const float* y, float* d, int64_t n) {
  switch (act) {
    case Activation::kLinear:
      break;
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) d[i] = y[i] > 0.0f ? d[i] : 0.0f;
      break;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) d[i] *= 1.0f - y[i] * y[i];
      break;
    case Activation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) d[i] *= y[i] * (1.0f - y[i]);
      break;
    case Activation::kGelu:
      // d/dz z Φ(z) = Φ(z) + z φ(z)
      for (int64_t i = 0; i < n; ++i) {
        const double x = z[i];
        const double cdf = 0.5 * (1.0 + std::erf(x * 0.7071067811865476));
        const double pdf = 0.3989422804014327 * std::exp(-0.5 * x * x);
        d[i] = static_cast<float>(d[i] * (cdf + x * pdf));
      }
      break;
  }
}

const char* CombinerName(Combiner c) {
  switch (c) {
    case Combiner::kSum:
      return "sum";
    case Combiner::kMean:
      return "mean";
    case Combiner::kSqrtN:
      return "sqrtn";
  }
  return "unknown";
}

std::span<const float> DenseLayer::Forward(std::span<const float> x, int64_t batch,
                                           std::span<const float> w, std::span<const float> b) {
  PS_ASSERT(static_cast<int64_t>(x.size()) >= batch * in_);
  PS_ASSERT(static_cast<int64_t>(w.size()) == in_ * out_ && static_cast<int64_t>(b.size()) == out_);
  batch_ = batch;
  y_.resize(static_cast<size_t>(batch * out_));
  float* y = y_.data();
  for (int64_t i = 0; i < batch; ++i) std::copy(b.begin(), b.end(), y + i * out_);
  Gemm(Trans::kNo, Trans::kNo, batch, out_, in_, 1.0f, x.data(), in_, w.data(), out_, 1.0f, y,
       out_);
  const int64_t n = batch * out_;
  if (ActivationNeedsInput(act_)) z_.assign(y, y + n);
  ApplyActivation(act_, y, y, n);
  return output();
}

void DenseLayer::Backward(std::span<const float> x, std::span<float> dy, std::span<const float> w,
                          std::span<float> dw, std::span<float> db, std::span<float> dx,
                          bool accumulate_dx) const {
  const int64_t n = batch_ * out_;
  PS_ASSERT(static_cast<int64_t>(dy.size()) >= n);
  PS_ASSERT(static_cast<int64_t>(dw.size()) == in_ * out_ &&
            static_cast<int64_t>(db.size()) == out_);
  const float* y = y_.data();
  float* d = dy.data();
  ActivationBackward(act_, z_.data(), y, d, n);
  // dW [in, out] = x^T [in, batch] · dz [batch, out]
  Gemm(Trans::kYes, Trans::kNo, in_, out_, batch_, 1.0f, x.data(), in_, d, out_, 0.0f, dw.data(),
       out_);
  // db [out] = column sums of dz
  std::fill(db.begin(), db.end(), 0.0f);
  for (int64_t i = 0; i < batch_; ++i) {
    const float* row = d + i * out_;
    for (int64_t j = 0; j < out_; ++j) db[j] += row[j];
  }
  if (!dx.empty()) {
    PS_ASSERT(static_cast<int64_t>(dx.size()) >= batch_ * in_);
    // dx [batch, in] = dz [batch, out] · W^T [out, in]
    Gemm(Trans::kNo, Trans::kYes, batch_, in_, out_, 1.0f, d, out_, w.data(), out_,
         accumulate_dx ? 1.0f : 0.0f, dx.data(), in_);
  }
}

float CombinerScale(const SparseField& field, int64_t example, Combiner combiner, bool weighted) {
  if (combiner == Combiner::kSum) return 1.0f;
  const int64_t begin = field.offsets[example];
  const int64_t end = field.offsets[example + 1];
  double divisor = 0;
  if (field.values.empty() || !weighted) {
    divisor = combiner == Combiner::kMean ? static_cast<double>(end - begin)
                                          : std::sqrt(static_cast<double>(end - begin));
  } else if (combiner == Combiner::kMean) {
    for (int64_t j = begin; j < end; ++j) divisor += field.values[j];
  } else {
    for (int64_t j = begin; j < end; ++j) divisor += double{field.values[j]} * field.values[j];
    divisor = std::sqrt(divisor);
  }
  return divisor == 0 ? 0.0f : static_cast<float>(1.0 / divisor);
}

void EmbeddingBagForward(const SparseField& field, std::span<const int64_t> local,
                         std::span<const float> table, int64_t dim, Combiner combiner, float* out,
                         int64_t stride, bool use_values) {
  const int64_t size = static_cast<int64_t>(field.offsets.size()) - 1;
  const bool weighted = use_values && !field.values.empty();
  const float* t = table.data();
  for (int64_t i = 0; i < size; ++i) {
    float* o = out + i * stride;
    std::fill(o, o + dim, 0.0f);
    const float scale = CombinerScale(field, i, combiner, weighted);
    if (scale == 0.0f) continue;
    for (int64_t j = field.offsets[i]; j < field.offsets[i + 1]; ++j) {
      const float a = scale * (weighted ? field.values[j] : 1.0f);
      const float* e = t + local[j] * dim;
      for (int64_t k = 0; k < dim; ++k) o[k] += a * e[k];
    }
  }
}

void EmbeddingBagBackward(const SparseField& field, std::span<const int64_t> local, int64_t dim,
                          Combiner combiner, const float* dout, int64_t stride,
                          std::span<float> dtable, bool use_values) {
  const int64_t size = static_cast<int64_t>(field.offsets.size()) - 1;
  const bool weighted = use_values && !field.values.empty();
  float* dt = dtable.data();
  for (int64_t i = 0; i < size; ++i) {
    const float scale = CombinerScale(field, i, combiner, weighted);
    if (scale == 0.0f) continue;
    const float* g = dout + i * stride;
    for (int64_t j = field.offsets[i]; j < field.offsets[i + 1]; ++j) {
      const float a = scale * (weighted ? field.values[j] : 1.0f);
      float* d = dt + local[j] * dim;
      for (int64_t k = 0; k < dim; ++k) d[k] += a * g[k];
    }
  }
}

LossOutput SoftmaxCrossEntropy(std::span<const float> logits, std::span<const float> labels,
                               int64_t batch, int64_t classes, std::span<float> dlogits,
                               std::span<float> probs) {
  LossOutput r;
  const bool has_labels = !labels.empty();
  const double inv_batch = batch > 0 ? 1.0 / static_cast<double>(batch) : 0.0;
  for (int64_t i = 0; i < batch; ++i) {
    const float* z = logits.data() + i * classes;
    int64_t argmax = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (z[c] > z[argmax]) argmax = c;
    }
    const double m = z[argmax];
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(double{z[c]} - m);
    const double lse = m + std::log(sum);
    if (!probs.empty()) {
      float* p = probs.data() + i * classes;
      for (int64_t c = 0; c < classes; ++c) p[c] = static_cast<float>(std::exp(double{z[c]} - lse));
    }
    if (!has_labels) continue;
    const auto y = static_cast<int64_t>(labels[i]);
    r.loss_sum += lse - z[y];
    if (argmax == y) ++r.correct;
    if (!dlogits.empty()) {
      float* d = dlogits.data() + i * classes;
      for (int64_t c = 0; c < classes; ++c) {
        double p = std::exp(double{z[c]} - lse) - (c == y ? 1.0 : 0.0);
        d[c] = static_cast<float>(p * inv_batch);
      }
    }
  }
  return r;
}

LossOutput SigmoidCrossEntropy(std::span<const float> logits, std::span<const float> labels,
                               int64_t batch, std::span<float> dlogits, std::span<float> probs) {
  LossOutput r;
  const bool has_labels = !labels.empty();
  const double inv_batch = batch > 0 ? 1.0 / static_cast<double>(batch) : 0.0;
  for (int64_t i = 0; i < batch; ++i) {
    const double z = logits[i];
    const double p = z >= 0 ? 1.0 / (1.0 + std::exp(-z)) : std::exp(z) / (1.0 + std::exp(z));
    if (!probs.empty()) probs[i] = static_cast<float>(p);
    if (!has_labels) continue;
    const double y = labels[i];
    r.loss_sum += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z)));
    if ((p >= 0.5) == (y >= 0.5)) ++r.correct;
    if (!dlogits.empty()) dlogits[i] = static_cast<float>((p - y) * inv_batch);
  }
  return r;
}

}  // namespace ps::model

namespace ps::model {

LossOutput MeanSquaredError(std::span<const float> pred, std::span<const float> labels,
                            int64_t batch, std::span<float> dpred, std::span<float> probs) {
  LossOutput r;
  const double inv_batch = batch > 0 ? 1.0 / static_cast<double>(batch) : 0.0;
  for (int64_t i = 0; i < batch; ++i) {
    if (!probs.empty()) probs[i] = pred[i];
    if (labels.empty()) continue;
    const double e = double{pred[i]} - labels[i];
    r.loss_sum += e * e;
    if (!dpred.empty()) dpred[i] = static_cast<float>(2.0 * e * inv_batch);
  }
  return r;
}

}  // namespace ps::model
