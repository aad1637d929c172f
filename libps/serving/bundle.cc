#include "libps/serving/bundle.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "libps/ckpt/store_io.h"
#include "libps/core/crc32c.h"
#include "libps/core/files.h"
#include "libps/core/text.h"
#include "libps/scoring/scoring.h"

namespace ps::serving {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxManifestBytes = size_t{256} << 20;  // the job and the variable list

uint32_t TextChecksum(const std::string& text) {
  return MaskedCrc32c(Crc32c(0, text.data(), text.size()));
}

// Copies `from` to `to` (a new file) and fsyncs it.
Status CopyFileSynced(const std::string& from, const std::string& to) {
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!out.valid()) return ErrnoStatus(to, "create", errno);
  PS_RETURN_IF_ERROR(ReadChunks(from, [&](std::span<const unsigned char> b) {
    return WriteAll(out.get(), b.data(), b.size(), to);
  }));
  PS_RETURN_IF_ERROR(FsyncFd(out.get(), to));
  return out.Close(to);
}

BundleInfo MakeInfo(const scoring::LoadedModel& loaded, const model::Model& model) {
  BundleInfo info;
  info.format_version = kBundleVersion;
  for (const auto& v : loaded.plan.variables) {
    VariableInfo vi{
        .name = v.name, .shape = v.shape, .lazy = v.lazy, .shards = 0, .stored_rows = 0};
    for (const auto& s : loaded.plan.shards) {
      if (s.layout.var != v.name) continue;
      ++vi.shards;
      auto mem = loaded.store->Memory({s.layout.var, s.layout.shard});
      if (mem.ok()) vi.stored_rows += mem->rows;
    }
    info.variables.push_back(std::move(vi));
  }
  for (const auto& h : model.heads()) {
    info.heads.push_back(
        {.name = h.name, .loss = model::LossKindName(h.loss), .outputs = h.outputs});
  }
  info.eval_batch_size = scoring::EvalBatchSize(loaded.job);
  return info;
}

// The digests of a checkpoint's shard files, by ps index (its MANIFEST's).
std::vector<uint32_t> Digests(const ckpt::Manifest& m) {
  std::vector<uint32_t> out;
  for (const auto& f : m.shards) out.push_back(f.digest);
  return out;
}

Json VariablesJson(const std::vector<VariableInfo>& vars) {
  Json out = Json::array();
  for (const auto& v : vars) {
    out.push_back({{"name", v.name},
                   {"shape", v.shape},
                   {"lazy", v.lazy},
                   {"shards", v.shards},
                   {"stored_rows", v.stored_rows}});
  }
  return out;
}

// A relative path with no ".." component: it names a file inside the bundle (a name
// such as "libfoo..so" is fine).
bool InsideBundle(const std::string& name) {
  const fs::path p(name);
  if (name.empty() || p.is_absolute()) return false;
  return std::none_of(p.begin(), p.end(), [](const fs::path& c) { return c == ".."; });
}

// The process's umask. umask(2) can only be read by setting it, which races with other
// threads creating files (a serving process may export while others run);
// /proc/self/status shows it without changing it (Linux 4.7+), read at each export so a
// umask changed since is followed. Without /proc it falls back to setting and restoring
// it, once per process: a file another thread creates in that instant gets umask 022.
mode_t ProcessUmask() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Umask:", 0) == 0)
      return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8) & 0777);
  }
  static const mode_t once = [] {
    const mode_t m = ::umask(022);
    ::umask(m);
    return m;
  }();
  return once;
}

Status OutExists(const fs::path& out) {
  return Status(Code::kAlreadyExists,
                out.string() + ": already exists (remove it, or export to a new directory)");
}

// Removes a temporary directory unless released.
class TmpDirGuard {
 public:
  explicit TmpDirGuard(std::string dir) : dir_(std::move(dir)) {}
  ~TmpDirGuard() {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TmpDirGuard(const TmpDirGuard&) = delete;
  TmpDirGuard& operator=(const TmpDirGuard&) = delete;
  void Release() { dir_.clear(); }

 private:
  std::string dir_;
};

}  // namespace

