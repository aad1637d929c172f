// Fuzz entries for what the daemons read at start-up and from disk: TF_CONFIG and cluster
// files, job files, the MANIFEST and the checkpoint pointer, and shard files.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_file.h"
#include "libps/cluster/tf_config.h"
#include "libps/core/json.h"
#include "libps/job/job.h"
#include "test/fuzz/fuzz_targets.h"

namespace ps::fuzz {
namespace {

std::string_view Text(Bytes data) {
  return {reinterpret_cast<const char*>(data.data()), data.size()};
}

// model_dir/ckpt-7/ in a fresh temporary directory, removed at exit.
class CheckpointDir {
 public:
  CheckpointDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pstrain-fuzz-XXXXXX").string();
    FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr);
    model_dir_ = tmpl;
    ckpt_dir_ = model_dir_ + "/ckpt-7";
    std::filesystem::create_directory(ckpt_dir_);
  }
  ~CheckpointDir() {
    std::error_code ec;
    std::filesystem::remove_all(model_dir_, ec);
  }
  const std::string& model_dir() const { return model_dir_; }
  const std::string& ckpt_dir() const { return ckpt_dir_; }
  void Write(const std::string& path, std::string_view text) const {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    FUZZ_CHECK(out.good());
  }

 private:
  std::string model_dir_;
  std::string ckpt_dir_;
};

}  // namespace

// data: a TF_CONFIG (also tried as a cluster file and as one host:port). An accepted
// TF_CONFIG prints back (ToTfConfigJson) to one that parses to the same cluster id.
void TfConfig(Bytes data) {
  const std::string_view text = Text(data);
  (void)cluster::ParseHostPort(text);
  (void)cluster::ParseClusterFile(text, "cluster.json");
  auto config = cluster::ParseTfConfig(text);
  if (!config.ok()) return;
  FUZZ_CHECK(cluster::ValidateTfConfig(*config).ok());
  (void)cluster::ValidateForPsTraining(*config);
  const uint64_t id = cluster::ClusterId(config->cluster);
  auto again = cluster::ParseTfConfig(cluster::ToTfConfigJson(config->cluster, config->task));
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(cluster::ClusterId(again->cluster) == id);
}

// data: a job file. An accepted job builds its model and places its variables on 1 and
// 3 ps tasks, as the chief and every worker do. Plug-ins are not loaded: dlopen of a path
// named by the input runs code, it does not parse it.
void Job(Bytes data) {
  const std::string_view text = Text(data);
  if (text.find("plugins") != std::string_view::npos) return;
  auto json = ParseJson(text, "job.json");
  if (!json.ok()) return;
  auto job = job::ParseJob(*json, "/nonexistent");
  if (!job.ok()) return;
  auto model = model::BuildModel(job->model, "job.model");
  if (!model.ok()) return;
  for (int num_ps : {1, 3}) (void)job::PlanVariables(*job, **model, num_ps);
}

// data: the bytes of ckpt-7/MANIFEST and of the `checkpoint` pointer file.
void Manifest(Bytes data) {
  static const CheckpointDir dir;
  const std::string_view text = Text(data);
  dir.Write(dir.ckpt_dir() + "/" + ckpt::kManifestFile, text);
  dir.Write(dir.model_dir() + "/" + ckpt::kPointerFile, text);
  auto m = ckpt::ReadManifest(dir.ckpt_dir());
  if (m.ok()) {
    FUZZ_CHECK(m->global_step == 7);
    // What was accepted writes back to JSON that reads the same.
    auto again = ckpt::ManifestFromJson(ckpt::ManifestToJson(*m), "MANIFEST");
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->num_ps == m->num_ps && again->shards.size() == m->shards.size());
  }
  (void)ckpt::ReadCheckpointPointer(dir.model_dir());
  (void)ckpt::ListCheckpoints(dir.model_dir());
}

// data: one shard file, read every way the ps, the evaluator and `pstrain inspect` do.
void ShardFile(Bytes data) {
  static MemFile file;
  file.Set(data);
  (void)ckpt::Inspect(file.path(), true);
  auto reader = ckpt::ShardReader::Open(file.path());
  if (!reader.ok()) return;
  (void)reader->Summarize(false);
  auto records = reader->ReadRecords();
  if (records.ok()) {
    for (const ckpt::ShardRecord& r : *records) {
      FUZZ_CHECK(static_cast<int64_t>(r.values.size()) == r.meta.elements());
      FUZZ_CHECK(r.slots.size() == r.meta.slot_names.size());
    }
  }
  std::vector<float> block;
  ckpt::ShardReader::SparseSink sparse{
      .rows = [](const ckpt::RecordMeta&, std::span<const int64_t>) { return Status::Ok(); },
      .deleted = [](const ckpt::RecordMeta&, std::span<const int64_t>) { return Status::Ok(); },
      .data = [](const ckpt::RecordMeta&, std::string_view, int64_t,
                 std::span<const float>) { return Status::Ok(); }};
  (void)reader->ReadAll(
      [&block](const ckpt::RecordMeta& meta, std::string_view) -> Result<std::span<float>> {
        block.assign(static_cast<size_t>(meta.elements()), 0.0f);
        return std::span<float>(block);
      },
      &sparse);
}

}  // namespace ps::fuzz
