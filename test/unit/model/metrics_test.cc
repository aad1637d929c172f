#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "libps/model/metrics.h"

using namespace ps::model;

TEST_CASE("Auc: hand-computed values, ties count half, -1 without both classes") {
  CHECK(Auc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<float>{0, 0, 1, 1}) ==
        Approx(0.75));
  CHECK(Auc(std::vector<float>{0.5f, 0.5f}, std::vector<float>{0, 1}) == Approx(0.5));
  CHECK(Auc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{0, 1}) == 1.0);
  CHECK(Auc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{1, 1}) == -1);
}

TEST_CASE("HeadMetrics: accuracy and log-loss, AUC for sigmoid heads, RMSE for regression heads") {
  HeadMetrics m({{"cls", LossKind::kSoftmaxCrossEntropy, 3, 1.0},
                 {"click", LossKind::kSigmoidCrossEntropy, 1, 1.0},
                 {"value", LossKind::kMeanSquaredError, 1, 0.5}});
  for (int batch = 0; batch < 2; ++batch) {
    EvalOutput out;
    out.examples = 2;
    out.heads.resize(3);
    out.heads[0] = {1.2, 1, {}, {}};
    out.heads[1] = {
        0.8, 2, {batch ? 0.9f : 0.2f, batch ? 0.3f : 0.6f}, {batch ? 1.0f : 0.0f, 0.0f}};
    out.heads[2] = {batch ? 2.0 : 6.0, 0, {0, 0}, {1, 1}};
    m.Add(out);
  }
  auto f = m.Finish();
  REQUIRE(f.size() == 3);
  CHECK(f[0].examples == 4);
  CHECK(f[0].mean_loss == Approx(0.6));
  CHECK(*f[0].accuracy == Approx(0.5));
  CHECK_FALSE(f[0].auc);
  CHECK_FALSE(f[0].rmse);
  // click scores {0.2, 0.6, 0.9, 0.3} labels {0, 0, 1, 0}: the positive outranks all 3.
  CHECK(*f[1].auc == Approx(1.0));
  CHECK(*f[1].accuracy == Approx(1.0));
  CHECK(*f[2].rmse == Approx(std::sqrt(2.0)));
  CHECK_FALSE(f[2].accuracy);
  ps::Json j = HeadMetrics::ToJson(f);
  CHECK(j["value"]["rmse"].get<double>() == Approx(std::sqrt(2.0)));
  CHECK(j["click"].contains("auc"));
  CHECK_FALSE(j["cls"].contains("auc"));
}

TEST_CASE("HeadMetrics: sums of disjoint parts merge into exactly the figures of the whole") {
  const std::vector<HeadInfo> heads = {{"click", LossKind::kSigmoidCrossEntropy, 1, 1.0}};
  std::vector<float> scores, labels;
  for (int i = 0; i < 97; ++i) {
    scores.push_back(static_cast<float>((i * 37) % 101) / 101.0f);
    labels.push_back(i % 3 == 0 || (i * 37) % 101 > 70 ? 1.0f : 0.0f);
  }
  auto batch = [&](size_t from, size_t to) {
    EvalOutput out;
    out.examples = static_cast<int64_t>(to - from);
    out.heads.resize(1);
    out.heads[0].loss_sum = 0.25 * static_cast<double>(to - from);
    out.heads[0].correct = static_cast<int64_t>((to - from) / 2);
    out.heads[0].predictions.assign(scores.begin() + static_cast<long>(from),
                                    scores.begin() + static_cast<long>(to));
    out.heads[0].labels.assign(labels.begin() + static_cast<long>(from),
                               labels.begin() + static_cast<long>(to));
    return out;
  };
  HeadMetrics whole(heads);
  whole.Add(batch(0, 97));
  // Three "workers" with uneven shares, merged in another order.
  HeadMetrics a(heads), b(heads), c(heads), merged(heads);
  a.Add(batch(0, 40));
  b.Add(batch(40, 41));
  c.Add(batch(41, 97));
  REQUIRE(merged.Merge(c.sums()).ok());
  REQUIRE(merged.Merge(a.sums()).ok());
  REQUIRE(merged.Merge(b.sums()).ok());
  const auto w = whole.Finish(), m = merged.Finish();
  CHECK(m[0].examples == w[0].examples);
  CHECK(*m[0].auc == *w[0].auc);  // exactly: the rank sum does not depend on the order
  CHECK(m[0].mean_loss == Approx(w[0].mean_loss));
  CHECK(merged.Merge({}).code() == ps::Code::kInvalidArgument);
}
