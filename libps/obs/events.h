// TensorBoard event files, written without a protobuf library.
//
// A file is a sequence of TFRecords, each
//   u64 length (little-endian) | u32 MaskedCrc32c(length bytes) | data | u32 MaskedCrc32c(data)
// whose data is one serialized tensorflow.Event (tensorflow/core/util/event.proto):
//   Event   { double wall_time = 1; int64 step = 2;
//             oneof what { string file_version = 3; Summary summary = 5; } }
//   Summary { repeated Value value = 1; }                 (framework/summary.proto)
//   Value   { string tag = 1; oneof value { float simple_value = 2; } }
// The first record has file_version "brain.Event:2"; every later record is one scalar.
// Fields are encoded as proto3 does: a zero step or wall_time is left out, simple_value
// (a oneof member) is always written. TensorBoard (and tf.compat.v1.train.summary_iterator)
// reads these files; point it at the directory (model_dir for training, model_dir/eval for
// the evaluator: TensorBoard shows them as the runs "." and "eval").
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "libps/core/files.h"
#include "libps/core/status.h"

namespace ps::obs {

inline constexpr char kEventFileVersion[] = "brain.Event:2";

// Seconds since the epoch, with sub-second precision (the Event wall_time unit).
double WallTimeNow();

// "events.out.tfevents.<unix_secs>.<hostname>", TensorFlow's naming; TensorBoard picks up
// every file whose name contains "tfevents".
std::string EventFileName(double wall_time, std::string_view hostname);

// The serialized Event protos, for tests and for anyone writing records themselves.
std::string EncodeFileVersionEvent(double wall_time, std::string_view file_version);
std::string EncodeScalarEvent(double wall_time, int64_t step, std::string_view tag, float value);
// One TFRecord around `data`: header, data, footer.
std::string FrameRecord(std::string_view data);

// Appends scalar events to a new event file in a directory. Every Add* writes one whole
// record with one write(2) (no fsync): a crash loses at most the record being written, a
// full disk loses the records that do not fit (never half of one: AppendOnlyFile), and
// TensorBoard sees each point as soon as it is added. Not thread-safe: one thread at a
// time (the chief's reporting thread, the evaluator's loop). Movable.
class EventWriter {
 public:
  // Creates `dir` (with parents) and a new file EventFileName(file_wall_time, hostname)
  // in it (".1", ".2", ... appended if that name is taken, never overwriting), and
  // writes the file_version record with `file_wall_time`. IoError naming the path.
  static Result<EventWriter> Open(const std::string& dir, double file_wall_time = WallTimeNow());

  // One Event{wall_time, step, summary{value{tag, simple_value = float(value)}}}.
  // wall_time: seconds since the epoch. A failed write loses this record only.
  Status AddScalar(std::string_view tag, int64_t step, double value, double wall_time);
  Status AddScalar(std::string_view tag, int64_t step, double value) {
    return AddScalar(tag, step, value, WallTimeNow());
  }

  const std::string& path() const { return file_.path(); }

 private:
  EventWriter() = default;

  AppendOnlyFile file_;
};

// One scalar read back from an event file.
struct ScalarEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string tag;
  float value = 0;

  bool operator==(const ScalarEvent&) const = default;
};

struct EventFileContents {
  std::string file_version;          // of the first record; empty if it has none
  std::vector<ScalarEvent> scalars;  // in file order; one per simple_value Value
};

// Decodes an event file, checking both CRCs of every record and the protobuf structure.
// Unknown fields are skipped as protobuf does (other Summary value kinds, metadata...).
// DataLoss "<path>: record N at offset O: <problem>" for a CRC mismatch, a truncated record
// or a malformed message; IoError when the file cannot be read.
Result<EventFileContents> ReadEventFile(const std::string& path);
// ReadEventFile(path).scalars.
Result<std::vector<ScalarEvent>> ReadEvents(const std::string& path);

// The event files (names containing "tfevents") directly in `dir`, sorted by name; none
// when `dir` does not exist.
std::vector<std::string> ListEventFiles(const std::string& dir);

}  // namespace ps::obs
