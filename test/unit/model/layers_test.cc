#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "libps/model/layers.h"
#include "test/unit/model/grad_check.h"

using namespace ps::model;

namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The toy scalar loss sum(r ⊙ y) of a dense layer, in double.
double DenseObjective(DenseLayer& layer, const std::vector<float>& x, int64_t batch,
                      const std::vector<float>& w, const std::vector<float>& b,
                      const std::vector<float>& r) {
  auto y = layer.Forward(x, batch, w, b);
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += double{r[i]} * y[i];
  return s;
}

// Numerical derivative of DenseObjective with respect to one entry of `param`.
double Numeric(DenseLayer& layer, std::vector<float>& param, size_t i, const std::vector<float>& x,
               int64_t batch, const std::vector<float>& w, const std::vector<float>& b,
               const std::vector<float>& r, double eps) {
  const float saved = param[i];
  param[i] = static_cast<float>(saved + eps);
  const double hi = static_cast<double>(param[i]);
  double up = DenseObjective(layer, x, batch, w, b, r);
  param[i] = static_cast<float>(saved - eps);
  const double lo = static_cast<double>(param[i]);
  double down = DenseObjective(layer, x, batch, w, b, r);
  param[i] = saved;
  return (up - down) / (hi - lo);
}

}  // namespace

TEST_CASE("DenseLayer gradients match central differences for every activation") {
  for (Activation act :
       {Activation::kLinear, Activation::kRelu, Activation::kTanh, Activation::kSigmoid}) {
    INFO("activation " << ActivationName(act));
    std::mt19937 rng(7);
    const int64_t batch = 3, in = 4, out = 5;
    auto x = Random(batch * in, rng);
    auto w = Random(in * out, rng);
    auto b = Random(out, rng);
    auto r = Random(batch * out, rng);
    DenseLayer layer(in, out, act);
    layer.Forward(x, batch, w, b);
    std::vector<float> dy = r;
    std::vector<float> dw(in * out), db(out), dx(batch * in);
    layer.Backward(x, dy, w, dw, db, dx);
    const double eps = 1e-3, atol = 2e-4, rtol = 1e-2;
    int nonzero = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      double n = Numeric(layer, w, i, x, batch, w, b, r, eps);
      INFO("dw[" << i << "]");
      CHECK(model_test::Close(dw[i], n, atol, rtol));
      nonzero += std::fabs(dw[i]) > 1e-4;
    }
    for (size_t i = 0; i < b.size(); ++i) {
      INFO("db[" << i << "]");
      CHECK(model_test::Close(db[i], Numeric(layer, b, i, x, batch, w, b, r, eps), atol, rtol));
    }
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("dx[" << i << "]");
      CHECK(model_test::Close(dx[i], Numeric(layer, x, i, x, batch, w, b, r, eps), atol, rtol));
    }
    CHECK(nonzero > 0);
  }
}

TEST_CASE("DenseLayer forward matches hand-computed values") {
  // x [2 x 2], W [2 x 3], b [3]
  std::vector<float> x = {1, 2, -1, 0.5f};
  std::vector<float> w = {1, 0, -1, 0, 1, 1};
  std::vector<float> b = {0.5f, -3, 0};
  DenseLayer relu(2, 3, Activation::kRelu);
  auto y = relu.Forward(x, 2, w, b);
  // pre-activation: row0 = [1.5, -1, 1], row1 = [-0.5, -2.5, 1.5]
  CHECK(std::vector<float>(y.begin(), y.end()) == std::vector<float>{1.5f, 0, 1, 0, 0, 1.5f});
  DenseLayer sig(2, 3, Activation::kSigmoid);
  auto s = sig.Forward(x, 2, w, b);
  CHECK(s[0] == Approx(1.0 / (1.0 + std::exp(-1.5))));
  CHECK(s[4] == Approx(1.0 / (1.0 + std::exp(2.5))));
}

