#include "libps/data/dataset.h"

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "libps/core/log.h"
#include "libps/data/byte_stream.h"
#include "libps/data/lease_reader.h"
#include "libps/data/libsvm.h"
#include "libps/data/random.h"
#include "libps/data/readers.h"
#include "libps/data/stream.h"
#include "libps/data/synthetic.h"

namespace ps::data {
namespace {

std::string Resolve(const std::string& base_dir, const std::string& p) {
  std::filesystem::path path(p);
  if (path.is_relative() && !base_dir.empty())
    return (std::filesystem::path(base_dir) / path).string();
  return p;
}

Status GetPath(JsonReader& r, std::string_view key, const std::string& base_dir, std::string* out) {
  PS_RETURN_IF_ERROR(r.Get(key, out));
  if (out->empty()) return InvalidArgument(r.Path(key) + ": must not be empty");
  *out = Resolve(base_dir, *out);
  return Status::Ok();
}

Status GetClasses(JsonReader& r, int* classes) {
  PS_RETURN_IF_ERROR(r.GetOr("classes", classes));
  if (*classes < 0 || *classes == 1) {
    return InvalidArgument(r.Path("classes") + ": must be 0 (infer) or at least 2, got " +
                           std::to_string(*classes));
  }
  return Status::Ok();
}

Result<ExampleTable> LoadIdx(JsonReader& r, const std::string& base_dir) {
  std::string images, labels;
  int classes = 0;
  PS_RETURN_IF_ERROR(GetPath(r, "images", base_dir, &images));
  PS_RETURN_IF_ERROR(GetPath(r, "labels", base_dir, &labels));
  PS_RETURN_IF_ERROR(GetClasses(r, &classes));
  PS_RETURN_IF_ERROR(r.Finish());
  return ReadIdx(images, labels, classes);
}

Result<ExampleTable> LoadLibSvm(JsonReader& r, const std::string& base_dir) {
  std::string file;
  LibSvmOptions o;
  PS_RETURN_IF_ERROR(GetPath(r, "path", base_dir, &file));
  PS_RETURN_IF_ERROR(r.Get("num_features", &o.num_features));
  PS_RETURN_IF_ERROR(r.GetOr("zero_based", &o.zero_based));
  PS_RETURN_IF_ERROR(r.GetOr("field_offsets", &o.field_offsets));
  if (r.Has("field_offsets") && o.field_offsets.empty()) {
    return InvalidArgument(r.Path("field_offsets") + ": must not be empty (omit it for one field)");
  }
  PS_RETURN_IF_ERROR(CheckLibSvmOptions(o, r.path() + "."));
  PS_RETURN_IF_ERROR(GetClasses(r, &o.classes));
  PS_RETURN_IF_ERROR(r.Finish());
  return ReadLibSvm(file, o);
}

Result<ExampleTable> LoadCsv(JsonReader& r, const std::string& base_dir) {
  std::string file;
  CsvOptions o;
  PS_RETURN_IF_ERROR(GetPath(r, "path", base_dir, &file));
  PS_RETURN_IF_ERROR(r.Get("label", &o.label));
  PS_RETURN_IF_ERROR(r.GetOr("dense", &o.dense));
  if (const Json* cats = r.Find("categorical"); cats != nullptr && !cats->is_null()) {
    const std::string cpath = r.Path("categorical");
    if (!cats->is_array()) {
      return InvalidArgument(cpath + ": expected an array, got " + std::string(cats->type_name()));
    }
    for (size_t i = 0; i < cats->size(); ++i) {
      const Json& e = (*cats)[i];
      const std::string epath = cpath + "[" + std::to_string(i) + "]";
      CsvCategorical c;
      if (e.is_string()) {
        c.column = e.get<std::string>();
      } else {
        JsonReader er(e, epath);
        if (!er.status().ok()) {
          return InvalidArgument(epath + ": expected a column name or an object, got " +
                                 std::string(e.type_name()));
        }
        PS_RETURN_IF_ERROR(er.Get("column", &c.column));
        std::vector<std::string> vocab;
        PS_RETURN_IF_ERROR(er.Get("vocabulary", &vocab));
        c.vocabulary = std::move(vocab);
        PS_RETURN_IF_ERROR(er.Finish());
      }
      o.categorical.push_back(std::move(c));
    }
  }
  if (r.Has("label_vocabulary")) {
    std::vector<std::string> lv;
    PS_RETURN_IF_ERROR(r.Get("label_vocabulary", &lv));
    if (lv.size() < 2) {
      return InvalidArgument(r.Path("label_vocabulary") + ": needs at least 2 labels");
    }
    o.label_vocabulary = std::move(lv);
  }
  PS_RETURN_IF_ERROR(GetClasses(r, &o.classes));
  std::string delimiter = ",";
  PS_RETURN_IF_ERROR(r.GetOr("delimiter", &delimiter));
  if (delimiter.size() != 1 || delimiter[0] == '"' || delimiter[0] == '\n') {
    return InvalidArgument(r.Path("delimiter") + ": must be one character other than '\"', got '" +
                           delimiter + "'");
  }
  o.delimiter = delimiter[0];
  PS_RETURN_IF_ERROR(r.Finish());
  return ReadCsv(file, o);
}

Result<ExampleTable> LoadStringFeatures(JsonReader& r) {
  int64_t examples = 0;
  uint64_t seed = 0;
  double oov_rate = 0.0;
  PS_RETURN_IF_ERROR(r.Get("examples", &examples));
  if (examples <= 0) {
    return InvalidArgument(r.Path("examples") + ": must be positive, got " +
                           std::to_string(examples));
  }
  PS_RETURN_IF_ERROR(r.GetOr("seed", &seed));
  PS_RETURN_IF_ERROR(r.GetOr("oov_rate", &oov_rate));
  if (!(oov_rate >= 0.0 && oov_rate <= 1.0)) {
    return InvalidArgument(r.Path("oov_rate") + ": must be in [0, 1], got " +
                           std::to_string(oov_rate));
  }
  PS_RETURN_IF_ERROR(r.Finish());
  return StringExamplesToTable(GenerateStringExamples(examples, seed, oov_rate));
}

// A streaming format loaded whole ("path" instead of "files").
Result<ExampleTable> LoadRecords(JsonReader& r, const RecordFormat& format, const std::string& file,
                                 bool skip_errors) {
  PS_RETURN_IF_ERROR(r.Finish());
  ExampleTable t;
  t.info = format.info();
  t.sparse.resize(t.info.field_vocab_sizes.size());
  for (SparseColumn& c : t.sparse) c.offsets.push_back(0);
  ErrorPolicy policy(skip_errors, r.path());
  Row row;
  PS_RETURN_IF_ERROR(ReadRecords(
      format, file, 0, [](size_t, int64_t) { return true; }, policy, &row,
      [&](Row& x) {
        AppendRow(x, format.has_values(), &t);
        return true;
      }));
  PS_RETURN_IF_ERROR(t.Validate());
  return t;
}

Status GetOnError(JsonReader& r, bool* skip) {
  std::string on_error = "fail";
  PS_RETURN_IF_ERROR(r.GetOr("on_error", &on_error));
  if (on_error != "fail" && on_error != "skip") {
    return InvalidArgument(r.Path("on_error") + ": must be \"fail\" or \"skip\", got \"" +
                           on_error + "\"");
  }
  *skip = on_error == "skip";
  return Status::Ok();
}

Result<std::vector<std::string>> GetPatterns(JsonReader& r) {
  const Json* files = r.Find("files");
  if (files->is_string()) return std::vector<std::string>{files->get<std::string>()};
  std::vector<std::string> patterns;
  PS_RETURN_IF_ERROR(r.Get("files", &patterns));
  return patterns;
}

constexpr const char* kFormats = "idx, libsvm, csv, string_features, tfrecord or criteo_tsv";

}  // namespace

Result<ExampleTable> LoadExamples(const Json& config, const std::string& path,
                                  const std::string& base_dir) {
  JsonReader r(config, path);
  PS_RETURN_IF_ERROR(r.status());
  std::string format;
  int64_t limit = 0;
  PS_RETURN_IF_ERROR(r.Get("format", &format));
  PS_RETURN_IF_ERROR(r.GetOr("limit", &limit));
  if (limit < 0) {
    return InvalidArgument(r.Path("limit") + ": must not be negative, got " +
                           std::to_string(limit));
  }
  if (r.Has("files")) {
    return InvalidArgument(r.Path("files") +
                           ": a streamed data set cannot be loaded whole; use \"path\"");
  }
  Result<ExampleTable> table = InvalidArgument(r.Path("format") + ": unknown format '" + format +
                                               "' (expected " + kFormats + ")");
  if (format == "idx") {
    table = LoadIdx(r, base_dir);
  } else if (format == "libsvm") {
    table = LoadLibSvm(r, base_dir);
  } else if (format == "csv") {
    table = LoadCsv(r, base_dir);
  } else if (format == "string_features") {
    table = LoadStringFeatures(r);
  } else if (format == "tfrecord" || format == "criteo_tsv") {
    std::string file;
    bool skip = false;
    PS_RETURN_IF_ERROR(GetPath(r, "path", base_dir, &file));
    PS_RETURN_IF_ERROR(GetOnError(r, &skip));
    PS_ASSIGN_OR_RETURN(auto record_format, MakeRecordFormat(format, r));
    table = LoadRecords(r, *record_format, file, skip);
  }
  if (!table.ok()) return table.status();
  if (limit > 0) table->Truncate(limit);
  return table;
}

namespace {

// A streamed data set's config ("files"), read and its files listed, nothing opened.
struct StreamPlan {
  std::unique_ptr<RecordFormat> format;
  std::vector<std::string> files;
  StreamOptions options;
  int64_t shard_bytes = kDefaultShardBytes;
  bool text = false;
  std::optional<FollowOptions> follow;
  std::vector<std::string> patterns;  // resolved against base_dir
};

Result<StreamPlan> PlanStream(const Json& config, const std::string& path,
                              const std::string& base_dir) {
  JsonReader r(config, path);
  PS_RETURN_IF_ERROR(r.status());
  StreamPlan plan;
  std::string format;
  PS_RETURN_IF_ERROR(r.Get("format", &format));
  if (r.Has("path"))
    return InvalidArgument(path + ": give \"path\" (in memory) or \"files\" (streamed), not both");
  if (r.Has("limit")) return InvalidArgument(r.Path("limit") + ": not supported with \"files\"");
  StreamOptions& stream = plan.options;
  stream.path = path;
  PS_ASSIGN_OR_RETURN(std::vector<std::string> patterns, GetPatterns(r));
  PS_RETURN_IF_ERROR(r.GetOr("shuffle_buffer", &stream.shuffle_buffer));
  if (stream.shuffle_buffer < 0 || stream.shuffle_buffer > (int64_t{1} << 27)) {
    return InvalidArgument(r.Path("shuffle_buffer") + ": must be in 0..2^27, got " +
                           std::to_string(stream.shuffle_buffer));
  }
  PS_RETURN_IF_ERROR(r.GetOr("prefetch_batches", &stream.prefetch_batches));
  if (stream.prefetch_batches < 0 || stream.prefetch_batches > 1024) {
    return InvalidArgument(r.Path("prefetch_batches") + ": must be in 0..1024 (0: automatic)");
  }
  PS_RETURN_IF_ERROR(GetOnError(r, &stream.skip_errors));
  PS_RETURN_IF_ERROR(r.GetOr("shard_bytes", &plan.shard_bytes));
  if (plan.shard_bytes < 1 || plan.shard_bytes > (int64_t{1} << 50)) {
    return InvalidArgument(r.Path("shard_bytes") + ": must be in 1..2^50, got " +
                           std::to_string(plan.shard_bytes));
  }
  plan.text = format == "libsvm" || format == "criteo_tsv";
  PS_ASSIGN_OR_RETURN(plan.format, MakeRecordFormat(format, r));
  if (plan.format == nullptr) {
    return InvalidArgument(r.Path("files") + ": format '" + format +
                           "' does not stream (tfrecord, criteo_tsv and libsvm do); use \"path\"");
  }
  if (const Json* follow = r.Find("follow")) {
    PS_ASSIGN_OR_RETURN(plan.follow, ParseFollow(*follow, r.Path("follow")));
  }
  PS_RETURN_IF_ERROR(r.Finish());
  if (plan.follow) {
    // The files arrive while the job runs: nothing is listed now (FileFollower).
    if (patterns.empty()) return InvalidArgument(r.Path("files") + ": needs at least one pattern");
    for (const std::string& p : patterns) {
      if (p.empty()) return InvalidArgument(r.Path("files") + ": a pattern must not be empty");
      std::filesystem::path full(p);
      if (full.is_relative() && !base_dir.empty()) full = std::filesystem::path(base_dir) / full;
      plan.patterns.push_back(full.string());
    }
    return plan;
  }
  PS_ASSIGN_OR_RETURN(plan.files, ExpandFiles(patterns, base_dir, r.Path("files")));
  return plan;
}

}  // namespace

Result<std::unique_ptr<Dataset>> OpenDataset(const Json& config, const std::string& path,
                                             DatasetOptions options) {
  if (!config.is_object() || !config.contains("files")) {
    PS_ASSIGN_OR_RETURN(ExampleTable table, LoadExamples(config, path, options.base_dir));
    PS_ASSIGN_OR_RETURN(auto d, InMemoryDataset::Create(std::move(table), std::move(options)));
    return std::unique_ptr<Dataset>(std::move(d));
  }
  PS_ASSIGN_OR_RETURN(StreamPlan plan, PlanStream(config, path, options.base_dir));
  if (plan.follow) {
    return InvalidArgument(path +
                           ".follow: only training data leased by the chief (async and "
                           "bounded-staleness mode) can follow files as they arrive");
  }
  PS_ASSIGN_OR_RETURN(auto d,
                      StreamingDataset::Create(std::move(plan.format), std::move(plan.files),
                                               std::move(plan.options), std::move(options)));
  return std::unique_ptr<Dataset>(std::move(d));
}

Result<StreamedData> PlanStreamedData(const Json& config, const std::string& path,
                                      const std::string& base_dir, bool make_shards) {
  PS_ASSIGN_OR_RETURN(StreamPlan plan, PlanStream(config, path, base_dir));
  StreamedData d;
  if (make_shards) {
    auto shards = MakeShards(plan.files, plan.text, plan.shard_bytes);
    if (!shards.ok()) return shards.status().WithContext(path);
    d.shards = std::move(*shards);
  }
  d.format = std::move(plan.format);
  d.files = std::move(plan.files);
  d.follow = plan.follow;
  d.patterns = std::move(plan.patterns);
  d.text = plan.text;
  d.shard_bytes = plan.shard_bytes;
  d.options = std::move(plan.options);
  return d;
}

Status CheckStreamedData(const Json& config, const std::string& path, const std::string& base_dir) {
  if (!config.is_object() || !config.contains("files")) return Status::Ok();
  return PlanStream(config, path, base_dir).status();
}

Status CheckDataFiles(const Json& config, const std::string& path, const std::string& base_dir) {
  if (!config.is_object()) return InvalidArgument(path + ": must be a JSON object");
  if (config.contains("files")) return CheckStreamedData(config, path, base_dir);
  for (const char* key : {"path", "images", "labels"}) {
    auto it = config.find(key);
    if (it == config.end() || !it->is_string()) continue;  // the load names what is wrong
    const std::string where = path + "." + key;
    const std::string file = Resolve(base_dir, it->get<std::string>());
    std::error_code ec;
    const auto st = std::filesystem::status(file, ec);
    if (!std::filesystem::exists(st))
      return InvalidArgument(where + ": '" + file + "': no such file");
    if (std::filesystem::is_directory(st))
      return InvalidArgument(where + ": '" + file + "': is a directory, not a file");
    auto stream = ByteStream::Open(file);
    if (!stream.ok()) return stream.status().WithContext(where);
  }
  return Status::Ok();
}

InMemoryDataset::InMemoryDataset(ExampleTable table, DatasetOptions options)
    : table_(std::move(table)), options_(std::move(options)) {
  for (int64_t i = options_.shard_index; i < table_.size(); i += options_.num_shards) {
    shard_.push_back(i);
  }
}

Result<std::unique_ptr<InMemoryDataset>> InMemoryDataset::Create(ExampleTable table,
                                                                 DatasetOptions options) {
  if (options.num_shards < 1) {
    return InvalidArgument("num_shards must be at least 1, got " +
                           std::to_string(options.num_shards));
  }
  if (options.shard_index < 0 || options.shard_index >= options.num_shards) {
    return InvalidArgument("shard_index " + std::to_string(options.shard_index) +
                           " is out of range for " + std::to_string(options.num_shards) +
                           " shards");
  }
  PS_RETURN_IF_ERROR(table.Validate());
  std::unique_ptr<InMemoryDataset> d(new InMemoryDataset(std::move(table), std::move(options)));
  if (d->options_.repeat && d->shard_.empty()) {
    return InvalidArgument("shard " + std::to_string(d->options_.shard_index) + " of " +
                           std::to_string(d->options_.num_shards) +
                           " has no examples (the data set has " +
                           std::to_string(d->table_.size()) + ")");
  }
  d->StartEpoch(0);
  return d;
}

int64_t InMemoryDataset::epoch() const { return shard_.empty() ? 0 : seen_ / shard_size(); }

void InMemoryDataset::StartEpoch(int64_t epoch) {
  order_ = shard_;
  if (options_.shuffle) {
    Rng rng(DeriveSeed(options_.seed, static_cast<uint64_t>(epoch),
                       static_cast<uint64_t>(options_.shard_index)));
    Shuffle(order_, rng);
  }
  order_epoch_ = epoch;
}

Status InMemoryDataset::SkipTo(int64_t examples) {
  if (examples < 0) return InvalidArgument("SkipTo: negative example count");
  if (!options_.repeat && examples > shard_size()) {
    return InvalidArgument("SkipTo: " + std::to_string(examples) + " is past the end of a " +
                           std::to_string(shard_size()) + "-example single pass");
  }
  seen_ = examples;
  return Status::Ok();
}

Result<model::Batch> InMemoryDataset::Next(int64_t batch_size) {
  if (batch_size <= 0) {
    return InvalidArgument("batch size must be positive, got " + std::to_string(batch_size));
  }
  model::Batch batch = table_.StartBatch();
  const int64_t n = shard_size();
  int64_t want = batch_size;
  if (!options_.repeat) want = std::min(want, n - seen_);
  picked_.clear();
  for (int64_t k = 0; k < want; ++k) {
    int64_t e = seen_ / n;
    if (e != order_epoch_) StartEpoch(e);
    picked_.push_back(order_[static_cast<size_t>(seen_ % n)]);
    ++seen_;
  }
  batch.labels.reserve(picked_.size());
  table_.AppendTo(picked_, &batch);
  return batch;
}

namespace {

class ReadAheadDataset : public Dataset {
 public:
  explicit ReadAheadDataset(std::unique_ptr<Dataset> inner)
      : inner_(std::move(inner)), done_(inner_->done()), skipped_(inner_->skipped()) {}
  ~ReadAheadDataset() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (reader_.joinable()) reader_.join();
  }

