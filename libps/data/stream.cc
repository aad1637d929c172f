#include "libps/data/stream.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "libps/core/log.h"

namespace ps::data {
namespace {

// Stream ids of DeriveSeed's `epoch` argument that never collide with real epochs.
constexpr uint64_t kShuffleBufferStream = ~uint64_t{0};
// prefetch_batches 0: read ahead about this many examples (2 to 64 batches). Enough for
// the trainer to ride out the reader thread's scheduling gaps on a busy machine (tens of
// ms), small next to the shuffle buffer.
constexpr int64_t kAutoPrefetchExamples = 16384;

}  // namespace

Result<std::vector<std::string>> ExpandFiles(const std::vector<std::string>& patterns,
                                             const std::string& base_dir, const std::string& path) {
  if (patterns.empty()) return InvalidArgument(path + ": needs at least one file or pattern");
  std::vector<std::string> files;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string where = path + "[" + std::to_string(i) + "]";
    std::filesystem::path p(patterns[i]);
    if (patterns[i].empty()) return InvalidArgument(where + ": must not be empty");
    if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
    glob_t g{};
    const int rc = ::glob(p.c_str(), GLOB_ERR, nullptr, &g);
    size_t found = 0;
    if (rc == 0) {
      for (size_t k = 0; k < g.gl_pathc; ++k) {
        std::error_code ec;
        if (std::filesystem::is_regular_file(g.gl_pathv[k], ec)) {
          files.emplace_back(g.gl_pathv[k]);
          ++found;
        }
      }
    }
    ::globfree(&g);
    if (rc == GLOB_ABORTED)
      return InvalidArgument(where + ": '" + p.string() + "': cannot read a directory on the way");
    if (rc == GLOB_NOSPACE) return Internal(where + ": glob: out of memory");
    if (found == 0) return InvalidArgument(where + ": '" + p.string() + "' matches no file");
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

Status ErrorPolicy::Handle(Status st) {
  if (st.ok() || !skip_) return st;
  const int64_t n = skipped_.fetch_add(1) + 1;
  if (n <= 100 || n % 1000 == 0) {
    PS_LOG(Warning) << path_ << ": skipped a record (" << n << " so far): " << st.message();
  }
  return Status::Ok();
}

Status ReadRecords(const RecordFormat& format, const std::string& file, size_t file_index,
                   const std::function<bool(size_t, int64_t)>& keep, ErrorPolicy& policy, Row* row,
                   const std::function<bool(Row&)>& emit) {
  PS_ASSIGN_OR_RETURN(auto reader, format.Open(file));
  for (int64_t index = 0;; ++index) {
    Result<bool> more = reader->Advance();
    if (!more.ok()) {
      // A record that cannot be framed belongs to its owner; one that ends the file
      // ends it for every shard.
      if (reader->resumable() && !keep(file_index, index)) continue;
      PS_RETURN_IF_ERROR(policy.Handle(more.status()));
      if (!reader->resumable()) return Status::Ok();
      continue;
    }
    if (!*more) return Status::Ok();
    if (!keep(file_index, index)) continue;
    Status parsed = reader->Parse(row);
    if (!parsed.ok()) {
      PS_RETURN_IF_ERROR(policy.Handle(std::move(parsed)));
      continue;
    }
    if (!emit(*row)) return Status::Ok();
  }
}

StreamingDataset::StreamingDataset(std::shared_ptr<const RecordFormat> format,
                                   std::vector<std::string> files, StreamOptions stream,
                                   DatasetOptions options)
    : format_(std::move(format)),
      files_(std::move(files)),
      stream_(std::move(stream)),
      options_(std::move(options)),
      policy_(stream_.skip_errors, stream_.path) {
  const auto shards = static_cast<size_t>(options_.num_shards);
  const auto shard = static_cast<size_t>(options_.shard_index);
  by_record_ = files_.size() < shards;
  for (size_t i = 0; i < files_.size(); ++i) {
    if (by_record_ || i % shards == shard) {
      shard_files_.push_back(files_[i]);
      shard_index_.push_back(i);
    }
  }
  rng_ = Rng(
      DeriveSeed(options_.seed, kShuffleBufferStream, static_cast<uint64_t>(options_.shard_index)));
}

Result<std::unique_ptr<StreamingDataset>> StreamingDataset::Create(
    std::shared_ptr<const RecordFormat> format, std::vector<std::string> files,
    StreamOptions stream, DatasetOptions options) {
  if (options.num_shards < 1 || options.shard_index < 0 ||
      options.shard_index >= options.num_shards) {
    return InvalidArgument("shard_index " + std::to_string(options.shard_index) +
                           " is out of range for " + std::to_string(options.num_shards) +
                           " shards");
  }
  if (stream.prefetch_batches < 0)
    return InvalidArgument(stream.path + ": prefetch_batches must not be negative");
  std::unique_ptr<StreamingDataset> d(new StreamingDataset(std::move(format), std::move(files),
                                                           std::move(stream), std::move(options)));
  d->thread_ = std::thread([p = d.get()] { p->Run(); });
  std::unique_lock lock(d->mu_);
  d->cv_.wait(lock, [&] { return d->first_row_ || d->finished_; });
  if (!d->error_.ok()) return d->error_;
  return d;
}

StreamingDataset::~StreamingDataset() {
  stopping_ = true;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StreamingDataset::Run() {
  Status st = Produce();
  std::lock_guard lock(mu_);
  if (!st.ok() && st.code() != Code::kAborted) error_ = st;
  finished_ = true;
  cv_.notify_all();
}

Status StreamingDataset::Produce() {
  const auto shards = static_cast<size_t>(options_.num_shards);
  const auto shard = static_cast<size_t>(options_.shard_index);
  // While stopping, every record is "kept" so that emit sees it and ends the read.
  const auto keep = [&](size_t file, int64_t record) {
    return !by_record_ || (file + static_cast<size_t>(record)) % shards == shard ||
           stopping_.load();
  };
  Row row;
  bool stopped = false;
  const auto emit = [&](Row& r) {
    if (!first_row_) {
      std::lock_guard lock(mu_);
      first_row_ = true;
      cv_.notify_all();
    }
    stopped = stopping_.load() || !Emit(r);
    return !stopped;
  };
  for (int64_t epoch = 0;; ++epoch) {
    std::vector<size_t> order(shard_files_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (options_.shuffle) {
      Rng rng(DeriveSeed(options_.seed, static_cast<uint64_t>(epoch),
                         static_cast<uint64_t>(options_.shard_index)));
      Shuffle(order, rng);
    }
    const bool had_rows = first_row_;
    for (size_t i : order) {
      PS_RETURN_IF_ERROR(
          ReadRecords(*format_, shard_files_[i], shard_index_[i], keep, policy_, &row, emit));
      if (stopped) return Aborted("stopped");
    }
    if (!options_.repeat) break;
    if (!had_rows && !first_row_) {
      return InvalidArgument(
          stream_.path + ": shard " + std::to_string(options_.shard_index) + " of " +
          std::to_string(options_.num_shards) + " has no examples (" +
          std::to_string(shard_files_.size()) + " of " + std::to_string(files_.size()) +
          " file(s)" + (by_record_ ? ", split by record" : "") +
          (policy_.skipped() > 0 ? ", " + std::to_string(policy_.skipped()) + " skipped" : "") +
          ")");
    }
  }
  // The end of a single pass: drain the buffer in random order, then the open batch.
  while (!buffer_.empty()) {
    const size_t j = static_cast<size_t>(rng_.Below(buffer_.size()));
    if (!AddToBatch(buffer_[j])) return Aborted("stopped");
    std::swap(buffer_[j], buffer_.back());
    buffer_.pop_back();
  }
  if (open_.size > 0 && !Flush()) return Aborted("stopped");
  return Status::Ok();
}

bool StreamingDataset::Emit(Row& row) {
  const auto capacity = static_cast<size_t>(std::max<int64_t>(stream_.shuffle_buffer, 1));
  if (!options_.shuffle || capacity <= 1) return AddToBatch(row);
  if (buffer_.size() < capacity) {
    buffer_.push_back(std::move(row));
    row = Row();
    return true;
  }
  const size_t j = static_cast<size_t>(rng_.Below(capacity));
  if (!AddToBatch(buffer_[j])) return false;
  std::swap(buffer_[j], row);  // row keeps the emitted one's capacity for the next parse
  return true;
}

bool StreamingDataset::AddToBatch(const Row& row) {
  if (open_.size == 0) open_ = StartBatch(format_->info());
  AppendRow(row, format_->has_values(), &open_);
  int64_t batch_size;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return batch_size_ > 0 || stop_; });
    if (stop_) return false;
    batch_size = batch_size_;
  }
  return open_.size < batch_size || Flush();
}

bool StreamingDataset::Flush() {
  std::unique_lock lock(mu_);
  const int64_t capacity =
      stream_.prefetch_batches > 0
          ? stream_.prefetch_batches
          : std::clamp<int64_t>((kAutoPrefetchExamples + batch_size_ - 1) / batch_size_, 2, 64);
  cv_.wait(lock, [&] { return static_cast<int64_t>(queue_.size()) < capacity || stop_; });
  if (stop_) return false;
  queue_.push_back(std::move(open_));
  open_ = model::Batch();
  cv_.notify_all();
  return true;
}

bool StreamingDataset::done() const {
  std::lock_guard lock(mu_);
  return !options_.repeat && finished_ && error_.ok() && queue_.empty();
}

Result<model::Batch> StreamingDataset::Next(int64_t batch_size) {
  if (batch_size <= 0)
    return InvalidArgument("batch size must be positive, got " + std::to_string(batch_size));
  std::unique_lock lock(mu_);
  if (batch_size_ == 0) {
    batch_size_ = batch_size;
    cv_.notify_all();
  }
  model::Batch out = StartBatch(format_->info());
  while (out.size < batch_size) {
    cv_.wait(lock, [&] { return !queue_.empty() || finished_; });
    if (!error_.ok()) return error_;
    if (queue_.empty()) break;  // the end of a single pass
    model::Batch& front = queue_.front();
    if (cursor_ == 0 && out.size == 0 && front.size == batch_size) {
      out = std::move(front);
    } else {
      const int64_t take =
          std::min(batch_size - out.size, front.size - static_cast<int64_t>(cursor_));
      AppendRows(front, static_cast<int64_t>(cursor_), take, &out);
      cursor_ += static_cast<size_t>(take);
      if (cursor_ < static_cast<size_t>(front.size)) continue;
    }
    cursor_ = 0;
    queue_.pop_front();
    cv_.notify_all();
  }
  seen_ += out.size;
  return out;
}

}  // namespace ps::data
