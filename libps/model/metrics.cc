#include "libps/model/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace ps::model {

double Auc(std::span<const float> scores, std::span<const float> labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U: sum of the positives' ranks (ties get their average rank).
  double rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double avg_rank = (static_cast<double>(i) + static_cast<double>(j - 1)) / 2.0 + 1.0;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += avg_rank;
        ++positives;
      }
    }
    i = j;
  }
  const int64_t negatives = static_cast<int64_t>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return -1;
  const double p = static_cast<double>(positives), n = static_cast<double>(negatives);
  return (rank_sum - p * (p + 1) / 2) / (p * n);
}

HeadMetrics::HeadMetrics(std::vector<HeadInfo> heads)
    : heads_(std::move(heads)), sums_(heads_.size()) {}

void HeadMetrics::Add(const EvalOutput& out) {
  for (size_t h = 0; h < heads_.size() && h < out.heads.size(); ++h) {
    const HeadEval& e = out.heads[h];
    Sums& s = sums_[h];
    s.examples += out.examples;
    s.loss_sum += e.loss_sum;
    s.correct += e.correct;
    if (heads_[h].loss == LossKind::kSigmoidCrossEntropy) {
      s.scores.insert(s.scores.end(), e.predictions.begin(), e.predictions.end());
      s.labels.insert(s.labels.end(), e.labels.begin(), e.labels.end());
    }
  }
}

Status HeadMetrics::Merge(const std::vector<Sums>& other) {
  if (other.size() != sums_.size()) {
    return InvalidArgument("evaluation sums for " + std::to_string(other.size()) +
                           " head(s); the model has " + std::to_string(sums_.size()));
  }
  for (size_t h = 0; h < sums_.size(); ++h) {
    const Sums& o = other[h];
    if (o.scores.size() != o.labels.size())
      return InvalidArgument("evaluation sums: scores and labels differ in count");
    Sums& s = sums_[h];
    s.examples += o.examples;
    s.loss_sum += o.loss_sum;
    s.correct += o.correct;
    s.scores.insert(s.scores.end(), o.scores.begin(), o.scores.end());
    s.labels.insert(s.labels.end(), o.labels.begin(), o.labels.end());
  }
  return Status::Ok();
}

std::vector<HeadFigures> HeadMetrics::Finish() const {
  std::vector<HeadFigures> out;
  for (size_t h = 0; h < heads_.size(); ++h) {
    const Sums& s = sums_[h];
    HeadFigures f;
    f.name = heads_[h].name;
    f.loss = heads_[h].loss;
    f.examples = s.examples;
    if (s.examples > 0) {
      const double n = static_cast<double>(s.examples);
      f.mean_loss = s.loss_sum / n;
      if (f.loss == LossKind::kMeanSquaredError) {
        f.rmse = std::sqrt(f.mean_loss);
      } else {
        f.accuracy = static_cast<double>(s.correct) / n;
      }
      if (f.loss == LossKind::kSigmoidCrossEntropy && s.labels.size() == s.scores.size()) {
        const double auc = Auc(s.scores, s.labels);
        if (auc >= 0) f.auc = auc;
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

Json HeadMetrics::ToJson(const std::vector<HeadFigures>& figures) {
  Json j = Json::object();
  for (const HeadFigures& f : figures) {
    Json h = {{"examples", f.examples}, {"loss", f.mean_loss}};
    if (f.accuracy) h["accuracy"] = *f.accuracy;
    if (f.auc) h["auc"] = *f.auc;
    if (f.rmse) h["rmse"] = *f.rmse;
    j[f.name] = std::move(h);
  }
  return j;
}

}  // namespace ps::model