Result<ExportResult> ExportBundle(const ExportOptions& o) {
  std::error_code ec;
  fs::path out = fs::absolute(fs::path(o.out_dir), ec).lexically_normal();
  if (!out.has_filename() && out.has_relative_path()) out = out.parent_path();  // "dir/" is dir
  if (ec || out.filename().empty())
    return InvalidArgument(o.out_dir + ": not a usable bundle directory name");
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec))) {
    return OutExists(out);
  }
  ExportResult result;
  PS_ASSIGN_OR_RETURN(LoadedBundle source, LoadModelDir(o.model_dir, o.step, &result.warnings));
  const job::JobSpec& job = source.loaded.job;
  const scoring::LoadedModel& loaded = source.loaded;

  fs::create_directories(out.parent_path(), ec);
  if (ec) return IoError(out.parent_path().string() + ": cannot create: " + ec.message());
  std::string tmpl = out.string() + ".tmp-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus(tmpl, "mkdtemp", errno);
  const std::string tmp = tmpl;
  TmpDirGuard guard(tmp);

  // The files, each fsynced; the manifest lists them.
  Json files = Json::array();
  auto list = [&](const std::string& name) -> Status {
    PS_ASSIGN_OR_RETURN(FileSum sum, SumFile(tmp + "/" + name));
    files.push_back({{"name", name}, {"bytes", sum.bytes}, {"crc32c", sum.crc}});
    result.bytes += sum.bytes;
    return Status::Ok();
  };
  const int64_t step = source.info.source_step;
  PS_RETURN_IF_ERROR(
      ckpt::WriteStoreFile(*loaded.store, tmp + "/" + kBundleWeights, 0, step).status());
  PS_RETURN_IF_ERROR(list(kBundleWeights));

  Json job_json = job.raw;
  job_json.erase("base_dir");  // the bundle is its own base: plug-ins are copied into it
  if (job_json.contains("plugins")) {
    Json copies = Json::array();
    if (!fs::create_directory(tmp + "/plugins", ec))
      return IoError(tmp + "/plugins: cannot create: " + ec.message());
    const auto& plugins = job_json["plugins"];
    for (size_t i = 0; i < plugins.size(); ++i) {
      fs::path p(plugins[i].get<std::string>());
      if (p.is_relative()) p = fs::path(job.base_dir) / p;
      const std::string name = "plugins/" + std::to_string(i) + "-" + p.filename().string();
      PS_RETURN_IF_ERROR(CopyFileSynced(p.string(), tmp + "/" + name));
      PS_RETURN_IF_ERROR(list(name));
      copies.push_back(name);
    }
    PS_RETURN_IF_ERROR(FsyncDir(tmp + "/plugins"));
    job_json["plugins"] = copies;
  }

  result.info = std::move(source.info);
  result.info.dir = out.string();
  result.info.format_version = kBundleVersion;
  Json manifest = {
      {"format", kBundleFormat},
      {"version", kBundleVersion},
      {"source",
       {{"model_dir", result.info.source_model_dir},
        {"checkpoint", ckpt::CheckpointRelPath(result.info.source_base_step, step)},
        {"global_step", step},
        {"final", result.info.source_final},
        {"base_step", result.info.source_base_step},
        {"base_digests", result.info.source_base_digests},
        {"delta_digests", result.info.source_delta_digests}}},
      {"unix_time",
       std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
      {"num_ps", loaded.num_ps},
      {"job", job_json},
      {"variables", VariablesJson(result.info.variables)},
      {"files", files},
  };
  manifest["checksum"] = TextChecksum(manifest.dump());
  const std::string text = manifest.dump(2) + "\n";
  result.bytes += text.size();
  PS_RETURN_IF_ERROR(WriteFileAtomic(tmp + "/" + kBundleManifest, text));
  // mkdtemp made it 0700; a bundle is read by other accounts (a serving process) as any
  // directory this process creates would be.
  if (::chmod(tmp.c_str(), 0777 & ~ProcessUmask()) != 0) return ErrnoStatus(tmp, "chmod", errno);
  PS_RETURN_IF_ERROR(FsyncDir(tmp));
  // The commit: rename(2) replaces an empty directory, and refuses a non-empty one.
  if (::rename(tmp.c_str(), out.c_str()) != 0) {
    const int err = errno;
    if (err == ENOTEMPTY || err == EEXIST) {
      return OutExists(out);
    }
    return ErrnoStatus(out.string(), "rename", err);
  }
  guard.Release();
  PS_RETURN_IF_ERROR(FsyncDir(out.parent_path().string()));
  return result;
}

