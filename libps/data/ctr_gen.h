// Synthetic click-through-rate (CTR) data with a known ground truth, for benchmarks and
// for checking that training reaches the best achievable quality.
//
// Every example has one or more ids from each of several categorical fields. Field f
// owns the global ids [offset_f, offset_f + vocab_f) (offset_0 = 0, offset_{f+1} =
// offset_f + vocab_f), so all fields share one LibSVM id space of num_features =
// Σ vocab_f ids. Within a field, local id k (0-based) is drawn with probability
// ∝ (k + 1)^-zipf: local id 0 is the most frequent.
//
// Ground truth: logit = bias + Σ_f Σ_{ids of f} count(id) · w[id]
//                     + Σ_{interactions (a, b)} scale · <Σ_{ids of a} u[id], Σ_{ids of b} u[id]>
// with w[id] ~ Normal(0, weight_scale_f²) and, for fields in an interaction, latent vectors
// u[id] ~ Normal(0, 1/kInteractionDim) per component; label ~ Bernoulli(sigmoid(logit)).
// Without interactions (the default) logistic regression over the ids is the true model.
//
// Files written into the output directory, per format (CtrOutput; gzip-compressed when
// CtrSpec::gzip, same names), each written to "<name>.tmp" and renamed when complete:
//   train.libsvm, eval.libsvm   LibSVM, 1-based ids, labels 0/1, "id:count" ascending
//   train.tfrecord, ...         TFRecord of tf.Example, train.tsv ... Criteo TSV (see
//                               ctr_writers.h); with N files "train-0000k-of-0000N.<ext>"
//   ctr.json                    written last: the spec, num_features, field_offsets,
//                               ready-to-use data objects per format ("outputs"), and the
//                               ground truth's metrics on exactly the eval examples written
//
// Determinism: the same spec gives byte-identical files on every platform (own PRNG,
// no std:: distributions). Weights, train examples and eval examples use separate
// streams of the seed, so the eval set (and the truth) does not depend on
// train_examples.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"

namespace ps::data {

inline constexpr int kInteractionDim = 4;
inline constexpr int64_t kMaxCtrFieldVocab = 20'000'000;  // the sampler keeps a CDF per field
inline constexpr int kMaxCtrIdsPerField = 1000;

struct CtrField {
  std::string name;           // for ctr.json only
  int64_t vocab = 0;          // 1 … kMaxCtrFieldVocab
  double zipf = 1.1;          // exponent >= 0; 0 = uniform
  int min_ids = 1;            // ids per example: uniform in [min_ids, max_ids], drawn with
  int max_ids = 1;            // replacement (a repeated id is written once with its count)
  double weight_scale = 0.5;  // stddev of the field's ground-truth weights, >= 0
};

struct CtrInteraction {
  int field_a = 0;
  int field_b = 0;     // != field_a
  double scale = 1.0;  // >= 0
};

struct CtrSpec {
  uint64_t seed = 1;
  int64_t train_examples = 1'000'000;  // >= 0
  int64_t eval_examples = 100'000;     // >= 1 (the truth's metrics are computed on them)
  std::vector<CtrField> fields;        // >= 1; DefaultCtrSpec() has 8
  std::vector<CtrInteraction> interactions;
  double bias = -1.5;
  bool gzip = false;
};

// 8 fields with vocabularies from 10 to 1e6 (one multi-id field), 1M train / 100k eval
// examples, no interactions: click rate ≈ 0.19, ground-truth eval AUC ≈ 0.80. The
// weight scales shrink and the Zipf exponents grow with the vocabulary, so that at 1M
// examples the job files get within ~0.005 AUC of the truth.
CtrSpec DefaultCtrSpec();

// Checks ranges; errors name the field ("<path>.fields[3].vocab: ...").
Status ValidateCtrSpec(const CtrSpec& spec, const std::string& path = "spec");