  Result<model::Batch> Next(int64_t batch_size) override {
    if (batch_size <= 0) {
      return InvalidArgument("batch size must be positive, got " + std::to_string(batch_size));
    }
    std::unique_lock lock(mu_);
    if (batch_size_ == 0) {
      batch_size_ = batch_size;
      wanted_ = true;
      try {
        reader_ = std::thread([this] { Read(); });
      } catch (const std::system_error& e) {
        // No thread to be had (a process or cgroup limit): read on the caller's thread.
        PS_LOG(Warning) << "cannot start a thread to read training data ahead (" << e.what()
                        << "); reading each batch when it is needed";
        wanted_ = false;
        direct_ = true;
      }
    } else if (batch_size != batch_size_) {
      return InvalidArgument("batch size " + std::to_string(batch_size) + " after " +
                             std::to_string(batch_size_) + " from a data set that reads ahead");
    }
    Ready r;
    if (direct_) {
      lock.unlock();  // no reader thread: inner_ is the caller's alone
      r = ReadOne();
    } else {
      cv_.wait(lock, [&] { return ready_.has_value(); });
      r = std::move(*ready_);
      ready_.reset();
      wanted_ = true;  // the next batch, while the caller uses this one
      lock.unlock();
      cv_.notify_all();
    }
    if (r.batch.ok()) seen_.fetch_add(r.batch->size, std::memory_order_relaxed);
    done_.store(r.done, std::memory_order_relaxed);
    skipped_.store(r.skipped, std::memory_order_relaxed);
    return std::move(r.batch);
  }
  const DatasetInfo& info() const override { return inner_->info(); }
  int64_t examples_seen() const override { return seen_.load(std::memory_order_relaxed); }
  bool done() const override { return done_.load(std::memory_order_relaxed); }
  int64_t skipped() const override { return skipped_.load(std::memory_order_relaxed); }