Result<LoadedBundle> LoadBundle(const std::string& dir) {
  const std::string path = dir + "/" + kBundleManifest;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return NotFound(dir + ": not a pstrain bundle (no " + kBundleManifest + ")");
  PS_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxManifestBytes));
  auto parsed = ParseJson(text, path);
  if (!parsed.ok()) return DataLoss(parsed.status().message());
  Json manifest = std::move(*parsed);
  if (!manifest.is_object() || !manifest.contains("checksum") ||
      !manifest["checksum"].is_number_unsigned()) {
    return DataLoss(path + ": no checksum (not a bundle manifest, or damaged)");
  }
  const uint64_t want = manifest["checksum"].get<uint64_t>();
  manifest.erase("checksum");
  if (TextChecksum(manifest.dump()) != want)
    return DataLoss(path + ": checksum mismatch (the manifest is damaged)");

  JsonReader r(manifest, path);
  std::string format;
  int version = 0;
  PS_RETURN_IF_ERROR(r.Get("format", &format));
  if (format != kBundleFormat) {
    return InvalidArgument(r.Path("format") + ": expected " + QuoteInput(kBundleFormat, '"') +
                           ", got \"" + format + "\"");
  }
  PS_RETURN_IF_ERROR(r.Get("version", &version));
  if (version != kBundleVersion) {
    return InvalidArgument(r.Path("version") + ": this build reads bundle version " +
                           std::to_string(kBundleVersion) + ", got " + std::to_string(version));
  }
  LoadedBundle b;
  b.info.dir = dir;
  b.info.format_version = version;
  JsonReader src = r.Child("source");
  PS_RETURN_IF_ERROR(src.status());
  std::string checkpoint;
  PS_RETURN_IF_ERROR(src.Get("model_dir", &b.info.source_model_dir));
  PS_RETURN_IF_ERROR(src.Get("checkpoint", &checkpoint));
  PS_RETURN_IF_ERROR(src.Get("global_step", &b.info.source_step));
  PS_RETURN_IF_ERROR(src.Get("final", &b.info.source_final));
  // The state's identity (optional: bundles written before it was recorded lack it).
  PS_RETURN_IF_ERROR(src.GetOr("base_step", &b.info.source_base_step));
  PS_RETURN_IF_ERROR(src.GetOr("base_digests", &b.info.source_base_digests));
  PS_RETURN_IF_ERROR(src.GetOr("delta_digests", &b.info.source_delta_digests));
  PS_RETURN_IF_ERROR(src.Finish());
  double unix_time = 0;
  int num_ps = 0;
  PS_RETURN_IF_ERROR(r.Get("unix_time", &unix_time));
  PS_RETURN_IF_ERROR(r.Get("num_ps", &num_ps));
  if (num_ps < 1 || num_ps > 1 << 16)
    return InvalidArgument(r.Path("num_ps") + ": must be in 1..65536");
  const Json* job_json = r.Find("job");
  const Json* vars = r.Find("variables");
  const Json* files = r.Find("files");
  if (job_json == nullptr || vars == nullptr || files == nullptr || !files->is_array()) {
    return InvalidArgument(path + ": job, variables and files (an array) are required");
  }
  PS_RETURN_IF_ERROR(r.Finish());

  // Every file against its size and checksum before anything is loaded from it (the
  // plug-ins are loaded by ParseJob below).
  std::set<std::string> verified;
  for (size_t i = 0; i < files->size(); ++i) {
    JsonReader f((*files)[i], r.Path("files") + "[" + std::to_string(i) + "]");
    PS_RETURN_IF_ERROR(f.status());
    std::string name;
    uint64_t bytes = 0, crc = 0;
    PS_RETURN_IF_ERROR(f.Get("name", &name));
    PS_RETURN_IF_ERROR(f.Get("bytes", &bytes));
    PS_RETURN_IF_ERROR(f.Get("crc32c", &crc));
    PS_RETURN_IF_ERROR(f.Finish());
    if (!InsideBundle(name)) {
      return InvalidArgument(f.Path("name") + ": " + QuoteInput(name, '"') +
                             " is not a file inside the bundle");
    }
    const std::string file = dir + "/" + name;
    auto sum = SumFile(file);
    if (!sum.ok()) {
      if (sum.status().code() == Code::kNotFound)
        return DataLoss(file + ": missing (listed in " + path + ")");
      return sum.status();
    }
    if (sum->bytes != bytes) {
      return DataLoss(file + ": " + std::to_string(sum->bytes) + " bytes, the manifest says " +
                      std::to_string(bytes));
    }
    if (sum->crc != crc) return DataLoss(file + ": checksum mismatch (the file is damaged)");
    verified.insert(name);
  }
  if (!verified.contains(kBundleWeights))
    return DataLoss(path + ": files does not list " + kBundleWeights);
  // ParseJob dlopens the job's plug-ins: only the verified copies under plugins/.
  if (job_json->is_object() && job_json->contains("plugins")) {
    const Json& plugins = (*job_json)["plugins"];
    const std::string at = path + ".job.plugins";
    if (!plugins.is_array()) return InvalidArgument(at + ": must be an array of file names");
    for (size_t i = 0; i < plugins.size(); ++i) {
      const std::string where = at + "[" + std::to_string(i) + "]";
      const std::string name = plugins[i].is_string() ? plugins[i].get<std::string>() : "";
      if (!InsideBundle(name) || *fs::path(name).begin() != "plugins") {
        return InvalidArgument(where + ": " + plugins[i].dump() +
                               " is not a file under the bundle's plugins/");
      }
      if (!verified.contains(name))
        return DataLoss(where + ": " + QuoteInput(name, '"') + " is not listed in files");
    }
  }

  auto job = job::ParseJob(*job_json, dir);
  if (!job.ok()) return job.status().WithContext(path);
  PS_ASSIGN_OR_RETURN(b.model, model::BuildModel(job->model, "job.model"));
  // The weights file as a one-file checkpoint: ps 0 of its step, its digest as read
  // (the manifest's CRC above has already vouched for the whole file).
  PS_ASSIGN_OR_RETURN(ckpt::ShardReader weights,
                      ckpt::ShardReader::Open(dir + "/" + kBundleWeights));
  ckpt::CheckpointInfo weights_file{
      .global_step = weights.global_step(), .dir = dir, .manifest = {}};
  weights_file.manifest.global_step = weights.global_step();
  weights_file.manifest.num_ps = 1;
  weights_file.manifest.shards.push_back({kBundleWeights, weights.file_bytes(), weights.digest()});
  PS_ASSIGN_OR_RETURN(b.loaded, scoring::LoadValues(*job, *b.model, num_ps, weights_file));
  BundleInfo loaded_info = MakeInfo(b.loaded, *b.model);
  // The manifest's variable list is what the weights must hold: a mismatch means the
  // bundle's files do not belong together.
  if (VariablesJson(loaded_info.variables) != *vars) {
    return DataLoss(path + ": variables disagree with " + kBundleWeights + " and the job's model");
  }
  b.info.variables = std::move(loaded_info.variables);
  b.info.heads = std::move(loaded_info.heads);
  b.info.eval_batch_size = loaded_info.eval_batch_size;
  return b;
}

}  // namespace ps::serving

