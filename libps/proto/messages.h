// The messages of the pstrain protocol as plain C++ values. libps/proto/codec.h turns
// them into verified FlatBuffers and back; nothing outside libps/proto sees FlatBuffers.
// Field meanings are documented in pstrain.fbs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "libps/cluster/shard_layout.h"

namespace ps::proto {

// 2: typed status replies (PsStatusReply, ChiefStatusReply) and CreateShards as typed
// tables (ShardLayout, Initializer, Optimizer, Update) instead of JSON strings.
// 3: ShardDef.row_policy (admission and eviction of lazy rows) and the ps's row figures
// (PsStatus.rows): a version-2 ps would ignore the policy and train differently.
// 4: Update.sparse_mode and ShardDef.sparse (hybrid update modes): a version-3 ps would
// train the sparse variables in the dense variables' mode.
// 5: Push.pull and PushReply.pull (a push that carries a pull, the worker's
// combine_push_pull): a version-4 ps would apply the push and drop the pull.
inline constexpr uint32_t kProtocolVersion = 5;

enum class Role : int8_t {
  kUnknown = 0,
  kChief = 1,
  kWorker = 2,
  kPs = 3,
  kEvaluator = 4,
  kClient = 5
};
const char* RoleName(Role role);

struct Hello {
  uint32_t version = kProtocolVersion;
  Role role = Role::kUnknown;
  int32_t task_index = 0;
  uint64_t cluster_id = 0;
  std::vector<uint8_t> nonce;
};
struct HelloReply {
  Hello identity;  // the server's side: its version, role, task, cluster id and nonce
  std::vector<uint8_t> proof;
  bool secret_required = false;
};
struct HelloProof {
  std::vector<uint8_t> proof;
};
struct Error {
  int32_t code = 0;
  std::string message;
};
struct Ack {};
struct Ping {};
struct Shutdown {
  std::string reason;
  bool retryable = false;
};

// The wire forms of model::InitSpec, server::OptimizerSpec and server::UpdateSpec (this
// module cannot see those); libps/server/wire_specs.h converts, by field name.
enum class InitKind : int8_t {
  kZeros = 0,
  kOnes = 1,
  kConstant = 2,
  kUniform = 3,
  kNormal = 4,
  kTruncatedNormal = 5,
  kGlorotUniform = 6
};
struct Initializer {
  InitKind kind = InitKind::kZeros;
  double value = 0;               // constant
  double minval = 0, maxval = 0;  // uniform
  double mean = 0, stddev = 0;    // normal, truncated_normal
  bool operator==(const Initializer&) const = default;
};
struct RowPolicy {
  int64_t admit_min_count = 1;
  int64_t ttl_steps = 0;
  int64_t max_rows = 0;
  bool operator==(const RowPolicy&) const = default;
};
struct ShardDef {
  cluster::ShardLayout layout;
  Initializer init;
  uint64_t seed = 0;
  RowPolicy row_policy = {};
  bool sparse = false;
  bool operator==(const ShardDef&) const = default;
};

// Learning-rate schedules: the alternative is the schedule type.
struct ConstantSchedule {
  bool operator==(const ConstantSchedule&) const = default;
};
struct ExponentialSchedule {
  int64_t decay_steps = 0;
  double decay_rate = 0;
  bool staircase = false;
  bool operator==(const ExponentialSchedule&) const = default;
};
struct CosineSchedule {
  int64_t decay_steps = 0;
  double alpha = 0;
  bool operator==(const CosineSchedule&) const = default;
};
using Schedule = std::variant<ConstantSchedule, ExponentialSchedule, CosineSchedule>;
// Optimizers: the alternative is the optimizer type and holds only its own parameters.
struct Sgd {
  double momentum = 0;
  bool nesterov = false;
  bool operator==(const Sgd&) const = default;
};
struct Adagrad {
  double initial_accumulator_value = 0, epsilon = 0;
  bool operator==(const Adagrad&) const = default;
};
struct Rmsprop {
  double rho = 0, momentum = 0, epsilon = 0;
  bool centered = false;
  bool operator==(const Rmsprop&) const = default;
};
struct Adam {
  double beta_1 = 0, beta_2 = 0, epsilon = 0;
  bool operator==(const Adam&) const = default;
};
struct Ftrl {
  double learning_rate_power = 0, initial_accumulator_value = 0, l1 = 0, l2 = 0, l2_shrinkage = 0,
         beta = 0;
  bool operator==(const Ftrl&) const = default;
};
using OptimizerRule = std::variant<Sgd, Adagrad, Rmsprop, Adam, Ftrl>;
struct Optimizer {
  OptimizerRule rule;
  double learning_rate = 0;
  Schedule schedule;
  int64_t warmup_steps = 0;
  bool operator==(const Optimizer&) const = default;
};
enum class UpdateMode : int8_t { kAsync = 0, kSync = 1, kBoundedStaleness = 2 };
struct Update {
  UpdateMode mode = UpdateMode::kAsync;
  int32_t replicas_to_aggregate = 0;
  int32_t staleness = 0;
  int32_t num_workers = 0;
  std::optional<UpdateMode> sparse_mode = std::nullopt;  // hybrid only
  bool operator==(const Update&) const = default;
};
struct CreateShards {
  Optimizer optimizer;
  std::vector<ShardDef> shards;
  Update update;
  bool operator==(const CreateShards&) const = default;
};
struct Slice {
  std::string var;
  int32_t shard = 0;
  bool all_rows = true;       // false: only `rows`
  std::vector<int64_t> rows;  // shard-local row indices
};
struct Pull {
  std::vector<Slice> items;
  int32_t worker = -1;
  int64_t clock = -1;
};
struct PullReply {
  std::vector<uint64_t> item_floats;
  std::vector<int64_t> versions;
};
struct Push {
  std::vector<Slice> items;
  int64_t global_step = 0;
  int64_t step_id = -1;
  int32_t worker = -1;
  int64_t clock = -1;
  bool idle = false;
  std::optional<Pull> pull = std::nullopt;  // async mode: pulled once the push is applied
};
struct PushReply {
  int64_t global_step = 0;
  int32_t skipped = 0;
  int32_t stale = 0;
  std::optional<PullReply> pull = std::nullopt;  // the push's pull, when it had one
};

// delta_base >= 0: a delta checkpoint against the checkpoint of step delta_parent
// (ckpt/checkpoint_dir.h, "Delta checkpoints").
struct Save {
  std::string model_dir;
  int64_t global_step = 0;
  int64_t delta_base = -1;
  int64_t delta_parent = -1;
};
struct SaveReply {
  std::string file;
  uint64_t bytes = 0;
  uint32_t digest = 0;
};
struct Restore {
  std::string model_dir;
  int64_t global_step = 0;
};
// Inline distributed evaluation (pstrain.fbs): the payload of the reply holds the scores
// and labels, `scores` of each per head in order.
struct EvaluateShard {
  int64_t step = 0;
  int32_t shard = 0;
  int32_t num_shards = 1;
};
struct HeadSums {
  int64_t examples = 0;
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t scores = 0;
  bool operator==(const HeadSums&) const = default;
};
struct EvaluateShardReply {
  std::vector<HeadSums> heads;
};

struct StartJob {
  std::string job_json;
  int32_t worker_index = 0;
  int32_t num_workers = 0;
};
// Streamed training data: the records a pack trains (pstrain.fbs, DataLease).
struct DataLease {
  int64_t seq = 0;
  std::string file;
  uint64_t begin = 0, end = 0;
  bool lines = false;
  uint64_t base_byte = 0;
  int64_t base_record = 0, start = 0, take = 0;
  uint64_t generation = 0;
};
struct RunSteps {
  int64_t first_step = 0;
  int32_t count = 0;
  std::optional<DataLease> lease = std::nullopt;
};
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
  int64_t skipped_records = 0;
  int64_t data_records = 0;
  uint64_t data_end_byte = 0;
  bool data_end = false;
  int64_t data_total = -1;
};

