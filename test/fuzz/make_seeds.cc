// Writes the seed corpus: `fuzz_make_seeds DIR` fills DIR/<target>/ with small valid
// inputs (and a few near misses) for every fuzz target. Its output is checked in as
// test/fuzz/corpus/; run it again only when a format changes.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_file.h"
#include "libps/data/tf_example.h"
#include "libps/data/tfrecord.h"
#include "libps/net/frame.h"
#include "libps/proto/codec.h"

namespace fs = std::filesystem;
using namespace ps;

namespace {

fs::path g_root;

void Put(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_root / target);
  std::ofstream out(g_root / target / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
template <typename C>
std::string Str(const C& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}
std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string Gzip(const std::string& bytes) {
  z_stream zs{};
  deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, static_cast<uLong>(bytes.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

void Wire() {
  Put("frame_header", "small", Str(net::EncodeHeader({100, 0})));
  Put("frame_header", "payload", Str(net::EncodeHeader({4096, 1 << 20})));
  std::string limits(12, '\0');
  limits[1] = 0x10;  // max envelope 4096, max payload 0
  Put("frame_header", "with_limits", Str(net::EncodeHeader({4096, 0})) + limits);

  proto::ShardDef def{.layout = {.var = "emb",
                                 .shard = 1,
                                 .num_shards = 2,
                                 .row_begin = 5,
                                 .rows = 5,
                                 .cols = 4,
                                 .full_shape = {10, 2, 2},
                                 .lazy = false},
                      .init = {.kind = proto::InitKind::kUniform, .minval = -1, .maxval = 1},
                      .seed = 5};
  proto::CreateShards cs;
  cs.optimizer.rule = proto::Adam{.beta_1 = 0.9, .beta_2 = 0.999, .epsilon = 1e-7};
  cs.optimizer.learning_rate = 0.01;
  cs.optimizer.schedule =
      proto::ExponentialSchedule{.decay_steps = 100, .decay_rate = 0.9, .staircase = true};
  cs.shards = {def};
  cs.shards.push_back(def);
  cs.shards.back().layout.lazy = true;
  cs.shards.back().layout.shard = 0;
  cs.shards.back().layout.row_begin = 0;
  cs.shards.back().row_policy = {.admit_min_count = 3, .ttl_steps = 1000, .max_rows = 500};
  cs.update = {.mode = proto::UpdateMode::kSync, .replicas_to_aggregate = 2, .num_workers = 2};
  proto::CreateShards ftrl = cs;
  ftrl.optimizer.rule =
      proto::Ftrl{.learning_rate_power = -0.5, .initial_accumulator_value = 0.1, .l1 = 0.01};
  ftrl.optimizer.schedule = proto::CosineSchedule{.decay_steps = 10, .alpha = 0.1};

  proto::PsStatus ps_status;
  ps_status.generation = 3;
  ps_status.update.mode = "sync";
  proto::ChiefStatus chief;
  chief.state = "training";
  chief.tasks = {{"ps:0", "ready", ""}, {"worker:0", "running", "boom"}};
  proto::WorkerLoad w;
  w.task = "worker:0";
  w.step_ms = 3.5;
  w.data_frac = 0.25;
  chief.workers = {w};
  proto::PsLoad p;
  p.task = "ps:0";
  p.state = "ok";
  p.update = proto::PsUpdateFigures{.mode = "async"};
  chief.ps = {p};

  proto::Slice rows{.var = "emb/part_0", .shard = 0, .all_rows = false, .rows = {1, 5, 9}};
  proto::Slice all{.var = "dense/kernel", .shard = 0, .all_rows = true, .rows = {}};
  proto::HelloReply hello_reply;
  hello_reply.identity.role = proto::Role::kPs;
  hello_reply.identity.nonce = {4};
  hello_reply.proof = {5};
  hello_reply.secret_required = true;
  const std::vector<std::pair<const char*, proto::Body>> bodies = {
      {"hello",
       proto::Hello{
           .role = proto::Role::kWorker, .task_index = 1, .cluster_id = 42, .nonce = {1, 2, 3}}},
      {"hello_reply", hello_reply},
      {"hello_proof", proto::HelloProof{{9, 9, 9}}},
      {"error", proto::Error{3, "bad"}},
      {"ack", proto::Ack{}},
      {"ping", proto::Ping{}},
      {"shutdown", proto::Shutdown{"done"}},
      {"create_shards", cs},
      {"create_shards_ftrl", ftrl},
      {"pull", proto::Pull{{rows, all}, 1, 7}},
      {"pull_reply", proto::PullReply{{12, 40}, {3, 4}}},
      {"push", proto::Push{{rows}, 10, 11, 1, 7, false}},
      {"push_pull", proto::Push{{rows}, 10, 11, -1, -1, false, proto::Pull{{rows, all}}}},
      {"push_reply", proto::PushReply{11, 0, 1}},
      {"push_reply_pull", proto::PushReply{11, 0, 0, proto::PullReply{{12, 40}, {}}}},
      {"start_job", proto::StartJob{"{}", 0, 2}},
      {"run_steps", proto::RunSteps{100, 10}},
      {"run_steps_reply", proto::RunStepsReply{.steps = 10, .examples = 1280, .loss_sum = 3.5}},
      {"stop", proto::Stop{"user"}},
      {"get_status", proto::GetStatus{}},
      {"ps_status", proto::PsStatusReply{ps_status}},
      {"chief_status", proto::ChiefStatusReply{chief}},
      {"save", proto::Save{"/tmp/m", 100}},
      {"save_reply", proto::SaveReply{"ps-0.shard", 1234, 99}},
      {"restore", proto::Restore{"/tmp/m", 100}},
      {"evaluate_shard", proto::EvaluateShard{.step = 200, .shard = 1, .num_shards = 2}},
      {"evaluate_shard_reply",
       proto::EvaluateShardReply{{{.examples = 3, .loss_sum = 1.5, .correct = 2, .scores = 3}}}},
  };
  uint64_t id = 1;
  for (const auto& [name, body] : bodies) {
    Put("envelope", name, Str(proto::Encode({id++, false, 2, body})));
  }
}

void Config() {
  Put("tf_config", "worker",
      R"({"cluster":{"chief":["localhost:2222"],"worker":["localhost:2223","h2:2224"],"ps":["10.0.0.1:2225"]},)"
      R"("task":{"type":"worker","index":1},"rpc_layer":"grpc","environment":"cloud"})");
  Put("tf_config", "evaluator",
      R"({"cluster":{"evaluator":["[::1]:2226"]},"task":{"type":"evaluator","index":0}})");
  Put("tf_config", "ps",
      R"({"cluster":{"worker":["a:1"],"ps":["b:2","c:3"]},"task":{"type":"ps","index":1}})");
  Put("tf_config", "cluster_file",
      R"({"chief":["localhost:2222"],"worker":["localhost:2223"],"ps":["localhost:2224"]})");
  for (const auto& f : fs::directory_iterator(fs::path(PSTRAIN_SOURCE_DIR) / "configs")) {
    const std::string name = f.path().filename().string();
    if (name.starts_with("job-")) Put("job", name, ReadFile(f.path()));
    if (name.starts_with("cluster-")) Put("tf_config", name, ReadFile(f.path()));
  }
  ckpt::Manifest m;
  m.global_step = 7;
  m.unix_time = 1732268000.5;
  m.num_ps = 2;
  m.shards = {{"ps-0.shard", 1000, 17}, {"ps-1.shard", 2000, 18}};
  m.extra = Json::object({{"job", "x"}});
  Put("manifest", "manifest", ckpt::ManifestToJson(m).dump());
  Put("manifest", "pointer",
      "model_checkpoint_path: \"ckpt-7\"\nall_model_checkpoint_paths: \"ckpt-7\"\n");
}

void Shards() {
  const fs::path tmp = g_root / "tmp.shard";
  auto w = ckpt::ShardWriter::Create(tmp.string(), 1, 7);
  if (!w.ok()) {
    std::cerr << w.status().message() << "\n";
    std::exit(1);
  }
  std::vector<float> values(12, 0.5f), m(12, 0.25f);
  ckpt::ShardRecordView dense;
  dense.layout = {.var = "w",
                  .shard = 0,
                  .num_shards = 1,
                  .row_begin = 0,
                  .rows = 3,
                  .cols = 4,
                  .full_shape = {3, 4},
                  .lazy = false};
  dense.values = values;
  dense.slots = {{"m", m}};
  Status st = w->Append(dense);
  std::vector<int64_t> ids = {2, 5};
  std::vector<float> lazy_values(8, 1.5f), acc(8, 0.1f);
  ckpt::ShardRecordView lazy;
  lazy.layout = {.var = "emb",
                 .shard = 1,
                 .num_shards = 2,
                 .row_begin = 50,
                 .rows = 50,
                 .cols = 4,
                 .full_shape = {100, 4},
                 .lazy = true};
  lazy.values = lazy_values;
  lazy.slots = {{"accumulator", acc}};
  lazy.row_ids = ids;
  if (st.ok()) st = w->Append(lazy);
  auto info = st.ok() ? w->Commit() : Result<ckpt::ShardFileInfo>(st);
  if (!info.ok()) {
    std::cerr << info.status().message() << "\n";
    std::exit(1);
  }
  Put("shard_file", "two_records", ReadFile(tmp));
  fs::remove(tmp);
}

void Data() {
  // idx: u16 images length, idx3 images (2 of 2x2), idx1 labels.
  const std::string images = std::string("\0\0\x08\x03\0\0\0\x02\0\0\0\x02\0\0\0\x02", 16) +
                             "\x00\x10\x80\xff\x01\x02\x03\x04";
  const std::string labels = std::string("\0\0\x08\x01\0\0\0\x02", 8) + "\x01\x03";
  Put("idx", "two",
      std::string(1, static_cast<char>(images.size())) + std::string(1, '\0') + images + labels);
  Put("idx", "gzip", [&] {
    std::string g = Gzip(images);
    return std::string(1, static_cast<char>(g.size())) + std::string(1, '\0') + g + Gzip(labels);
  }());

  Put("libsvm", "binary", "+1 1:0.5 3:1 7:2.5\n-1 2:1 # comment\n\n+1 10:3\n");
  Put("libsvm", "fields", "1 1:1 12:0.5 41:2\n0 0:1 39:1\n");
  Put("libsvm", "multiclass", "0 1:1\n4 999:0.25 1000:1\n2 5:5\n");
  Put("libsvm", "gzip", Gzip("+1 1:0.5 3:1\n-1 2:1\n"));

  Put("csv", "numeric", "label,a,b,c,d\n1,0.5,2,x,y\n0,\"1e3\",-2,\"q\"\"z\",x\n1,3,4,x,zz\n");
  Put("csv", "tabs", "label\ta\tother\nyes\t1.5\tignored\nno\t-2\t\n");

  std::string records;
  std::string record_0;
  for (int64_t k = 0; k < 3; ++k) {
    data::TfExampleBuilder b;
    const int64_t click = k % 2, site = k % 10;
    const std::vector<int64_t> user{k, k + 1};
    const std::vector<float> x{static_cast<float>(k), static_cast<float>(-k)};
    const std::vector<std::string> country{k == 0 ? "de" : "xx"};
    const std::vector<std::string> query{"q" + std::to_string(k)};
    const std::vector<float> weight{static_cast<float>(k) / 10};
    b.AddInt64("click", std::span(&click, 1));
    b.AddFloat("x", x);
    b.AddInt64("site", std::span(&site, 1));
    if (k != 1) b.AddInt64("user", user);
    b.AddBytes("country", country);
    b.AddBytes("query", query);
    b.AddFloat("query_w", weight);
    std::string rec;
    b.AppendTo(&rec);
    Put("tf_example", "example_" + std::to_string(k), rec);
    data::AppendTfRecord(rec, &records);
  }
  Put("tfrecord", "three", records);
  Put("tfrecord", "gzip", Gzip(records));
  std::string bad = records;
  bad[bad.size() - 1] ^= 1;  // the last record's data CRC
  Put("tfrecord", "bad_crc", bad);

  auto line = [](const std::string& label, std::vector<std::string> ints,
                 std::vector<std::string> cats) {
    ints.resize(13);
    cats.resize(26);
    std::string s = label;
    for (const auto& v : ints) s += "\t" + v;
    for (const auto& v : cats) s += "\t" + v;
    return s + "\n";
  };
  Put("criteo_tsv", "standard",
      line("1", {"7", "", "0", "-1"}, {"68fd1e64", "80e26c9b", "", "1f"}) +
          line("0", {"3"}, {"a", "3", "3", "", "1f"}));
  Put("criteo_tsv", "small", "1\t5\t\t05db9164\t\t1\n0\t0\t2\ta\tb\tc\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds DIR\n";
    return 2;
  }
  g_root = argv[1];
  Wire();
  Config();
  Shards();
  Data();
  return 0;
}
