// The messages of the pstrain protocol as plain C++ values. libps/proto/codec.h turns
// them into verified FlatBuffers and back; nothing outside libps/proto sees FlatBuffers.
// Field meanings are documented in pstrain.fbs.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace ps::proto {

inline constexpr uint32_t kProtocolVersion = 1;

enum class Role : int8_t { kUnknown = 0, kChief = 1, kWorker = 2, kPs = 3, kEvaluator = 4, kClient = 5 };
const char* RoleName(Role role);

struct Hello {
  uint32_t version = kProtocolVersion;
  Role role = Role::kUnknown;
  int32_t task_index = 0;
  uint64_t cluster_id = 0;
  std::vector<uint8_t> nonce;
};
struct HelloReply {
  uint32_t version = kProtocolVersion;
  Role role = Role::kUnknown;
  int32_t task_index = 0;
  uint64_t cluster_id = 0;
  std::vector<uint8_t> nonce;
  std::vector<uint8_t> proof;
  bool secret_required = false;
};
struct HelloProof { std::vector<uint8_t> proof; };
struct Error { int32_t code = 0; std::string message; };
struct Ack {};
struct Ping {};
struct Shutdown { std::string reason; };

struct ShardDef {
  std::string var;
  int32_t shard = 0;
  int32_t num_shards = 1;
  int64_t row_begin = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int64_t> full_shape;
  std::string init_json;
  uint64_t seed = 0;
  bool lazy = false;  // ps::server::ShardDef::lazy
};
struct CreateShards { std::string optimizer_json; std::vector<ShardDef> shards; std::string update_json; };
struct Slice {
  std::string var;
  int32_t shard = 0;
  bool all_rows = true;       // false: only `rows`
  std::vector<int64_t> rows;  // shard-local row indices
};
struct Pull { std::vector<Slice> items; int32_t worker = -1; int64_t clock = -1; };
struct PullReply { std::vector<uint64_t> item_floats; std::vector<int64_t> versions; };
struct Push {
  std::vector<Slice> items;
  int64_t global_step = 0;
  int64_t step_id = -1;
  int32_t worker = -1;
  int64_t clock = -1;
  bool idle = false;
};
struct PushReply { int64_t global_step = 0; int32_t skipped = 0; int32_t stale = 0; };

struct Save { std::string model_dir; int64_t global_step = 0; };
struct SaveReply { std::string file; uint64_t bytes = 0; uint32_t digest = 0; };
struct Restore { std::string model_dir; int64_t global_step = 0; };

struct StartJob { std::string job_json; int32_t worker_index = 0; int32_t num_workers = 0; };
struct RunSteps { int64_t first_step = 0; int32_t count = 0; };
struct RunStepsReply {
  int32_t steps = 0;
  int64_t examples = 0;
  double loss_sum = 0;
  int64_t correct = 0;
  double data_seconds = 0;
  double pull_seconds = 0;
  double compute_seconds = 0;
  double push_seconds = 0;
  int32_t stale = 0;
};

struct Stop { std::string reason; };
struct GetStatus {};
struct StatusReply { std::string json; };

using Body = std::variant<Hello, HelloReply, HelloProof, Error, Ack, Ping, Shutdown,
                          CreateShards, Pull, PullReply, Push, PushReply,
                          StartJob, RunSteps, RunStepsReply,
                          Stop, GetStatus, StatusReply,
                          Save, SaveReply, Restore>;

// Name of the body's message type, for logs and errors ("Pull").
const char* BodyName(const Body& body);

struct Envelope {
  uint64_t request_id = 0;
  bool reply = false;
  uint64_t generation = 0;
  Body body;
};

}  // namespace ps::proto
