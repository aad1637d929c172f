// Checkpoint directories (checkpoint_dir.h): names and paths, the MANIFEST and the pointer,
// commits, listing, verification and the restore search with delta chains.
#include "libps/ckpt/checkpoint_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <limits>

#include "libps/ckpt/checkpoint_dir_internal.h"
#include "libps/core/log.h"
#include "libps/core/text.h"

namespace ps::ckpt {
namespace fs = std::filesystem;

namespace {

using internal::CheckpointDirs;
using internal::DeltaDirs;
using internal::ParseDigits;

constexpr char kManifestFormat[] = "pstrain-checkpoint";
constexpr int kManifestVersion = 1;
constexpr size_t kMaxManifestBytes = size_t{16} << 20;
constexpr size_t kMaxPointerBytes = 4096;
constexpr std::string_view kPointerKey = "model_checkpoint_path: \"";

struct Scan {
  std::vector<CheckpointInfo> committed;                     // oldest first
  std::vector<std::pair<int64_t, std::string>> damaged;      // step, problem (names the file)
  std::vector<std::pair<int64_t, std::string>> uncommitted;  // step, dir
};

Result<Scan> ScanModelDir(const std::string& model_dir) {
  PS_ASSIGN_OR_RETURN(auto dirs, CheckpointDirs(model_dir));
  std::sort(dirs.begin(), dirs.end());
  Scan scan;
  for (auto& [step, dir] : dirs) {
    auto manifest = ReadManifest(dir);
    if (manifest.ok()) {
      scan.committed.push_back(CheckpointInfo{step, dir, std::move(*manifest), {}});
    } else if (manifest.status().code() == Code::kNotFound) {
      scan.uncommitted.emplace_back(step, dir);
    } else {
      scan.damaged.emplace_back(step, manifest.status().message());
    }
  }
  return scan;
}

std::string PointerText(int64_t step) {
  return std::string(kPointerKey) + CheckpointDirName(step) + "\"\n";
}

Status ValidateManifest(const Manifest& m, const std::string& what) {
  if (m.global_step < 0) return InvalidArgument(what + ".global_step: must not be negative");
  if (m.num_ps < 1) return InvalidArgument(what + ".num_ps: must be at least 1");
  if (m.shards.size() != static_cast<size_t>(m.num_ps)) {
    return InvalidArgument(what + ".shards: " + std::to_string(m.shards.size()) +
                           " entries for num_ps " + std::to_string(m.num_ps));
  }
  for (int i = 0; i < m.num_ps; ++i) {
    if (m.shards[i].name != ShardFileName(i)) {
      return InvalidArgument(what + ".shards[" + std::to_string(i) + "].name: expected \"" +
                             ShardFileName(i) + "\", got " + QuoteInput(m.shards[i].name, '"'));
    }
  }
  if (!m.extra.is_object()) return InvalidArgument(what + ".extra: must be a JSON object");
  if (m.base && (*m.base < 0 || m.parent < *m.base || m.parent >= m.global_step)) {
    return InvalidArgument(what + ".parent: a delta needs base <= parent < global_step");
  }
  return Status::Ok();
}

}  // namespace

namespace internal {

std::optional<int64_t> ParseDigits(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  if (s.size() > 1 && s[0] == '0') return std::nullopt;  // canonical form only
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

// Canonical ckpt-<step> directories (not symlinks) in model_dir, unsorted.
Result<std::vector<std::pair<int64_t, std::string>>> CheckpointDirs(const std::string& model_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::exists(model_dir, ec)) return out;
  fs::directory_iterator it(model_dir, ec);
  if (ec) return IoError(model_dir + ": cannot list directory: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    auto step = ParseCheckpointDirName(name);
    if (!step) continue;
    std::error_code sec;
    if (!fs::is_directory(it->symlink_status(sec))) continue;
    out.emplace_back(*step, model_dir + "/" + name);
  }
  if (ec) return IoError(model_dir + ": cannot list directory: " + ec.message());
  return out;
}

// The delta-<step> directories in a checkpoint directory, ascending.
Result<std::vector<std::pair<int64_t, std::string>>> DeltaDirs(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return IoError(dir + ": cannot list directory: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    auto step = ParseDeltaDirName(name);
    std::error_code sec;
    if (step && fs::is_directory(it->symlink_status(sec)))
      out.emplace_back(*step, dir + "/" + name);
  }
  if (ec) return IoError(dir + ": cannot list directory: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace internal

std::string CheckpointDirName(int64_t step) { return "ckpt-" + std::to_string(step); }

std::optional<int64_t> ParseCheckpointDirName(std::string_view name) {
  if (!name.starts_with("ckpt-")) return std::nullopt;
  return ParseDigits(name.substr(5));
}

std::string CheckpointPath(const std::string& model_dir, int64_t step) {
  return model_dir + "/" + CheckpointDirName(step);
}

std::string DeltaDirName(int64_t step) { return "delta-" + std::to_string(step); }

std::optional<int64_t> ParseDeltaDirName(std::string_view name) {
  if (!name.starts_with("delta-")) return std::nullopt;
  return ParseDigits(name.substr(6));
}

std::string DeltaPath(const std::string& model_dir, int64_t base, int64_t step) {
  return CheckpointPath(model_dir, base) + "/" + DeltaDirName(step);
}

std::string CheckpointRelPath(int64_t base, int64_t step) {
  return base == step ? CheckpointDirName(step)
                      : CheckpointDirName(base) + "/" + DeltaDirName(step);
}

std::string ManifestDir(const std::string& model_dir, const Manifest& m) {
  return m.base ? DeltaPath(model_dir, *m.base, m.global_step)
                : CheckpointPath(model_dir, m.global_step);
}

Result<std::string> CreateDeltaDir(const std::string& model_dir, int64_t base, int64_t step) {
  if (step <= base || base < 0) {
    return InvalidArgument(model_dir + ": delta step " + std::to_string(step) +
                           " not after its base " + std::to_string(base));
  }
  const std::string parent = CheckpointPath(model_dir, base);
  const std::string dir = DeltaPath(model_dir, base, step);
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) {
    return FailedPrecondition(parent + ": the delta's base checkpoint does not exist");
  }
  fs::create_directory(dir, ec);
  if (ec) return IoError(dir + ": cannot create directory: " + ec.message());
  if (!fs::is_directory(dir, ec)) return IoError(dir + ": exists and is not a directory");
  PS_RETURN_IF_ERROR(FsyncDir(parent));
  return dir;
}

Result<std::string> CreateCheckpointDir(const std::string& model_dir, int64_t step) {
  if (step < 0)
    return InvalidArgument(model_dir + ": negative global step " + std::to_string(step));
  const std::string dir = CheckpointPath(model_dir, step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError(dir + ": cannot create directory: " + ec.message());
  if (!fs::is_directory(dir, ec)) return IoError(dir + ": exists and is not a directory");
  PS_RETURN_IF_ERROR(FsyncDir(model_dir));
  return dir;
}

Json ManifestToJson(const Manifest& m) {
  Json shards = Json::array();
  for (const auto& s : m.shards) {
    shards.push_back(Json{{"name", s.name}, {"bytes", s.bytes}, {"digest", s.digest}});
  }
  Json j{{"format", kManifestFormat},
         {"version", kManifestVersion},
         {"global_step", m.global_step},
         {"unix_time", m.unix_time},
         {"final", m.final},
         {"num_ps", m.num_ps},
         {"shards", std::move(shards)},
         {"extra", m.extra}};
  if (m.base) {
    j["base"] = *m.base;
    j["parent"] = m.parent;
  }
  return j;
}

Result<Manifest> ManifestFromJson(const Json& json, const std::string& what) {
  JsonReader r(json, what);
  PS_RETURN_IF_ERROR(r.status());
  std::string format;
  int version = 0;
  PS_RETURN_IF_ERROR(r.Get("format", &format));
  if (format != kManifestFormat) {
    return InvalidArgument(r.Path("format") + ": expected " + QuoteInput(kManifestFormat, '"') +
                           ", got \"" + format + "\"");
  }
  PS_RETURN_IF_ERROR(r.Get("version", &version));
  if (version != kManifestVersion) {
    return InvalidArgument(r.Path("version") + ": unsupported version " + std::to_string(version));
  }
  Manifest m;
  PS_RETURN_IF_ERROR(r.Get("global_step", &m.global_step));
  PS_RETURN_IF_ERROR(r.Get("unix_time", &m.unix_time));
  PS_RETURN_IF_ERROR(r.Get("final", &m.final));
  PS_RETURN_IF_ERROR(r.Get("num_ps", &m.num_ps));
  const Json* shards = r.Find("shards");
  if (shards == nullptr) return InvalidArgument(r.Path("shards") + ": required key is missing");
  if (!shards->is_array()) return InvalidArgument(r.Path("shards") + ": expected an array");
  for (size_t i = 0; i < shards->size(); ++i) {
    JsonReader s((*shards)[i], r.Path("shards") + "[" + std::to_string(i) + "]");
    PS_RETURN_IF_ERROR(s.status());
    ShardFileInfo info;
    uint64_t digest = 0;
    PS_RETURN_IF_ERROR(s.Get("name", &info.name));
    PS_RETURN_IF_ERROR(s.Get("bytes", &info.bytes));
    PS_RETURN_IF_ERROR(s.Get("digest", &digest));
    if (digest > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgument(s.Path("digest") + ": not a 32-bit value");
    }
    info.digest = static_cast<uint32_t>(digest);
    PS_RETURN_IF_ERROR(s.Finish());
    m.shards.push_back(std::move(info));
  }
  if (const Json* extra = r.Find("extra")) m.extra = *extra;
  if (r.Find("base") != nullptr) {
    int64_t base = 0;
    PS_RETURN_IF_ERROR(r.Get("base", &base));
    PS_RETURN_IF_ERROR(r.Get("parent", &m.parent));
    m.base = base;
  } else if (r.Find("parent") != nullptr) {
    return InvalidArgument(r.Path("parent") + ": needs \"base\" (only a delta has a parent)");
  }
  PS_RETURN_IF_ERROR(r.Finish());
  PS_RETURN_IF_ERROR(ValidateManifest(m, what));
  return m;
}

Result<Manifest> ReadManifest(const std::string& ckpt_dir) {
  const std::string path = ckpt_dir + "/" + kManifestFile;
  auto text = ReadSmallFile(path, kMaxManifestBytes);
  if (!text.ok()) return text.status();
  auto json = ParseJson(*text, path);
  if (!json.ok()) return DataLoss(json.status().message());
  auto m = ManifestFromJson(*json, path);
  if (!m.ok()) return DataLoss(m.status().message());
  const std::string name = fs::path(ckpt_dir).filename().string();
  auto step = ParseCheckpointDirName(name);
  const auto delta_step = ParseDeltaDirName(name);
  if (step && m->base)
    return DataLoss(path + ": a delta's MANIFEST in a full checkpoint's directory");
  if (delta_step && !m->base)
    return DataLoss(path + ": a full checkpoint's MANIFEST in a delta's directory");
  if (delta_step) step = delta_step;
  if (step && *step != m->global_step) {
    return DataLoss(path + ": global_step " + std::to_string(m->global_step) +
                    " disagrees with the directory name");
  }
  return m;
}

Result<int64_t> ReadCheckpointPointer(const std::string& model_dir) {
  const std::string path = model_dir + "/" + kPointerFile;
  PS_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxPointerBytes));
  std::string_view t = text;
  // First line only (TF writes more lines after it: all_model_checkpoint_paths).
  t = t.substr(0, t.find('\n'));
  if (t.starts_with(kPointerKey) && t.ends_with("\"")) {
    auto name = t.substr(kPointerKey.size(), t.size() - kPointerKey.size() - 1);
    if (auto step = ParseCheckpointDirName(name)) return *step;
  }
  return DataLoss(path + ": garbled (expected model_checkpoint_path: \"ckpt-<step>\")");
}

Status CommitCheckpoint(const std::string& model_dir, const Manifest& manifest) {
  const std::string dir = ManifestDir(model_dir, manifest);
  PS_RETURN_IF_ERROR(ValidateManifest(manifest, dir + "/" + kManifestFile));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return FailedPrecondition(dir + ": checkpoint directory does not exist");
  }
  for (int i = 0; i < manifest.num_ps; ++i) {
    const ShardFileInfo& info = manifest.shards[i];
    const std::string path = dir + "/" + info.name;
    auto reader = ShardReader::Open(path);
    if (!reader.ok()) {
      return FailedPrecondition("cannot commit: " + reader.status().message());
    }
    if (reader->file_bytes() != info.bytes || reader->digest() != info.digest ||
        reader->ps_index() != i || reader->global_step() != manifest.global_step) {
      return FailedPrecondition("cannot commit: " + path +
                                " does not match the manifest (size, digest, ps index or step)");
    }
  }
  std::string text = ManifestToJson(manifest).dump(2) + "\n";
  PS_RETURN_IF_ERROR(WriteFileAtomic(dir + "/" + kManifestFile, text));
  if (manifest.base) return Status::Ok();  // the pointer names full checkpoints
  int64_t newest = manifest.global_step;
  auto list = ListCheckpoints(model_dir);
  if (list.ok() && !list->empty()) newest = std::max(newest, list->back().global_step);
  return WriteFileAtomic(model_dir + "/" + kPointerFile, PointerText(newest));
}

Result<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& model_dir) {
  PS_ASSIGN_OR_RETURN(Scan scan, ScanModelDir(model_dir));
  return std::move(scan.committed);
}

