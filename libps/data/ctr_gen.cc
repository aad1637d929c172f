#include "libps/data/ctr_gen.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>

#include "libps/data/ctr_writers.h"
#include "libps/data/random.h"

namespace ps::data {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Standard normal by Box-Muller (one value per call; spelled out for determinism).
double Normal(Rng& rng) {
  double u1 = 1.0 - rng.Uniform();  // (0, 1]
  double u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

// Stream ids of the seed: weights of field f, latent vectors of field f, train, eval.
uint64_t WeightSeed(uint64_t seed, size_t f) { return DeriveSeed(seed, 1, f); }
uint64_t LatentSeed(uint64_t seed, size_t f) { return DeriveSeed(seed, 2, f); }
uint64_t TrainSeed(uint64_t seed) { return DeriveSeed(seed, 3, 0); }
uint64_t EvalSeed(uint64_t seed) { return DeriveSeed(seed, 4, 0); }

float Sigmoid(double z) { return static_cast<float>(1.0 / (1.0 + std::exp(-z))); }

// One split (train or eval) of the data: draws its examples in order.
class ExampleDrawer {
 public:
  ExampleDrawer(const CtrSpec& spec, const CtrTruth& truth,
                const std::vector<ZipfSampler>& samplers, uint64_t seed)
      : spec_(spec), truth_(truth), samplers_(samplers), rng_(seed) {}

  // Draws one example into ids() / counts(); returns its truth probability and label.
  std::pair<float, uint8_t> Next() {
    ids_.clear();
    counts_.clear();
    const std::vector<int64_t>& off = truth_.offsets();
    for (size_t f = 0; f < spec_.fields.size(); ++f) {
      const CtrField& field = spec_.fields[f];
      int n = field.min_ids;
      if (field.max_ids > field.min_ids) {
        n += static_cast<int>(rng_.Below(static_cast<uint64_t>(field.max_ids - field.min_ids) + 1));
      }
      scratch_.clear();
      for (int i = 0; i < n; ++i) scratch_.push_back(off[f] + samplers_[f].Sample(rng_.Uniform()));
      std::sort(scratch_.begin(), scratch_.end());
      for (size_t i = 0; i < scratch_.size(); ++i) {
        if (i > 0 && scratch_[i] == scratch_[i - 1]) {
          counts_.back() += 1.0f;
        } else {
          ids_.push_back(scratch_[i]);
          counts_.push_back(1.0f);
        }
      }
    }
    float p = Sigmoid(truth_.Logit(ids_, counts_));
    uint8_t label = rng_.Uniform() < static_cast<double>(p) ? 1 : 0;
    return {p, label};
  }
  // Global ids, ascending and distinct, and how often each was drawn.
  const std::vector<int64_t>& ids() const { return ids_; }
  const std::vector<float>& counts() const { return counts_; }

 private:
  const CtrSpec& spec_;
  const CtrTruth& truth_;
  const std::vector<ZipfSampler>& samplers_;
  Rng rng_;
  std::vector<int64_t> scratch_, ids_;
  std::vector<float> counts_;
};

std::string FieldPath(const std::string& path, size_t f) {
  return path + ".fields[" + std::to_string(f) + "]";
}

Status ReadField(const Json& j, const std::string& path, CtrField* out) {
  JsonReader r(j, path);
  PS_RETURN_IF_ERROR(r.status());
  PS_RETURN_IF_ERROR(r.GetOr("name", &out->name));
  PS_RETURN_IF_ERROR(r.Get("vocab", &out->vocab));
  PS_RETURN_IF_ERROR(r.GetOr("zipf", &out->zipf));
  PS_RETURN_IF_ERROR(r.GetOr("weight_scale", &out->weight_scale));
  if (const Json* ids = r.Find("ids"); ids != nullptr && !ids->is_null()) {
    if (ids->is_number_integer()) {
      int64_t n = ids->get<int64_t>();
      if (n < 1 || n > kMaxCtrIdsPerField) {
        return InvalidArgument(r.Path("ids") + ": must be in [1, " +
                               std::to_string(kMaxCtrIdsPerField) + "], got " + std::to_string(n));
      }
      out->min_ids = out->max_ids = static_cast<int>(n);
    } else {
      std::vector<int64_t> range;
      PS_RETURN_IF_ERROR(r.Get("ids", &range));
      if (range.size() != 2) {
        return InvalidArgument(r.Path("ids") + ": expected an integer or [min, max]");
      }
      for (int64_t n : range) {
        if (n < 1 || n > kMaxCtrIdsPerField) {
          return InvalidArgument(r.Path("ids") + ": must be in [1, " +
                                 std::to_string(kMaxCtrIdsPerField) + "], got " +
                                 std::to_string(n));
        }
      }
      out->min_ids = static_cast<int>(range[0]);
      out->max_ids = static_cast<int>(range[1]);
    }
  }
  return r.Finish();
}

}  // namespace

CtrSpec DefaultCtrSpec() {
  CtrSpec s;
  //            name            vocab      zipf  ids   scale
  s.fields = {
      {"device_type", 10, 1.0, 1, 1, 0.6},    {"hour", 24, 0.0, 1, 1, 0.5},
      {"site_category", 100, 1.1, 1, 1, 0.7}, {"app", 1000, 1.2, 1, 1, 0.6},
      {"site", 10'000, 1.3, 1, 1, 0.35},      {"ad", 100'000, 1.4, 1, 1, 0.3},
      {"user", 1'000'000, 1.5, 1, 1, 0.2},    {"interests", 5000, 1.2, 1, 5, 0.1},
  };
  return s;
}

Status ValidateCtrSpec(const CtrSpec& spec, const std::string& path) {
  if (spec.train_examples < 0) {
    return InvalidArgument(path + ".train_examples: must not be negative, got " +
                           std::to_string(spec.train_examples));
  }
  if (spec.eval_examples < 1) {
    return InvalidArgument(path + ".eval_examples: must be at least 1, got " +
                           std::to_string(spec.eval_examples));
  }
  if (!std::isfinite(spec.bias)) return InvalidArgument(path + ".bias: must be finite");
  if (spec.fields.empty()) return InvalidArgument(path + ".fields: needs at least one field");
  int64_t total = 0;
  for (size_t f = 0; f < spec.fields.size(); ++f) {
    const CtrField& c = spec.fields[f];
    const std::string fp = FieldPath(path, f);
    if (c.vocab < 1 || c.vocab > kMaxCtrFieldVocab) {
      return InvalidArgument(fp + ".vocab: must be in [1, " + std::to_string(kMaxCtrFieldVocab) +
                             "], got " + std::to_string(c.vocab));
    }
    if (!(c.zipf >= 0.0 && c.zipf <= 10.0)) {
      return InvalidArgument(fp + ".zipf: must be in [0, 10], got " + std::to_string(c.zipf));
    }
    if (c.min_ids < 1 || c.max_ids < c.min_ids || c.max_ids > kMaxCtrIdsPerField) {
      return InvalidArgument(
          fp + ".ids: need 1 <= min <= max <= " + std::to_string(kMaxCtrIdsPerField) + ", got [" +
          std::to_string(c.min_ids) + ", " + std::to_string(c.max_ids) + "]");
    }
    if (!(c.weight_scale >= 0.0 && c.weight_scale <= 100.0)) {
      return InvalidArgument(fp + ".weight_scale: must be in [0, 100], got " +
                             std::to_string(c.weight_scale));
    }
    total += c.vocab;
  }
  if (total > (int64_t{1} << 31)) {
    return InvalidArgument(path + ".fields: total vocabulary " + std::to_string(total) +
                           " exceeds 2^31");
  }
  for (size_t i = 0; i < spec.interactions.size(); ++i) {
    const CtrInteraction& x = spec.interactions[i];
    const std::string ip = path + ".interactions[" + std::to_string(i) + "]";
    const int n = static_cast<int>(spec.fields.size());
    if (x.field_a < 0 || x.field_a >= n || x.field_b < 0 || x.field_b >= n ||
        x.field_a == x.field_b) {
      return InvalidArgument(ip + ".fields: need two different field indices in [0, " +
                             std::to_string(n) + ")");
    }
    if (!(x.scale >= 0.0 && x.scale <= 100.0)) {
      return InvalidArgument(ip + ".scale: must be in [0, 100]");
    }
  }
  return Status::Ok();
}

Result<CtrSpec> ParseCtrSpec(const Json& json, const std::string& path) {
  CtrSpec s = DefaultCtrSpec();
  JsonReader r(json, path);
  PS_RETURN_IF_ERROR(r.status());
  PS_RETURN_IF_ERROR(r.GetOr("seed", &s.seed));
  PS_RETURN_IF_ERROR(r.GetOr("train_examples", &s.train_examples));
  PS_RETURN_IF_ERROR(r.GetOr("eval_examples", &s.eval_examples));
  PS_RETURN_IF_ERROR(r.GetOr("bias", &s.bias));
  PS_RETURN_IF_ERROR(r.GetOr("gzip", &s.gzip));
  if (const Json* fields = r.Find("fields"); fields != nullptr && !fields->is_null()) {
    if (!fields->is_array()) return InvalidArgument(r.Path("fields") + ": expected an array");
    s.fields.clear();
    for (size_t f = 0; f < fields->size(); ++f) {
      CtrField c;
      c.name = "field_" + std::to_string(f);
      PS_RETURN_IF_ERROR(ReadField((*fields)[f], FieldPath(path, f), &c));
      s.fields.push_back(std::move(c));
    }
  }
  if (const Json* xs = r.Find("interactions"); xs != nullptr && !xs->is_null()) {
    if (!xs->is_array()) return InvalidArgument(r.Path("interactions") + ": expected an array");
    for (size_t i = 0; i < xs->size(); ++i) {
      JsonReader xr((*xs)[i], path + ".interactions[" + std::to_string(i) + "]");
      PS_RETURN_IF_ERROR(xr.status());
      std::vector<int64_t> pair;
      CtrInteraction x;
      PS_RETURN_IF_ERROR(xr.Get("fields", &pair));
      if (pair.size() != 2) return InvalidArgument(xr.Path("fields") + ": expected [a, b]");
      PS_RETURN_IF_ERROR(xr.GetOr("scale", &x.scale));
      PS_RETURN_IF_ERROR(xr.Finish());
      const auto n = static_cast<int64_t>(s.fields.size());
      if (pair[0] < 0 || pair[0] >= n || pair[1] < 0 || pair[1] >= n) {
        return InvalidArgument(xr.Path("fields") + ": field index out of range [0, " +
                               std::to_string(n) + ")");
      }
      x.field_a = static_cast<int>(pair[0]);
      x.field_b = static_cast<int>(pair[1]);
      s.interactions.push_back(x);
    }
  }
  PS_RETURN_IF_ERROR(r.Finish());
  PS_RETURN_IF_ERROR(ValidateCtrSpec(s, path));
  return s;
}

Json CtrSpecToJson(const CtrSpec& spec) {
  Json j = Json::object();
  j["seed"] = spec.seed;
  j["train_examples"] = spec.train_examples;
  j["eval_examples"] = spec.eval_examples;
  j["bias"] = spec.bias;
  j["gzip"] = spec.gzip;
  Json fields = Json::array();
  for (const CtrField& c : spec.fields) {
    Json f = Json::object();
    f["name"] = c.name;
    f["vocab"] = c.vocab;
    f["zipf"] = c.zipf;
    if (c.min_ids == c.max_ids) {
      f["ids"] = c.min_ids;
    } else {
      f["ids"] = Json::array({c.min_ids, c.max_ids});
    }
    f["weight_scale"] = c.weight_scale;
    fields.push_back(std::move(f));
  }
  j["fields"] = std::move(fields);
  Json xs = Json::array();
  for (const CtrInteraction& x : spec.interactions) {
    xs.push_back(Json{{"fields", Json::array({x.field_a, x.field_b})}, {"scale", x.scale}});
  }
  j["interactions"] = std::move(xs);
  return j;
}

std::vector<int64_t> CtrFieldOffsets(const CtrSpec& spec) {
  std::vector<int64_t> off{0};
  for (const CtrField& c : spec.fields) off.push_back(off.back() + c.vocab);
  return off;
}

Result<CtrTruth> CtrTruth::Create(const CtrSpec& spec) {
  PS_RETURN_IF_ERROR(ValidateCtrSpec(spec));
  CtrTruth t;
  t.spec_ = spec;
  t.offsets_ = CtrFieldOffsets(spec);
  t.weights_.resize(static_cast<size_t>(t.offsets_.back()));
  for (size_t f = 0; f < spec.fields.size(); ++f) {
    Rng rng(WeightSeed(spec.seed, f));
    const double scale = spec.fields[f].weight_scale;
    for (int64_t id = t.offsets_[f]; id < t.offsets_[f + 1]; ++id) {
      t.weights_[static_cast<size_t>(id)] = static_cast<float>(scale * Normal(rng));
    }
  }
  t.latent_slot_.assign(spec.fields.size(), -1);
  for (const CtrInteraction& x : spec.interactions) {
    for (int f : {x.field_a, x.field_b}) {
      if (t.latent_slot_[static_cast<size_t>(f)] >= 0) continue;
      t.latent_slot_[static_cast<size_t>(f)] = static_cast<int>(t.latent_.size());
      Rng rng(LatentSeed(spec.seed, static_cast<size_t>(f)));
      std::vector<float> u(static_cast<size_t>(spec.fields[static_cast<size_t>(f)].vocab) *
                           kInteractionDim);
      const double sd = 1.0 / std::sqrt(static_cast<double>(kInteractionDim));
      for (float& v : u) v = static_cast<float>(sd * Normal(rng));
      t.latent_.push_back(std::move(u));
    }
  }
  return t;
}

double CtrTruth::Logit(std::span<const int64_t> ids, std::span<const float> values) const {
  double z = spec_.bias;
  for (size_t i = 0; i < ids.size(); ++i) {
    const double v = values.empty() ? 1.0 : values[i];
    z += v * weights_[static_cast<size_t>(ids[i])];
  }
  if (spec_.interactions.empty()) return z;
  std::vector<double> sums(latent_.size() * kInteractionDim, 0.0);  // [slots * dim]
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto f = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), ids[i]) -
                                       offsets_.begin() - 1);
    const int slot = latent_slot_[f];
    if (slot < 0) continue;
    const double v = values.empty() ? 1.0 : values[i];
    const float* u = latent_[static_cast<size_t>(slot)].data() +
                     static_cast<size_t>(ids[i] - offsets_[f]) * kInteractionDim;
    for (int k = 0; k < kInteractionDim; ++k) {
      sums[static_cast<size_t>(slot) * kInteractionDim + static_cast<size_t>(k)] += v * u[k];
    }
  }
  for (const CtrInteraction& x : spec_.interactions) {
    const auto a = static_cast<size_t>(latent_slot_[static_cast<size_t>(x.field_a)]);
    const auto b = static_cast<size_t>(latent_slot_[static_cast<size_t>(x.field_b)]);
    double dot = 0;
    for (size_t k = 0; k < kInteractionDim; ++k) {
      dot += sums[a * kInteractionDim + k] * sums[b * kInteractionDim + k];
    }
    z += x.scale * dot;
  }
  return z;
}