struct Stop {
  std::string reason;
};
struct ReleasePulls {
  std::string reason;
};  // chief -> ps (pstrain.fbs)
struct GetStatus {};

// --- status: what a ps answers to GetStatus, and the chief's whole-cluster status, which
// it fills once per sample and which `pstrain status`, train_metrics.jsonl, TensorBoard and
// `pstrain inspect` all render (libps/obs/status.h). Units are in the names.

// A ps task's update-mode figures (server::Service::UpdateStats).
struct PsUpdateFigures {
  std::string mode;  // "async" | "sync" | "bounded_staleness" | "dense sync, sparse async" | ...
  int64_t stale_dropped = 0;  // sync: gradients dropped because their update was applied
  int64_t waited_pulls = 0;   // pulls that waited (sync, bounded staleness)
  int64_t max_lead = 0;       // bounded staleness: the largest lead seen, in steps
  int64_t min_version = 0;    // sync: the lowest and highest update its shards applied (hybrid: its
                              // sync class's; none: the step it was restored to, else 0)
  int64_t max_version = 0;
  int64_t applied_on_arrival = 0;  // gradients (one shard's item of a push) applied as they came:
                                   // async, bounded staleness, a hybrid's async class
};
// A ps task's lazy-table row figures (server::StoreStats; admission and eviction in
// libps/server/store.h): gauges, then counters since it started.
struct PsRowFigures {
  int64_t lazy_shards = 0;        // lazy shards it holds
  int64_t live_rows = 0;          // their created rows now
  uint64_t admitted = 0;          // rows created by the admit_min_count-th push of their id
  uint64_t not_admitted = 0;      // gradient rows dropped because their row was not admitted yet
  uint64_t evicted_ttl = 0;       // rows evicted as not pushed for ttl_steps
  uint64_t evicted_max_rows = 0;  // rows evicted beyond max_rows
  bool operator==(const PsRowFigures&) const = default;
};
// A ps task's counters, monotonic since it started (uptime_sec ago).
struct PsStatus {
  uint64_t generation = 0;  // the newest chief's
  int64_t global_step = 0;  // of the last checkpoint saved or restored
  double uptime_sec = 0;
  int64_t shards = 0;
  uint64_t bytes_held = 0;  // values and optimizer slots of every shard
  uint64_t pull_requests = 0, push_requests = 0, failed_requests = 0;
  uint64_t bytes_pulled = 0, bytes_pushed = 0;  // tensor payload bytes
  uint64_t rows_pulled = 0, rows_pushed = 0;
  uint64_t requests = 0;  // every request its server handled
  uint64_t queue_depth = 0,
           max_queue_depth = 0;  // handler queue now / deepest since the last GetStatus
  uint64_t bytes_received = 0, bytes_sent = 0;  // whole frames
  PsUpdateFigures update;
  PsRowFigures rows = {};
};
struct PsStatusReply {
  PsStatus status;
};