Status CheckAgainstManifest(const ShardReader& reader, const ShardFileInfo& info, int ps,
                            int64_t step) {
  const std::string& path = reader.path();
  if (reader.file_bytes() != info.bytes) {
    return DataLoss(path + ": " + std::to_string(reader.file_bytes()) +
                    " bytes, the MANIFEST says " + std::to_string(info.bytes));
  }
  if (reader.digest() != info.digest) {
    return DataLoss(path + ": digest differs from the MANIFEST's (a different file)");
  }
  if (reader.ps_index() != ps || reader.global_step() != step) {
    return DataLoss(path + ": written by ps " + std::to_string(reader.ps_index()) + " at step " +
                    std::to_string(reader.global_step()) + ", expected ps " + std::to_string(ps) +
                    " at step " + std::to_string(step));
  }
  return Status::Ok();
}

Status VerifyCheckpoint(const CheckpointInfo& c, Verify level) {
  for (int i = 0; i < static_cast<int>(c.manifest.shards.size()); ++i) {
    const ShardFileInfo& info = c.manifest.shards[i];
    const std::string path = c.dir + "/" + info.name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return DataLoss(path + ": missing (listed in the MANIFEST)");
      return ErrnoStatus(path, "stat", errno);
    }
    if (static_cast<uint64_t>(st.st_size) != info.bytes) {
      return DataLoss(path + ": " + std::to_string(st.st_size) + " bytes, the MANIFEST says " +
                      std::to_string(info.bytes));
    }
    if (level == Verify::kSizes) continue;
    auto reader = ShardReader::Open(path);
    if (!reader.ok()) {
      if (reader.status().code() == Code::kNotFound) {
        return DataLoss(path + ": missing (listed in the MANIFEST)");
      }
      return reader.status();
    }
    PS_RETURN_IF_ERROR(CheckAgainstManifest(*reader, info, i, c.global_step));
    if (level == Verify::kFull) {
      PS_RETURN_IF_ERROR(
          reader->ReadAll([](const RecordMeta&, std::string_view) -> Result<std::span<float>> {
            return std::span<float>();
          }));
    }
  }
  return Status::Ok();
}