ZipfSampler::ZipfSampler(int64_t vocab, double exponent) {
  cdf_.resize(static_cast<size_t>(vocab));
  double sum = 0;
  for (int64_t k = 0; k < vocab; ++k) {
    sum += std::pow(static_cast<double>(k + 1), -exponent);
    cdf_[static_cast<size_t>(k)] = sum;
  }
  for (double& c : cdf_) c /= sum;
  cdf_.back() = 1.0;
}

int64_t ZipfSampler::Sample(double u) const {
  auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  if (it == cdf_.end()) --it;  // u < 1 always lands inside; guards rounding
  return it - cdf_.begin();
}

double ZipfSampler::Probability(int64_t k) const {
  const auto i = static_cast<size_t>(k);
  return i == 0 ? cdf_[0] : cdf_[i] - cdf_[i - 1];
}

double CtrAuc(std::span<const float> scores, std::span<const uint8_t> labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U: sum of positive ranks (1-based, ties get their mean rank).
  double positives = 0, rank_sum = 0;
  size_t i = 0;
  while (i < order.size()) {
    size_t j = i;
    double pos_in_group = 0;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) {
      pos_in_group += labels[order[j]];
      ++j;
    }
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    rank_sum += pos_in_group * mean_rank;
    positives += pos_in_group;
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return -1;
  return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives);
}

