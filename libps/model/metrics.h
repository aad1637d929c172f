// Evaluation figures per head of a model, accumulated over the batches of a pass:
//   softmax_cross_entropy: accuracy, log-loss (mean cross-entropy)
//   sigmoid_cross_entropy: accuracy, AUC, log-loss
//   mean_squared_error:    RMSE (and loss = mean squared error)
// Not thread-safe; one per evaluation pass.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/model/model.h"

namespace ps::model {

// Area under the ROC curve of `scores` for 0/1 `labels` (label > 0.5 is positive; ties
// count half, by the Mann-Whitney rank sum); -1 when one class is absent.
double Auc(std::span<const float> scores, std::span<const float> labels);

struct HeadFigures {
  std::string name;
  LossKind loss = LossKind::kSigmoidCrossEntropy;
  int64_t examples = 0;
  double mean_loss = 0;            // log-loss for the cross-entropies, MSE otherwise
  std::optional<double> accuracy;  // cross-entropy heads
  std::optional<double> auc;       // sigmoid heads with both classes present
  std::optional<double> rmse;      // mean squared error heads
};

class HeadMetrics {
 public:
  // What a pass adds up per head. Sums of several passes over disjoint parts of a data set
  // merge exactly (Merge): the AUC of merged scores is the AUC of the whole.
  struct Sums {
    int64_t examples = 0;
    double loss_sum = 0;
    int64_t correct = 0;
    std::vector<float> scores, labels;  // sigmoid heads, for the AUC
  };

  explicit HeadMetrics(std::vector<HeadInfo> heads);
  // Adds one labelled batch's EvalOutput (out.heads sized like the model's heads).
  void Add(const EvalOutput& out);
  const std::vector<Sums>& sums() const { return sums_; }
  // Adds another pass's sums (sized like the heads; InvalidArgument otherwise).
  Status Merge(const std::vector<Sums>& other);
  std::vector<HeadFigures> Finish() const;
  // {"<head>": {"examples":..,"loss":..,"accuracy":..,"auc":..,"rmse":..}, ...} with the
  // figures that apply.
  static Json ToJson(const std::vector<HeadFigures>& figures);

 private:
  std::vector<HeadInfo> heads_;
  std::vector<Sums> sums_;
};

}  // namespace ps::model