// JSON form (ctr.json's "spec", and `pstrain gen-ctr --spec FILE`). Keys: seed,
// train_examples, eval_examples, bias, gzip, fields: [{name, vocab, zipf, ids (integer
// or [min, max]), weight_scale}], interactions: [{fields: [a, b], scale}]. Absent keys
// keep DefaultCtrSpec()'s values (absent "fields" keeps the default fields; a field's
// absent keys take CtrField's defaults). Read strictly; the result is validated.
Result<CtrSpec> ParseCtrSpec(const Json& json, const std::string& path = "spec");
Json CtrSpecToJson(const CtrSpec& spec);

// [fields + 1]: offset of each field's ids, then num_features.
std::vector<int64_t> CtrFieldOffsets(const CtrSpec& spec);

// The ground-truth model of a (valid) spec. Weights: [num_features] floats, plus
// [kInteractionDim] per id of fields in interactions. Immutable after Create; thread-safe.
class CtrTruth {
 public:
  static Result<CtrTruth> Create(const CtrSpec& spec);

  // Logit of one example given its global 0-based ids and their values (counts; empty
  // values = all 1). Ids must be < num_features.
  double Logit(std::span<const int64_t> ids, std::span<const float> values = {}) const;
  int64_t num_features() const { return offsets_.back(); }
  const std::vector<int64_t>& offsets() const { return offsets_; }
  float weight(int64_t id) const { return weights_[static_cast<size_t>(id)]; }

 private:
  CtrSpec spec_;
  std::vector<int64_t> offsets_;            // [fields + 1]
  std::vector<float> weights_;              // [num_features]
  std::vector<int> latent_slot_;            // [fields]: index into latent_, or -1
  std::vector<std::vector<float>> latent_;  // [slots][vocab_f * kInteractionDim]
};

// Draws local ids of a field by inverse CDF (binary search); deterministic.
class ZipfSampler {
 public:
  ZipfSampler(int64_t vocab, double exponent);
  // u uniform in [0, 1) → local id in [0, vocab).
  int64_t Sample(double u) const;
  // P(local id == k).
  double Probability(int64_t k) const;

 private:
  std::vector<double> cdf_;  // [vocab], cdf_[k] = P(id <= k), cdf_.back() == 1
};

// The output formats of GenerateCtr (ctr_writers.h says how each holds an example).
enum class CtrFormat { kLibSvm, kTfRecord, kCriteoTsv };
const char* CtrFormatName(CtrFormat format);  // "libsvm", "tfrecord", "criteo_tsv"
Result<CtrFormat> ParseCtrFormat(std::string_view name);

struct CtrOutput {
  std::vector<CtrFormat> formats{CtrFormat::kLibSvm};  // the same examples in each
  int files = 1;  // per split and format: 1 → "train.<ext>", N → "train-0000k-of-0000N.<ext>"
};

struct CtrFiles {
  CtrFormat format = CtrFormat::kLibSvm;
  std::vector<std::string> train, eval;  // paths, in example order
};

struct CtrReport {
  int64_t num_features = 0;
  std::vector<int64_t> field_offsets;            // [fields + 1]
  std::string train_path, eval_path, json_path;  // the first format's first files
  std::vector<CtrFiles> outputs;                 // [output.formats]
  double truth_eval_auc = 0;      // the ground-truth probabilities on the eval examples written
  double truth_eval_logloss = 0;  // mean, natural log
  double train_click_rate = 0;    // fraction of label 1 (0 when there are no train examples)
  double eval_click_rate = 0;
  double eval_mean_probability = 0;  // mean ground-truth probability on eval
  double seconds = 0;                // wall time of writing both files
};

// Writes the train and eval files of every output format, then ctr.json, into out_dir
// (created if missing), streaming: memory is O(num_features + eval_examples), not
// O(train_examples). The default output is train.libsvm and eval.libsvm.
// Errors: InvalidArgument (spec, or a format the spec does not fit), IoError naming
// the file.
Result<CtrReport> GenerateCtr(const CtrSpec& spec, const std::string& out_dir,
                              const CtrOutput& output = {});

// AUC of scores for 0/1 labels, ties counting half; -1 when a class is absent.
double CtrAuc(std::span<const float> scores, std::span<const uint8_t> labels);

}  // namespace ps::data