const char* CtrFormatName(CtrFormat format) {
  switch (format) {
    case CtrFormat::kLibSvm:
      return "libsvm";
    case CtrFormat::kTfRecord:
      return "tfrecord";
    case CtrFormat::kCriteoTsv:
      return "criteo_tsv";
  }
  return "?";
}

Result<CtrFormat> ParseCtrFormat(std::string_view name) {
  for (CtrFormat f : {CtrFormat::kLibSvm, CtrFormat::kTfRecord, CtrFormat::kCriteoTsv}) {
    if (name == CtrFormatName(f)) return f;
  }
  return InvalidArgument("unknown format '" + std::string(name) +
                         "' (expected libsvm, tfrecord or criteo_tsv)");
}

namespace {

const char* Extension(CtrFormat format) {
  switch (format) {
    case CtrFormat::kLibSvm:
      return ".libsvm";
    case CtrFormat::kTfRecord:
      return ".tfrecord";
    case CtrFormat::kCriteoTsv:
      return ".tsv";
  }
  return "";
}

// "train.libsvm" for one file, "train-00002-of-00004.libsvm" for file 2 of 4.
std::string FileName(const std::string& split, CtrFormat format, int index, int files) {
  if (files == 1) return split + Extension(format);
  char part[64];
  std::snprintf(part, sizeof part, "-%05d-of-%05d", index, files);
  return split + part + Extension(format);
}

Status CheckOutput(const CtrSpec& spec, const CtrOutput& output) {
  if (output.formats.empty()) return InvalidArgument("gen-ctr: no output format");
  if (output.files < 1 || output.files > 100000) {
    return InvalidArgument("gen-ctr: files must be in 1..100000, got " +
                           std::to_string(output.files));
  }
  for (CtrFormat f : output.formats) {
    if (f == CtrFormat::kCriteoTsv) PS_RETURN_IF_ERROR(CheckCriteoColumns(spec));
    if (f != CtrFormat::kTfRecord) continue;
    for (size_t i = 0; i < spec.fields.size(); ++i) {
      const std::string& name = spec.fields[i].name;
      bool clash = name.empty() || name == "label";
      for (size_t j = 0; j < i; ++j) clash |= spec.fields[j].name == name;
      if (clash) {
        return InvalidArgument(
            "gen-ctr: tfrecord: fields[" + std::to_string(i) + "].name '" + name +
            "' must be non-empty, unique and not \"label\" (it names the feature)");
      }
    }
  }
  return Status::Ok();
}

// Writes one split into every format, output.files files each (examples split in
// contiguous runs); calls visit(p, label) per example.
template <typename Visit>
Status WriteSplit(const CtrSpec& spec, const CtrTruth& truth,
                  const std::vector<ZipfSampler>& samplers, uint64_t seed, int64_t examples,
                  const CtrOutput& output, const std::filesystem::path& dir,
                  const std::string& split, std::vector<CtrFiles>* files, Visit visit) {
  std::vector<std::unique_ptr<CtrFileWriter>> writers;
  for (CtrFormat f : output.formats)
    writers.push_back(std::make_unique<CtrFileWriter>(f, spec, truth.offsets()));
  ExampleDrawer w(spec, truth, samplers, seed);
  int64_t i = 0;
  for (int k = 0; k < output.files; ++k) {
    for (size_t f = 0; f < writers.size(); ++f) {
      const std::string path = (dir / FileName(split, output.formats[f], k, output.files)).string();
      (split == "train" ? (*files)[f].train : (*files)[f].eval).push_back(path);
      PS_RETURN_IF_ERROR(writers[f]->Open(path));
    }
    const int64_t end = examples * (k + 1) / output.files;
    for (; i < end; ++i) {
      auto [p, label] = w.Next();
      visit(p, label);
      for (auto& writer : writers) PS_RETURN_IF_ERROR(writer->Write(label, w.ids(), w.counts()));
    }
    for (auto& writer : writers) PS_RETURN_IF_ERROR(writer->Close());
  }
  return Status::Ok();
}

}  // namespace