 private:
  struct Ready {
    Result<model::Batch> batch = model::Batch{};
    bool done = false;    // inner's, right after this batch
    int64_t skipped = 0;  // likewise
  };

  // The next batch of inner_, with inner_'s state right after it.
  Ready ReadOne() { return Ready{inner_->Next(batch_size_), inner_->done(), inner_->skipped()}; }

  // The reader thread: one batch each time one is wanted. inner_ is used by this thread
  // only, once it has started.
  void Read() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || wanted_; });
      if (stop_) return;
      wanted_ = false;
      lock.unlock();
      Ready r = ReadOne();
      lock.lock();
      ready_.emplace(std::move(r));
      cv_.notify_all();
    }
  }

  const std::unique_ptr<Dataset> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t batch_size_ = 0;      // the first Next's; guarded by mu_ (fixed once set)
  bool wanted_ = false;         // guarded by mu_: the reader should read a batch
  bool stop_ = false;           // guarded by mu_
  bool direct_ = false;         // guarded by mu_ (fixed once set): no reader thread, read in Next
  std::optional<Ready> ready_;  // guarded by mu_
  std::thread reader_;
  std::atomic<int64_t> seen_{0};
  std::atomic<bool> done_{false};
  std::atomic<int64_t> skipped_{0};
};

}  // namespace

std::unique_ptr<Dataset> ReadAhead(std::unique_ptr<Dataset> inner) {
  return std::make_unique<ReadAheadDataset>(std::move(inner));
}

}  // namespace ps::data