namespace ps::serving {

Result<LoadedBundle> LoadModelDir(const std::string& model_dir, std::optional<int64_t> step,
                                  std::vector<std::string>* warnings) {
  LoadedBundle b;
  PS_ASSIGN_OR_RETURN(job::JobSpec job, scoring::ReadModelDirJob(model_dir));
  PS_ASSIGN_OR_RETURN(b.model, model::BuildModel(job.model, "job.model"));
  PS_ASSIGN_OR_RETURN(auto all, ckpt::ListCheckpoints(model_dir));  // oldest first
  ckpt::CheckpointInfo c;
  if (step) {
    // A full checkpoint, or a delta's whole chain.
    auto at = ckpt::LoadCheckpointAt(model_dir, *step);
    if (!at.ok() && at.status().code() == Code::kNotFound) {
      return NotFound(model_dir + ": no committed checkpoint at step " + std::to_string(*step));
    }
    PS_RETURN_IF_ERROR(at.status());
    c = std::move(*at);
    PS_ASSIGN_OR_RETURN(b.loaded, scoring::LoadCheckpoint(job, *b.model, c));
  } else {
    // The newest checkpoint that loads; a damaged one is skipped for the previous one,
    // as a restore does. The data is read once: FindRestorable checks headers and
    // footers only, and loading verifies every record's checksums (DataLoss naming the
    // file), then falls back.
    PS_ASSIGN_OR_RETURN(auto found,
                        ckpt::FindRestorable(model_dir, warnings, ckpt::Verify::kFooters));
    if (!found) return NotFound(model_dir + ": no committed checkpoint");
    std::vector<ckpt::CheckpointInfo> candidates{*found};
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      const auto& c = *it;
      if (c.global_step < found->global_step) candidates.push_back(c);
    }
    for (size_t i = 0; i < candidates.size(); ++i) {
      c = candidates[i];
      Status st = i == 0 ? Status::Ok() : ckpt::VerifyCheckpoint(c, ckpt::Verify::kFooters);
      if (st.ok()) {
        auto loaded = scoring::LoadCheckpoint(job, *b.model, c);
        if (loaded.ok()) {
          b.loaded = std::move(*loaded);
          break;
        }
        st = loaded.status();
      }
      if (st.code() != Code::kDataLoss) return st;  // an I/O error is not corruption
      if (i + 1 == candidates.size()) return st;
      if (warnings != nullptr) {
        warnings->push_back(st.message() + "; checkpoint " +
                            ckpt::CheckpointDirName(c.global_step) +
                            " is corrupt, falling back to an older one");
      }
    }
  }
  b.info = MakeInfo(b.loaded, *b.model);
  b.info.format_version = 0;
  std::error_code ec;
  b.info.source_model_dir = fs::absolute(fs::path(model_dir), ec).lexically_normal().string();
  // With deltas (checkpoint_dir.h), the state of the newest one was loaded.
  b.info.source_step = c.restored_step();
  b.info.source_final = (c.deltas.empty() ? c.manifest : c.deltas.back().manifest).final;
  b.info.source_base_step = c.global_step;
  b.info.source_base_digests = Digests(c.manifest);
  if (!c.deltas.empty()) b.info.source_delta_digests = Digests(c.deltas.back().manifest);
  return b;
}