TEST_CASE("Softmax cross-entropy: values, gradients and stability") {
  SECTION("hand-computed") {
    std::vector<float> logits = {0, std::log(3.0f), 2, 2};  // 2 examples, 2 classes
    std::vector<float> labels = {1, 0};
    std::vector<float> d(4), p(4);
    auto r = SoftmaxCrossEntropy(logits, labels, 2, 2, d, p);
    // p0 = [1/4, 3/4]: loss -log(3/4); p1 = [1/2, 1/2]: loss log 2
    CHECK(r.loss_sum == Approx(-std::log(0.75) + std::log(2.0)));
    CHECK(r.correct == 2);  // example 1 ties; argmax takes the first -> class 0 == label
    CHECK(p[0] == Approx(0.25));
    CHECK(p[1] == Approx(0.75));
    CHECK(d[0] == Approx(0.25 / 2));
    CHECK(d[1] == Approx(-0.25 / 2));
    CHECK(d[2] == Approx(-0.5 / 2));
    CHECK(d[3] == Approx(0.5 / 2));
  }
  SECTION("huge logits stay finite") {
    std::vector<float> logits = {1000, 0, -1000, 1000, 0, -1000};
    std::vector<float> labels = {0, 1};
    std::vector<float> d(6), p(6);
    auto r = SoftmaxCrossEntropy(logits, labels, 2, 3, d, p);
    CHECK(std::isfinite(r.loss_sum));
    CHECK(r.loss_sum == Approx(1000.0));
    for (float v : d) CHECK(std::isfinite(v));
    CHECK(p[0] == Approx(1.0));
    CHECK(p[2] == 0.0f);
  }
  SECTION("gradient matches central differences") {
    std::mt19937 rng(3);
    const int64_t batch = 4, classes = 5;
    auto logits = Random(batch * classes, rng, -3, 3);
    std::vector<float> labels = {0, 4, 2, 2};
    std::vector<float> d(batch * classes);
    SoftmaxCrossEntropy(logits, labels, batch, classes, d, {});
    for (size_t i = 0; i < logits.size(); ++i) {
      const float saved = logits[i];
      logits[i] = saved + 1e-2f;
      const double hi = logits[i];
      double up = SoftmaxCrossEntropy(logits, labels, batch, classes, {}, {}).loss_sum;
      logits[i] = saved - 1e-2f;
      const double lo = logits[i];
      double down = SoftmaxCrossEntropy(logits, labels, batch, classes, {}, {}).loss_sum;
      logits[i] = saved;
      CHECK(d[i] == Approx((up - down) / (hi - lo) / batch).margin(1e-4));
    }
  }
}

TEST_CASE("Sigmoid cross-entropy: values, gradients and stability") {
  SECTION("hand-computed and extreme logits") {
    std::vector<float> logits = {0, 100, -100, 100, 2};
    std::vector<float> labels = {1, 0, 0, 1, 0.25f};
    std::vector<float> d(5), p(5);
    auto r = SigmoidCrossEntropy(logits, labels, 5, d, p);
    const double last = 2 - 2 * 0.25 + std::log1p(std::exp(-2.0));
    CHECK(r.loss_sum == Approx(std::log(2.0) + 100.0 + 0.0 + 0.0 + last));
    CHECK(
        r.correct ==
        3);  // p(0) = 0.5 counts as 1; logit 100 vs 0 and the soft label 0.25 vs p > 0.5 are wrong
    CHECK(p[0] == 0.5f);
    CHECK(p[1] == 1.0f);
    CHECK(p[2] >= 0.0f);
    CHECK(p[2] < 1e-40f);
    CHECK(d[0] == Approx(-0.5 / 5));
    CHECK(d[1] == Approx(1.0 / 5));
    for (float v : d) CHECK(std::isfinite(v));
    CHECK(Sigmoid(-200.0f) == 0.0f);
    CHECK(Sigmoid(200.0f) == 1.0f);
  }
  SECTION("gradient matches central differences") {
    std::mt19937 rng(5);
    const int64_t batch = 6;
    auto logits = Random(batch, rng, -4, 4);
    std::vector<float> labels = {0, 1, 1, 0, 0.5f, 1};
    std::vector<float> d(batch);
    SigmoidCrossEntropy(logits, labels, batch, d, {});
    for (size_t i = 0; i < logits.size(); ++i) {
      const float saved = logits[i];
      logits[i] = saved + 1e-2f;
      const double hi = logits[i];
      double up = SigmoidCrossEntropy(logits, labels, batch, {}, {}).loss_sum;
      logits[i] = saved - 1e-2f;
      const double lo = logits[i];
      double down = SigmoidCrossEntropy(logits, labels, batch, {}, {}).loss_sum;
      logits[i] = saved;
      CHECK(d[i] == Approx((up - down) / (hi - lo) / batch).margin(1e-4));
    }
  }
}

