#include "test/fuzz/fuzz_targets.h"

#include <sys/mman.h>
#include <unistd.h>

#include "libps/core/log.h"

namespace ps::fuzz {
namespace {

constexpr Target kTargets[] = {
    {"frame_header", FrameHeader},
    {"envelope", Envelope},
    {"tf_config", TfConfig},
    {"job", Job},
    {"manifest", Manifest},
    {"shard_file", ShardFile},
    {"idx", Idx},
    {"libsvm", LibSvm},
    {"csv", Csv},
    {"tfrecord", TfRecord},
    {"tf_example", TfExample},
    {"criteo_tsv", CriteoTsv},
};

}  // namespace

std::span<const Target> Targets() { return kTargets; }

const Target* FindTarget(std::string_view name) {
  for (const Target& t : kTargets) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

void QuietLogs() { log::SetLevel(log::Level::kError); }

MemFile::MemFile() {
  fd_ = memfd_create("pstrain-fuzz", MFD_CLOEXEC);
  FUZZ_CHECK(fd_ >= 0);
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

MemFile::~MemFile() { close(fd_); }

void MemFile::Set(Bytes data) {
  FUZZ_CHECK(ftruncate(fd_, 0) == 0);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(done));
    FUZZ_CHECK(n > 0);
    done += static_cast<size_t>(n);
  }
}

}  // namespace ps::fuzz