Status VerifyCheckpoint(const std::string& ckpt_dir, Verify level) {
  PS_ASSIGN_OR_RETURN(Manifest m, ReadManifest(ckpt_dir));
  return VerifyCheckpoint(CheckpointInfo{m.global_step, ckpt_dir, std::move(m), {}}, level);
}

Result<std::optional<CheckpointInfo>> FindRestorable(const std::string& model_dir,
                                                     std::vector<std::string>* warnings,
                                                     Verify level, const DeltaChainOptions& chain) {
  std::vector<std::string> local;
  std::vector<std::string>& warn = warnings != nullptr ? *warnings : local;
  const size_t first_warning = warn.size();
  PS_ASSIGN_OR_RETURN(Scan scan, ScanModelDir(model_dir));

  for (const auto& [step, problem] : scan.damaged) {
    warn.push_back(problem + "; ignoring checkpoint " + CheckpointDirName(step));
  }
  const bool any = !scan.committed.empty() || !scan.damaged.empty();
  auto pointer = ReadCheckpointPointer(model_dir);
  if (!pointer.ok()) {
    if (pointer.status().code() != Code::kNotFound) {
      warn.push_back(pointer.status().message() + "; using the checkpoints found by scanning " +
                     model_dir);
    } else if (any) {
      warn.push_back(model_dir + "/" + kPointerFile +
                     ": missing; using the checkpoints found by scanning " + model_dir);
    }
  } else {
    bool found = std::any_of(scan.committed.begin(), scan.committed.end(),
                             [&](const CheckpointInfo& c) { return c.global_step == *pointer; });
    if (!found) {
      warn.push_back(model_dir + "/" + kPointerFile + ": names " + CheckpointDirName(*pointer) +
                     ", which is not a committed checkpoint; using the checkpoints found by "
                     "scanning " +
                     model_dir);
    }
  }

  std::optional<CheckpointInfo> result;
  for (auto it = scan.committed.rbegin(); it != scan.committed.rend(); ++it) {
    auto& newest = *it;
    Status st = VerifyCheckpoint(newest, level);
    if (st.ok()) {
      result = std::move(newest);
      PS_RETURN_IF_ERROR(LoadDeltaChain(&*result, level, &warn, chain));
      break;
    }
    if (st.code() != Code::kDataLoss) return st;  // an I/O error is not corruption
    warn.push_back(st.message() + "; checkpoint " + CheckpointDirName(newest.global_step) +
                   " is corrupt, falling back to an older one");
  }
  if (warnings == nullptr) {
    for (size_t i = first_warning; i < warn.size(); ++i) PS_LOG(Warning) << warn[i];
  }
  if (!result && any) {
    return DataLoss(model_dir + ": " + std::to_string(scan.committed.size() + scan.damaged.size()) +
                    " checkpoints, none restorable (" + warn.back() +
                    "); refusing to start from scratch");
  }
  return result;
}