TEST_CASE("Embedding bag pooling: sum, mean and sqrtn against hand-computed values") {
  // Table of 5 rows, dim 2: row r = [r, 10 r].
  std::vector<float> table = {0, 0, 1, 10, 2, 20, 3, 30, 4, 40};
  SparseField f;
  f.offsets = {0, 2, 2, 4};  // example 0: ids 1, 3; example 1: none; example 2: 4, 4
  f.ids = {1, 3, 4, 4};
  std::vector<int64_t> local = {1, 3, 4, 4};  // the whole table is "pulled"
  std::vector<float> out(3 * 3, -7.0f);       // stride 3: one padding column stays -7

  EmbeddingBagForward(f, local, table, 2, Combiner::kSum, out.data(), 3);
  CHECK(out == std::vector<float>{4, 40, -7, 0, 0, -7, 8, 80, -7});
  EmbeddingBagForward(f, local, table, 2, Combiner::kMean, out.data(), 3);
  CHECK(out == std::vector<float>{2, 20, -7, 0, 0, -7, 4, 40, -7});

  f.values = {2, 1, 0.5f, 1.5f};  // weights
  EmbeddingBagForward(f, local, table, 2, Combiner::kSum, out.data(), 3);
  CHECK(out == std::vector<float>{5, 50, -7, 0, 0, -7, 8, 80, -7});
  EmbeddingBagForward(f, local, table, 2, Combiner::kMean, out.data(), 3);
  // (2*1 + 1*3) / 3 and (0.5*4 + 1.5*4) / 2
  CHECK(out[0] == Approx(5.0 / 3));
  CHECK(out[1] == Approx(50.0 / 3));
  CHECK(out[6] == Approx(4.0));
  EmbeddingBagForward(f, local, table, 2, Combiner::kSqrtN, out.data(), 3);
  CHECK(out[0] == Approx(5.0 / std::sqrt(5.0)));
  CHECK(out[6] == Approx(8.0 / std::sqrt(0.25 + 2.25)));
}

TEST_CASE("Embedding bag backward sums duplicate ids into one row") {
  SparseField f;
  f.offsets = {0, 3, 4};
  f.ids = {7, 2, 7, 7};
  std::vector<int64_t> local = {1, 0, 1, 1};  // pulled rows [2, 7]
  std::vector<float> dout = {1, 2, 10, 20};   // [2 x 2]
  std::vector<float> dtable(4, 0.0f);
  EmbeddingBagBackward(f, local, 2, Combiner::kMean, dout.data(), 2, dtable);
  // row 2: 1/3 * [1, 2]; row 7: 2/3 * [1, 2] + 1 * [10, 20]
  CHECK(dtable[0] == Approx(1.0 / 3));
  CHECK(dtable[1] == Approx(2.0 / 3));
  CHECK(dtable[2] == Approx(2.0 / 3 + 10));
  CHECK(dtable[3] == Approx(4.0 / 3 + 20));
  std::fill(dtable.begin(), dtable.end(), 0.0f);
  EmbeddingBagBackward(f, local, 2, Combiner::kSum, dout.data(), 2, dtable);
  CHECK(dtable == std::vector<float>{1, 2, 12, 24});
}