Result<CtrReport> GenerateCtr(const CtrSpec& spec, const std::string& out_dir,
                              const CtrOutput& output) {
  PS_ASSIGN_OR_RETURN(CtrTruth truth, CtrTruth::Create(spec));
  PS_RETURN_IF_ERROR(CheckOutput(spec, output));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return IoError(out_dir + ": cannot create directory: " + ec.message());
  const auto start = std::chrono::steady_clock::now();
  std::vector<ZipfSampler> samplers;
  samplers.reserve(spec.fields.size());
  for (const CtrField& c : spec.fields) samplers.emplace_back(c.vocab, c.zipf);

  CtrReport report;
  report.num_features = truth.num_features();
  report.field_offsets = truth.offsets();
  const std::filesystem::path dir(out_dir);
  report.json_path = (dir / "ctr.json").string();
  for (CtrFormat f : output.formats) report.outputs.push_back({f, {}, {}});

  int64_t train_clicks = 0;
  PS_RETURN_IF_ERROR(WriteSplit(spec, truth, samplers, TrainSeed(spec.seed), spec.train_examples,
                                output, dir, "train", &report.outputs,
                                [&](float, uint8_t y) { train_clicks += y; }));
  if (spec.train_examples > 0) {
    report.train_click_rate =
        static_cast<double>(train_clicks) / static_cast<double>(spec.train_examples);
  }
  std::vector<float> probs;
  std::vector<uint8_t> labels;
  probs.reserve(static_cast<size_t>(spec.eval_examples));
  labels.reserve(probs.capacity());
  double logloss = 0, prob_sum = 0, clicks = 0;
  PS_RETURN_IF_ERROR(WriteSplit(spec, truth, samplers, EvalSeed(spec.seed), spec.eval_examples,
                                output, dir, "eval", &report.outputs, [&](float p, uint8_t y) {
                                  probs.push_back(p);
                                  labels.push_back(y);
                                  const double pc =
                                      std::clamp(static_cast<double>(p), 1e-7, 1.0 - 1e-7);
                                  logloss -= y ? std::log(pc) : std::log(1.0 - pc);
                                  prob_sum += p;
                                  clicks += y;
                                }));
  const auto n = static_cast<double>(probs.size());
  report.truth_eval_auc = CtrAuc(probs, labels);
  report.truth_eval_logloss = logloss / n;
  report.eval_click_rate = clicks / n;
  report.eval_mean_probability = prob_sum / n;
  report.train_path = report.outputs[0].train[0];
  report.eval_path = report.outputs[0].eval[0];
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const auto relative = [&](const std::vector<std::string>& paths) {
    std::vector<std::string> names;
    names.reserve(paths.size());
    for (const std::string& p : paths)
      names.push_back(std::filesystem::path(p).filename().string());
    return names;
  };
  Json j = Json::object();
  j["spec"] = CtrSpecToJson(spec);
  j["files"] =
      Json{{"train", relative({report.train_path})[0]}, {"eval", relative({report.eval_path})[0]}};
  j["num_features"] = report.num_features;
  j["field_offsets"] = report.field_offsets;
  if (output.formats[0] == CtrFormat::kLibSvm && output.files == 1) {
    Json data = CtrDataConfig(CtrFormat::kLibSvm, spec, report.field_offsets, {});
    data.erase("files");
    data["path"] = "train.libsvm";
    j["data_config"] = std::move(data);
  }
  Json outputs = Json::object();
  for (const CtrFiles& o : report.outputs) {
    outputs[CtrFormatName(o.format)] =
        Json{{"train_data", CtrDataConfig(o.format, spec, report.field_offsets, relative(o.train))},
             {"eval_data", CtrDataConfig(o.format, spec, report.field_offsets, relative(o.eval))}};
  }
  j["outputs"] = std::move(outputs);
  j["truth"] = Json{{"eval_auc", report.truth_eval_auc},
                    {"eval_logloss", report.truth_eval_logloss},
                    {"eval_click_rate", report.eval_click_rate},
                    {"eval_mean_probability", report.eval_mean_probability},
                    {"train_click_rate", report.train_click_rate}};
  j["seconds"] = report.seconds;
  OutFile out;
  PS_RETURN_IF_ERROR(out.Open(report.json_path, false));
  out.buffer() = j.dump(2) + "\n";
  PS_RETURN_IF_ERROR(out.Close());
  return report;
}

}  // namespace ps::data