Status LoadDeltaChain(CheckpointInfo* base, Verify level, std::vector<std::string>* warnings,
                      const DeltaChainOptions& options) {
  base->deltas.clear();
  PS_ASSIGN_OR_RETURN(auto dirs, DeltaDirs(base->dir));
  auto warn = [&](const std::string& w) {
    if (warnings != nullptr) {
      warnings->push_back(w);
    } else {
      PS_LOG(Warning) << w;
    }
  };
  int64_t at = base->global_step;  // the chain's newest step so far
  for (auto& [step, dir] : dirs) {
    if (options.upto && step > *options.upto) break;
    auto manifest = ReadManifest(dir);
    if (!manifest.ok() && manifest.status().code() == Code::kNotFound) continue;  // not committed
    const std::string stop = "; the delta chain of " + CheckpointDirName(base->global_step) +
                             " stops at step " + std::to_string(at);
    if (!manifest.ok()) {
      warn(manifest.status().message() + stop);
      break;
    }
    if (*manifest->base != base->global_step) {
      warn(dir + "/" + kManifestFile + ": base " + std::to_string(*manifest->base) +
           " is not its directory's" + stop);
      break;
    }
    if (manifest->parent != at) continue;  // a delta of a branch the chain left (its parent failed)
    CheckpointInfo delta{step, dir, std::move(*manifest), {}};
    Status st;
    if (!options.verify_after || step > *options.verify_after) {
      st = VerifyCheckpoint(delta, level);
      if (st.ok() && options.read) st = options.read(delta);
    }
    if (!st.ok()) {
      if (st.code() != Code::kDataLoss) return st;
      warn(st.message() + "; delta " + DeltaDirName(step) + " is corrupt" + stop);
      break;
    }
    at = step;
    base->deltas.push_back(std::move(delta));
  }
  return Status::Ok();
}

