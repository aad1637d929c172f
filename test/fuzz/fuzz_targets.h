// Fuzz entry points. Each takes any bytes and must neither crash, hang, leak nor trip a
// sanitizer; where its parser promises more (an accepted value re-encodes and decodes
// again, a decoded length is within its limit), FUZZ_CHECK aborts when the promise breaks.
// Two callers run the very same functions: the libFuzzer programs (fuzzer_main.cc, built
// with clang by scripts/fuzz.sh) and the regression test (regression_test.cc, built with
// the normal suite), which replays test/fuzz/corpus/<target>/* and
// test/fuzz/regressions/<target>/*. Not thread-safe: one call at a time per process.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace ps::fuzz {

using Bytes = std::span<const uint8_t>;
using Entry = void (*)(Bytes data);

struct Target {
  const char* name;  // the directory name under corpus/ and regressions/
  Entry entry;
};

// Every target, in scripts/fuzz.sh's order.
std::span<const Target> Targets();
// nullptr for an unknown name.
const Target* FindTarget(std::string_view name);
// Quiets the library's logging (warnings per bad record would swamp the fuzzer's output).
void QuietLogs();

// fuzz_wire.cc: libps/net frame header, libps/proto envelopes (every body type, the
// CreateShards and status codecs among them).
void FrameHeader(Bytes data);
void Envelope(Bytes data);
// fuzz_config.cc: TF_CONFIG and cluster files (libps/cluster/tf_config), job files
// (libps/job, with the model it builds and its variable plan), the MANIFEST and the
// checkpoint pointer (libps/ckpt/checkpoint_dir), shard files (libps/ckpt/shard_reader).
void TfConfig(Bytes data);
void Job(Bytes data);
void Manifest(Bytes data);
void ShardFile(Bytes data);
// fuzz_data.cc: the libps/data readers, each loaded whole and (where the format
// streams) record by record.
void Idx(Bytes data);
void LibSvm(Bytes data);
void Csv(Bytes data);
void TfRecord(Bytes data);
void TfExample(Bytes data);
void CriteoTsv(Bytes data);

// A file with the given contents that the readers open by path: a memfd reached through
// "/proc/self/fd/<fd>", so that nothing touches the disk. Rewritten by each Set.
class MemFile {
 public:
  MemFile();
  ~MemFile();
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }
  void Set(Bytes data);

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace ps::fuzz
