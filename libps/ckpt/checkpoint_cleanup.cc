// Checkpoint cleanup (checkpoint_dir.h): removing uncommitted checkpoints and stray
// temporary files, and keeping at most max_to_keep committed checkpoints.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/checkpoint_dir_internal.h"
#include "libps/core/files.h"
#include "libps/core/log.h"

namespace ps::ckpt {
namespace fs = std::filesystem;

namespace {

using internal::CheckpointDirs;
using internal::DeltaDirs;
using internal::ParseDigits;

// "ps-<i>.shard" -> true.
bool IsShardFileName(std::string_view name) {
  if (!name.starts_with("ps-") || !name.ends_with(".shard")) return false;
  return ParseDigits(name.substr(3, name.size() - 3 - 6)).has_value();
}
bool IsShardTmpName(std::string_view name) {
  return name.ends_with(".tmp") && IsShardFileName(name.substr(0, name.size() - 4));
}

std::string ManifestTmpName() { return std::string(kManifestFile) + ".tmp"; }

bool IsRegularFile(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(fs::symlink_status(path, ec));
}

Status RemoveFile(const std::string& path, std::vector<std::string>* removed) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return ErrnoStatus(path, "remove", errno);
  }
  PS_LOG(Info) << "removed " << path;
  if (removed != nullptr) removed->push_back(path);
  return Status::Ok();
}

// Removes the files pstrain writes in a checkpoint directory, then the directory if
// that left it empty. Returns OK with a warning logged when foreign files remain.
Status RemoveCheckpointDir(const std::string& dir, std::vector<std::string>* removed) {
  std::error_code ec;
  std::vector<std::string> foreign;
  std::vector<std::string> ours;
  std::vector<std::string> deltas;  // a base's delta directories go with it
  fs::directory_iterator it(dir, ec);
  if (ec) return IoError(dir + ": cannot list directory: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code sec;
    bool regular = fs::is_regular_file(it->symlink_status(sec));
    if (regular && (IsShardFileName(name) || IsShardTmpName(name) || name == ManifestTmpName() ||
                    name == kManifestFile)) {
      ours.push_back(dir + "/" + name);
    } else if (ParseDeltaDirName(name) && fs::is_directory(it->symlink_status(sec))) {
      deltas.push_back(dir + "/" + name);
    } else {
      foreign.push_back(name);
    }
  }
  if (ec) return IoError(dir + ": cannot list directory: " + ec.message());
  for (const auto& path : ours) PS_RETURN_IF_ERROR(RemoveFile(path, removed));
  for (const auto& delta : deltas) PS_RETURN_IF_ERROR(RemoveCheckpointDir(delta, removed));
  const bool delta_left = std::any_of(deltas.begin(), deltas.end(), [](const std::string& d) {
    std::error_code e;
    return fs::exists(d, e);
  });
  if (!foreign.empty() || delta_left) {
    PS_LOG(Warning) << "left " << dir << " in place: it holds files pstrain did not write (e.g. "
                    << (foreign.empty() ? "in a delta directory" : foreign.front()) << ")";
    return Status::Ok();
  }
  if (::rmdir(dir.c_str()) != 0) return ErrnoStatus(dir, "remove directory", errno);
  PS_LOG(Info) << "removed " << dir;
  if (removed != nullptr) removed->push_back(dir);
  return Status::Ok();
}

// Removes a committed checkpoint's (or delta's) stray ps-<i>.shard.tmp and MANIFEST.tmp.
Status RemoveStray(const std::string& dir, std::vector<std::string>* removed) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return IoError(dir + ": cannot list directory: " + ec.message());
  std::vector<std::string> stray;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code sec;
    if (fs::is_regular_file(it->symlink_status(sec)) &&
        (IsShardTmpName(name) || name == ManifestTmpName())) {
      stray.push_back(dir + "/" + name);
    }
  }
  if (ec) return IoError(dir + ": cannot list directory: " + ec.message());
  for (const auto& path : stray) PS_RETURN_IF_ERROR(RemoveFile(path, removed));
  return Status::Ok();
}

}  // namespace

Status CleanUncommitted(const std::string& model_dir, std::vector<std::string>* removed) {
  PS_ASSIGN_OR_RETURN(auto dirs, CheckpointDirs(model_dir));
  const std::string pointer_tmp = model_dir + "/" + kPointerFile + ".tmp";
  if (IsRegularFile(pointer_tmp)) PS_RETURN_IF_ERROR(RemoveFile(pointer_tmp, removed));
  for (const auto& [step, dir] : dirs) {
    if (!IsRegularFile(dir + "/" + kManifestFile)) {
      PS_RETURN_IF_ERROR(RemoveCheckpointDir(dir, removed));  // with its deltas
      continue;
    }
    PS_RETURN_IF_ERROR(RemoveStray(dir, removed));
    PS_ASSIGN_OR_RETURN(auto deltas, DeltaDirs(dir));
    for (const auto& [delta_step, delta] : deltas) {
      if (IsRegularFile(delta + "/" + kManifestFile)) {
        PS_RETURN_IF_ERROR(RemoveStray(delta, removed));
      } else {
        PS_RETURN_IF_ERROR(RemoveCheckpointDir(delta, removed));
      }
    }
  }
  return Status::Ok();
}

Status ApplyMaxToKeep(const std::string& model_dir, int max_to_keep,
                      std::vector<std::string>* removed) {
  if (max_to_keep <= 0) return Status::Ok();
  PS_ASSIGN_OR_RETURN(auto list, ListCheckpoints(model_dir));
  if (list.size() <= static_cast<size_t>(max_to_keep)) return Status::Ok();
  const size_t excess = list.size() - static_cast<size_t>(max_to_keep);
  for (size_t i = 0; i < excess; ++i) {
    const std::string& dir = list[i].dir;
    PS_RETURN_IF_ERROR(RemoveFile(dir + "/" + kManifestFile, removed));
    PS_RETURN_IF_ERROR(FsyncDir(dir));
    PS_RETURN_IF_ERROR(RemoveCheckpointDir(dir, removed));
  }
  return FsyncDir(model_dir);
}

}  // namespace ps::ckpt