Result<CheckpointInfo> LoadCheckpointAt(const std::string& model_dir, int64_t step) {
  const std::string full = CheckpointPath(model_dir, step);
  auto manifest = ReadManifest(full);
  if (manifest.ok()) return CheckpointInfo{step, full, std::move(*manifest), {}};
  if (manifest.status().code() != Code::kNotFound) return manifest.status();
  PS_ASSIGN_OR_RETURN(Scan scan, ScanModelDir(model_dir));
  for (auto it = scan.committed.rbegin(); it != scan.committed.rend(); ++it) {
    auto& newest = *it;
    if (newest.global_step >= step) continue;
    auto delta = ReadManifest(newest.dir + "/" + DeltaDirName(step));
    if (!delta.ok() && delta.status().code() == Code::kNotFound)
      continue;  // none, or not committed
    CheckpointInfo base = std::move(newest);
    PS_RETURN_IF_ERROR(LoadDeltaChain(&base, Verify::kFooters, nullptr, {.upto = step}));
    if (base.restored_step() != step) {
      return DataLoss(DeltaPath(model_dir, base.global_step, step) +
                      ": not restorable (its delta chain from " +
                      CheckpointDirName(base.global_step) + " stops at step " +
                      std::to_string(base.restored_step()) + ")");
    }
    return base;
  }
  return NotFound(full + ": no committed checkpoint or delta of step " + std::to_string(step));
}

}  // namespace ps::ckpt
