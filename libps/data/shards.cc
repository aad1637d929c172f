#include "libps/data/shards.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "libps/data/byte_stream.h"
#include "libps/data/random.h"

namespace ps::data {
namespace {

// Stream id of DeriveSeed's `shard` argument for the shard order (not a worker's shard).
constexpr uint64_t kShardOrderStream = ~uint64_t{0} - 1;

Result<bool> IsGzip(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return InputErrno(path, "cannot open file", errno);
  unsigned char magic[2] = {0, 0};
  const size_t n = std::fread(magic, 1, 2, f);
  std::fclose(f);
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

}  // namespace

Result<std::vector<Shard>> MakeShards(const std::vector<std::string>& files, bool text,
                                      int64_t shard_bytes) {
  if (shard_bytes < 1)
    return InvalidArgument("shard_bytes must be positive, got " + std::to_string(shard_bytes));
  std::vector<Shard> shards;
  for (size_t i = 0; i < files.size(); ++i) {
    struct stat st {};
    if (::stat(files[i].c_str(), &st) != 0) return InputErrno(files[i], "cannot stat file", errno);
    const auto size = static_cast<uint64_t>(st.st_size);
    const auto file = static_cast<uint32_t>(i);
    bool split = text && size > static_cast<uint64_t>(shard_bytes);
    if (split) {
      PS_ASSIGN_OR_RETURN(bool gzip, IsGzip(files[i]));
      split = !gzip;
    }
    if (!split) {
      shards.push_back(Shard{file, 0, kWholeFile, false});
      continue;
    }
    for (uint64_t a = 0; a < size; a += static_cast<uint64_t>(shard_bytes)) {
      const uint64_t b = std::min(size, a + static_cast<uint64_t>(shard_bytes));
      // The last range reaches past the end: lines appended meanwhile are read too.
      shards.push_back(Shard{file, a, b == size ? kWholeFile : b, true});
    }
  }
  return shards;
}

std::vector<uint32_t> EpochOrder(size_t count, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<uint32_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = static_cast<uint32_t>(i);
  if (shuffle) {
    Rng rng(DeriveSeed(seed, static_cast<uint64_t>(epoch), kShardOrderStream));
    Shuffle(order, rng);
  }
  return order;
}

ShardQueue::ShardQueue(Options options) : options_(std::move(options)) {}

int64_t ShardQueue::limit() const {
  if (options_.follow) return shard_base_ + static_cast<int64_t>(follow_shards_.size());
  const auto s = static_cast<int64_t>(options_.shards.size());
  return options_.epochs ? *options_.epochs * s : INT64_MAX;
}

uint32_t ShardQueue::ShardAt(int64_t seq) {
  if (options_.follow) return static_cast<uint32_t>(seq);
  const auto s = static_cast<int64_t>(options_.shards.size());
  const int64_t epoch = seq / s;
  if (epoch != order_epoch_) {
    order_ = EpochOrder(options_.shards.size(), options_.seed, epoch, options_.shuffle);
    order_epoch_ = epoch;
  }
  return order_[static_cast<size_t>(seq % s)];
}

bool ShardQueue::HasWork(const Leased& l) const {
  return !l.gaps.empty() || !l.total || l.next < *l.total;
}

Lease ShardQueue::TakeFrom(int64_t seq, Leased& l, int worker, int64_t records) {
  Lease lease{seq, l.shard, l.base_byte, l.base_record, 0, records, generation_};
  if (!l.gaps.empty()) {
    auto g = l.gaps.begin();
    lease.start = g->first;
    lease.take = std::min(records, g->second - g->first);
    const int64_t rest = g->first + lease.take;
    const int64_t end = g->second;
    l.gaps.erase(g);
    if (rest < end) l.gaps.emplace(rest, end);
  } else {
    lease.start = l.next;
    if (l.total) lease.take = std::min(records, *l.total - l.next);
    l.next += lease.take;
  }
  l.owner = worker;
  l.in_flight += 1;
  in_flight_ += 1;
  return lease;
}

std::optional<Lease> ShardQueue::Take(int worker, int64_t records) {
  records = std::max<int64_t>(records, 1);
  // A shard this worker holds (its reader is there), oldest first.
  for (auto& [seq, l] : leased_) {
    if (l.owner == worker && HasWork(l)) return TakeFrom(seq, l, worker, records);
  }
  // A shard nobody holds any more (its holder gave a pack up, or the queue was restored).
  for (auto& [seq, l] : leased_) {
    if (l.owner < 0 && HasWork(l)) return TakeFrom(seq, l, worker, records);
  }
  if (next_seq_ < limit()) {
    const int64_t seq = next_seq_++;
    Leased l;
    l.shard = ShardAt(seq);
    l.base_byte = shard(l.shard).begin;
    auto [it, _] = leased_.emplace(seq, l);
    return TakeFrom(seq, it->second, worker, records);
  }
  // The sequence is all leased: share another worker's shard (the oldest first).
  for (auto& [seq, l] : leased_) {
    if (HasWork(l)) return TakeFrom(seq, l, worker, records);
  }
  return std::nullopt;
}

void ShardQueue::Ack(const Lease& lease, const PackEnd& end) {
  auto it = leased_.find(lease.seq);
  if (lease.generation != generation_ || it == leased_.end()) return;
  Leased& l = it->second;
  l.in_flight -= 1;
  in_flight_ -= 1;
  const int64_t stop = lease.start + end.records;
  if (end.end_of_shard && !l.total) {
    const int64_t total = end.total >= 0 ? std::min(end.total, stop) : stop;
    l.total = total;
    records_counted_ += total;
    // What was given out past the end holds nothing.
    l.next = std::min(l.next, total);
    for (auto g = l.gaps.begin(); g != l.gaps.end();) {
      if (g->first >= total) {
        g = l.gaps.erase(g);
      } else {
        g->second = std::min(g->second, total);
        ++g;
      }
    }
  }
  if (end.records > 0) l.acked[lease.start] = Acked{stop, end.end_byte};
  // A pack that read fewer records than it was given without reaching the end: the rest
  // is given out again.
  if (!end.end_of_shard && end.records < lease.take) l.gaps.emplace(stop, lease.start + lease.take);
  for (auto a = l.acked.find(l.base_record); a != l.acked.end(); a = l.acked.find(l.base_record)) {
    l.base_record = a->second.end;
    l.base_byte = a->second.end_byte;
    l.acked.erase(a);
  }
  MaybeDone(lease.seq);
}

void ShardQueue::Release(const Lease& lease) {
  auto it = leased_.find(lease.seq);
  if (lease.generation != generation_ || it == leased_.end()) return;
  Leased& l = it->second;
  l.in_flight -= 1;
  in_flight_ -= 1;
  l.owner = -1;
  int64_t end = lease.start + lease.take;
  if (l.total) end = std::min(end, *l.total);
  if (lease.start < end) l.gaps.emplace(lease.start, end);
  MaybeDone(lease.seq);
}

void ShardQueue::MaybeDone(int64_t seq) {
  auto it = leased_.find(seq);
  const Leased& l = it->second;
  if (!l.total || l.base_record < *l.total || l.in_flight > 0) return;
  leased_.erase(it);
  done_after_.insert(seq);
  while (done_after_.count(done_prefix_) > 0) done_after_.erase(done_prefix_++);
  if (options_.follow) FollowDone(seq);
}

bool ShardQueue::CanTake() const {
  if (next_seq_ < limit()) return true;
  for (const auto& [seq, l] : leased_) {
    if (HasWork(l)) return true;
  }
  return false;
}

const Shard& ShardQueue::shard(uint32_t index) const {
  if (options_.follow) return follow_shards_[static_cast<size_t>(index - shard_base_)];
  return options_.shards[index];
}

const std::string& ShardQueue::file(uint32_t index) const {
  if (options_.follow) return follow_files_[static_cast<size_t>(index - file_base_)].path;
  return options_.files[index];
}

void ShardQueue::Append(const std::string& path, double arrival, std::vector<Shard> shards) {
  const auto index = static_cast<uint32_t>(file_base_ + static_cast<int64_t>(follow_files_.size()));
  follow_files_.push_back(FileEntry{path, arrival, static_cast<int64_t>(shards.size())});
  for (Shard& s : shards) {
    s.file = index;
    follow_shards_.push_back(s);
  }
  if (shards.empty()) {
    files_done_.push_back(arrival);
    files_done_total_ += 1;
  }
  // A file with no shard and nothing before it waiting is dropped at once.
  FollowDone(-1);
}

void ShardQueue::FollowDone(int64_t seq) {
  if (seq >= 0) {
    FileEntry& f = follow_files_[static_cast<size_t>(
        follow_shards_[static_cast<size_t>(seq - shard_base_)].file - file_base_)];
    if (--f.shards_left == 0) {
      files_done_.push_back(f.arrival);
      files_done_total_ += 1;
    }
  }
  while (shard_base_ < done_prefix_ && !follow_shards_.empty()) {
    follow_shards_.pop_front();
    shard_base_ += 1;
  }
  while (!follow_files_.empty() && follow_files_.front().shards_left == 0 &&
         (follow_shards_.empty() || follow_shards_.front().file > file_base_)) {
    follow_files_.pop_front();
    file_base_ += 1;
  }
}

std::vector<double> ShardQueue::TakeFilesDone() {
  std::vector<double> out;
  out.swap(files_done_);
  return out;
}

int64_t ShardQueue::files_waiting() const {
  return std::count_if(follow_files_.begin(), follow_files_.end(),
                       [](const FileEntry& f) { return f.shards_left > 0; });
}

bool ShardQueue::Exhausted() const { return options_.epochs && done_prefix_ >= limit(); }

bool ShardQueue::AllGivenOut() const {
  if (!options_.epochs || next_seq_ < limit()) return false;
  for (const auto& [seq, l] : leased_) {
    if (HasWork(l)) return false;
  }
  return true;
}

double ShardQueue::EpochsDone() const {
  if (options_.follow || options_.shards.empty()) return 0;
  const auto done = static_cast<double>(done_prefix_ + static_cast<int64_t>(done_after_.size()));
  return done / static_cast<double>(options_.shards.size());
}

void ShardQueue::Reset() {
  generation_ += 1;
  done_prefix_ = 0;
  done_after_.clear();
  next_seq_ = 0;
  leased_.clear();
  in_flight_ = 0;
  records_counted_ = 0;
  follow_shards_.clear();
  follow_files_.clear();
  shard_base_ = file_base_ = 0;
  files_done_.clear();
  files_done_total_ = 0;
}

Json ShardQueue::Save() const {
  Json shards = Json::array();
  for (const Shard& s : options_.follow ? std::vector<Shard>() : options_.shards) {
    shards.push_back(
        Json::array({s.file, s.begin, s.end == kWholeFile ? Json(nullptr) : Json(s.end)}));
  }
  Json leased = Json::array();
  for (const auto& [seq, l] : leased_) {
    Json acked = Json::array();
    for (const auto& [start, a] : l.acked) acked.push_back(Json::array({start, a.end, a.end_byte}));
    Json gaps = Json::array();
    for (const auto& [start, end] : l.gaps) gaps.push_back(Json::array({start, end}));
    // Leases in flight are saved as given back: what lies in [base_record, next) and is
    // neither acknowledged nor given back already is written as given back.
    if (l.in_flight > 0) {
      std::map<int64_t, int64_t> covered(l.gaps);
      for (const auto& [start, a] : l.acked) covered[start] = a.end;
      int64_t at = l.base_record;
      for (const auto& [start, end] : covered) {
        if (start > at) gaps.push_back(Json::array({at, start}));
        at = std::max(at, end);
      }
      if (at < l.next) gaps.push_back(Json::array({at, l.next}));
    }
    const int64_t next = l.next;
    leased.push_back(Json{{"seq", seq},
                          {"record", l.base_record},
                          {"byte", l.base_byte},
                          {"next", next},
                          {"total", l.total ? Json(*l.total) : Json(nullptr)},
                          {"acked", acked},
                          {"gaps", gaps}});
  }
  Json out{{"seed", options_.seed},
           {"done", done_prefix_},
           {"done_after", Json(std::vector<int64_t>(done_after_.begin(), done_after_.end()))},
           {"next", next_seq_},
           {"records_counted", records_counted_},
           {"leased", leased}};
  if (options_.follow) return SaveFollow(std::move(out));
  out["shard_list"] = std::move(shards);
  return out;
}

// The shards and files not dropped yet: [file, begin, end (null: whole), lines] and
// [path, arrival, shards left].
Json ShardQueue::SaveFollow(Json out) const {
  Json shards = Json::array();
  for (const Shard& s : follow_shards_) {
    shards.push_back(
        Json::array({s.file, s.begin, s.end == kWholeFile ? Json(nullptr) : Json(s.end), s.lines}));
  }
  Json files = Json::array();
  for (const FileEntry& f : follow_files_)
    files.push_back(Json::array({f.path, f.arrival, f.shards_left}));
  out["follow"] = Json{{"shard_base", shard_base_},
                       {"shards", shards},
                       {"file_base", file_base_},
                       {"files", files},
                       {"files_done", files_done_total_}};
  return out;
}

Status ShardQueue::RestoreFollow(const Json& saved) {
  const Json& j = saved.at("follow");
  std::deque<Shard> shards;
  for (const Json& s : j.at("shards")) {
    shards.push_back(Shard{s.at(0).get<uint32_t>(), s.at(1).get<uint64_t>(),
                           s.at(2).is_null() ? kWholeFile : s.at(2).get<uint64_t>(),
                           s.at(3).get<bool>()});
  }
  std::deque<FileEntry> files;
  for (const Json& f : j.at("files"))
    files.push_back(
        FileEntry{f.at(0).get<std::string>(), f.at(1).get<double>(), f.at(2).get<int64_t>()});
  const auto shard_base = j.at("shard_base").get<int64_t>();
  const auto file_base = j.at("file_base").get<int64_t>();
  for (const Shard& s : shards) {
    if (s.file < file_base || s.file - file_base >= static_cast<int64_t>(files.size()))
      return InvalidArgument("the data position's follow record names a file it does not hold");
  }
  if (saved.at("next").get<int64_t>() > shard_base + static_cast<int64_t>(shards.size()) ||
      saved.at("done").get<int64_t>() < shard_base)
    return InvalidArgument("the data position's follow record does not hold its shards");
  follow_shards_ = std::move(shards);
  follow_files_ = std::move(files);
  shard_base_ = shard_base;
  file_base_ = file_base;
  files_done_total_ = j.at("files_done").get<int64_t>();
  files_done_.clear();
  return Status::Ok();
}

Status ShardQueue::Restore(const Json& saved) {
  try {
    if (options_.follow != saved.contains("follow"))
      return InvalidArgument(options_.follow ? "the data position is not one of followed files"
                                             : "the data position is one of followed files");
    const Json& list = options_.follow ? Json::array() : saved.at("shard_list");
    if (list.size() != options_.shards.size())
      return InvalidArgument("the data position is for " + std::to_string(list.size()) +
                             " shards, the job's files make " +
                             std::to_string(options_.shards.size()));
    for (size_t i = 0; i < list.size(); ++i) {
      const Shard& s = options_.shards[i];
      const Json& j = list[i];
      const uint64_t end = j.at(2).is_null() ? kWholeFile : j.at(2).get<uint64_t>();
      if (j.at(0).get<uint32_t>() != s.file || j.at(1).get<uint64_t>() != s.begin || end != s.end)
        return InvalidArgument("the data position is for other shards (shard " + std::to_string(i) +
                               " differs): the files or shard_bytes changed");
    }
    if (saved.at("seed").get<uint64_t>() != options_.seed)
      return InvalidArgument("the data position is for another seed");
    std::map<int64_t, Leased> leased;
    for (const Json& j : saved.at("leased")) {
      Leased l;
      const auto seq = j.at("seq").get<int64_t>();
      l.shard = ShardAt(seq);
      l.base_record = j.at("record").get<int64_t>();
      l.base_byte = j.at("byte").get<uint64_t>();
      l.next = j.at("next").get<int64_t>();
      if (!j.at("total").is_null()) l.total = j.at("total").get<int64_t>();
      for (const Json& a : j.at("acked"))
        l.acked[a.at(0).get<int64_t>()] = Acked{a.at(1).get<int64_t>(), a.at(2).get<uint64_t>()};
      for (const Json& g : j.at("gaps")) l.gaps[g.at(0).get<int64_t>()] = g.at(1).get<int64_t>();
      leased.emplace(seq, std::move(l));
    }
    const auto done_after = saved.at("done_after").get<std::vector<int64_t>>();
    const auto done = saved.at("done").get<int64_t>();
    const auto next = saved.at("next").get<int64_t>();
    const auto counted = saved.at("records_counted").get<int64_t>();
    if (options_.follow) PS_RETURN_IF_ERROR(RestoreFollow(saved));
    done_prefix_ = done;
    done_after_ = std::set<int64_t>(done_after.begin(), done_after.end());
    next_seq_ = next;
    records_counted_ = counted;
    leased_ = std::move(leased);
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("the data position does not parse: ") + e.what());
  }
  generation_ += 1;
  in_flight_ = 0;
  return Status::Ok();
}

}  // namespace ps::data
