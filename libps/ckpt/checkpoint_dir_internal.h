// Internal to libps/ckpt: the directory scans that checkpoint_dir.cc and
// checkpoint_cleanup.cc share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libps/core/status.h"

namespace ps::ckpt::internal {

// A canonical non-negative decimal (no sign, no leading zero, at most 18 digits).
std::optional<int64_t> ParseDigits(std::string_view s);
// Canonical ckpt-<step> directories (not symlinks) in model_dir, unsorted; none when
// model_dir does not exist.
Result<std::vector<std::pair<int64_t, std::string>>> CheckpointDirs(const std::string& model_dir);
// The delta-<step> directories in a checkpoint directory, ascending.
Result<std::vector<std::pair<int64_t, std::string>>> DeltaDirs(const std::string& dir);

}  // namespace ps::ckpt::internal