// One worker over a load window (libps/obs/figures.h): steps is its total; the seconds
// are summed over the steps it finished in the window; the optional figures are absent
// when it finished none.
struct WorkerLoad {
  std::string task;   // "worker:1"
  std::string state;  // "running" | "idle" | "lost"
  int64_t steps = 0;
  double examples_per_s = 0;
  std::optional<double> step_ms;
  double data_s = 0, pull_s = 0, compute_s = 0, push_s = 0;
  std::optional<double> data_frac, pull_frac, compute_frac, push_frac;  // shares of their sum
};
// One ps over a load window: totals since it started, rates over window_sec by its clock.
// A ps that did not answer has state "no answer", `error`, and zeros elsewhere.
struct PsLoad {
  std::string task;     // "ps:0"
  std::string address;  // "host:port"
  std::string state;    // "ok" | "no answer"
  std::string error;
  uint64_t requests = 0, bytes_in = 0, bytes_out = 0;
  double requests_per_s = 0, bytes_in_per_s = 0, bytes_out_per_s = 0, rows_per_s = 0;
  uint64_t queue_depth = 0, max_queue_depth = 0, bytes_held = 0;
  int64_t shards = 0;
  double window_sec = 0;
  std::optional<PsUpdateFigures> update;
  std::optional<PsRowFigures> rows = std::nullopt;  // present when the ps holds lazy shards
  bool answered() const { return state == "ok"; }
};
struct TaskState {
  std::string task;   // "ps:0", "worker:1"
  std::string state;  // ps: "ready" | "lost"; worker: "connected" | "running" | "idle" | "lost"
  std::string last_error;  // empty: none
};
struct ChiefStatus {
  std::string state;  // "starting", "connecting", ..., "training", "checkpointing", ...
  int64_t global_step = 0;
  int64_t total_steps = 0;
  double examples_per_sec = 0;  // over the last log interval
  double elapsed_sec = 0;       // since the chief started
  std::string stop_reason;      // empty: no stop requested
  std::vector<TaskState> tasks;
  double load_window_sec = 0;  // what the workers' and ps' figures cover
  std::vector<WorkerLoad> workers;
  std::vector<PsLoad> ps;
  double epoch = -1;   // passes over in-memory train_data before global_step; -1: not known
  int64_t epochs = 0;  // the job's "epochs"; 0: not set
  // train_data.follow: files trained and waiting, and the data lag (arrival to last record
  // trained) of the file done last. files_done -1: not following; data_lag_sec -1: none.
  int64_t files_done = -1;
  int64_t files_waiting = 0;
  double data_lag_sec = -1;
};
struct ChiefStatusReply {
  ChiefStatus status;
};

using Body = std::variant<Hello, HelloReply, HelloProof, Error, Ack, Ping, Shutdown, CreateShards,
                          Pull, PullReply, Push, PushReply, StartJob, RunSteps, RunStepsReply, Stop,
                          GetStatus, PsStatusReply, ChiefStatusReply, Save, SaveReply, Restore,
                          EvaluateShard, EvaluateShardReply, ReleasePulls>;

// Name of the body's message type, for logs and errors ("Pull").
const char* BodyName(const Body& body);

struct Envelope {
  uint64_t request_id = 0;
  bool reply = false;
  uint64_t generation = 0;
  Body body;
};

}  // namespace ps::proto