Result<std::vector<ckpt::DeltaRecords>> NewerDeltas(const LoadedBundle& b,
                                                    const std::string& model_dir,
                                                    RefreshStats* stats) {
  const BundleInfo& at = b.info;
  const int64_t step = at.source_step;
  stats->from_step = stats->to_step = step;
  // Steps name states of one model dir only: another model's deltas must not be written
  // into this one's parameters (the variables could even line up). job.json is read as
  // plain JSON, not parsed as a job: that would dlopen the training job's plug-ins (paths
  // of the training hosts, code the serving process must not map), and only the model
  // graph matters here.
  const std::string job_path = model_dir + "/job.json";
  PS_ASSIGN_OR_RETURN(Json job, ReadJsonFile(job_path));
  if (!job.is_object()) return InvalidArgument(job_path + ": must be a JSON object");
  if (job.value("model", Json()) != b.loaded.job.raw.value("model", Json())) {
    return FailedPrecondition(job_path + ": its model differs from the bundle's (" + at.dir +
                              "): not the model dir the bundle was exported from");
  }
  // Even the same model's steps name states of one training run only: the digests tell
  // a run from another one wiped and started over in the same model dir.
  if (at.source_base_digests.empty()) {
    return FailedPrecondition(
        at.dir + "/" + kBundleManifest +
        ": the source has no base_digests (exported by an older pstrain), so its checkpoint "
        "cannot be told from another training run's: export the bundle anew to refresh it");
  }
  // The chain a restore would take: the newest full checkpoint whose files verify, its
  // committed deltas by parent links, stopping at the first broken one (named). Those up
  // to the bundle's step are the bundle's state already; each newer one is read into
  // memory, every checksum verified, before any of it is applied.
  std::vector<ckpt::DeltaRecords> read;
  ckpt::DeltaChainOptions chain{
      .upto = std::nullopt,
      .verify_after = step,
      .read = [&](const ckpt::CheckpointInfo& d) -> Status {
        if (d.manifest.base != at.source_base_step)
          return Status::Ok();  // another chain: refused below, unread
        PS_ASSIGN_OR_RETURN(ckpt::DeltaRecords r, ckpt::ReadDelta(d, ckpt::RestoreSlots::kSkip));
        read.push_back(std::move(r));
        return Status::Ok();
      }};
  PS_ASSIGN_OR_RETURN(
      auto found, ckpt::FindRestorable(model_dir, &stats->warnings, ckpt::Verify::kFooters, chain));
  if (!found) return NotFound(model_dir + ": no committed checkpoint");
  const ckpt::CheckpointInfo& base = *found;
  stats->base_step = base.global_step;
  const std::string reload = ": reload the bundle (export it anew)";
  if (base.global_step > at.source_base_step) {
    return FailedPrecondition(model_dir + ": newer full checkpoint " +
                              ckpt::CheckpointDirName(base.global_step) +
                              " than the bundle's step " + std::to_string(step) + reload);
  }
  auto not_in_chain = [&] {
    std::string why = model_dir + ": the bundle's step " + std::to_string(step) +
                      " is not in the newest checkpoint chain (" +
                      ckpt::CheckpointDirName(base.global_step) + " with its deltas up to step " +
                      std::to_string(base.restored_step()) + ")";
    if (!stats->warnings.empty()) why += " (" + stats->warnings.back() + ")";
    return FailedPrecondition(why + reload);
  };
  if (base.global_step < at.source_base_step) return not_in_chain();
  auto another_run = [&](const std::string& dir) {
    return FailedPrecondition(
        dir + ": not the checkpoint the bundle " + at.dir +
        " was exported from (its shard files' digests differ from bundle.json's source: "
        "another training run in the same model dir?)" +
        reload);
  };
  if (Digests(base.manifest) != at.source_base_digests) return another_run(base.dir);
  size_t next = 0;  // base.deltas[next] is the first delta newer than the bundle
  if (step != base.global_step) {
    auto d = std::find_if(base.deltas.begin(), base.deltas.end(),
                          [&](const ckpt::CheckpointInfo& c) { return c.global_step == step; });
    if (d == base.deltas.end()) return not_in_chain();
    if (Digests(d->manifest) != at.source_delta_digests) return another_run(d->dir);
    next = static_cast<size_t>(d - base.deltas.begin()) + 1;
  }
  if (read.size() != base.deltas.size() - next) {
    return Internal(model_dir + ": " + std::to_string(read.size()) +
                    " deltas read, the chain has " + std::to_string(base.deltas.size() - next) +
                    " after step " + std::to_string(step));
  }
  return read;
}

Status WriteBundleDeltas(LoadedBundle& b, std::span<const ckpt::DeltaRecords> deltas,
                         bool* store_changed) {
  *store_changed = false;
  if (deltas.empty()) return Status::Ok();
  ckpt::RestoreStats rs;
  Status st = ckpt::ApplyDeltas(b.loaded.store.get(), deltas, &rs, ckpt::RestoreSlots::kSkip);
  *store_changed = rs.store_changed;
  return st;
}

void RecordBundleDeltas(const LoadedBundle& b, std::span<const ckpt::DeltaRecords> deltas,
                        RefreshStats* stats, BundleInfo* info) {
  if (deltas.empty()) return;
  for (const auto& d : deltas) stats->applied.push_back(d.checkpoint.global_step);
  const ckpt::Manifest& newest = deltas.back().checkpoint.manifest;
  stats->to_step = newest.global_step;
  info->source_step = newest.global_step;
  info->source_final = newest.final;
  info->source_delta_digests = Digests(newest);
  info->variables = MakeInfo(b.loaded, *b.model).variables;  // the lazy tables' stored rows
}

}  // namespace ps::serving
