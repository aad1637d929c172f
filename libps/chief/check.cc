#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "libps/chief/chief.h"
#include "libps/cluster/shard_layout.h"
#include "libps/core/text.h"
#include "libps/data/dataset.h"
#include "libps/net/frame.h"
#include "libps/server/update.h"

namespace ps::chief {

namespace {
constexpr uint64_t kFloatBytes = 4;

std::string Bytes(uint64_t bytes) {
  return HumanBytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}
}  // namespace

Status CheckJob(const job::JobSpec& job, const cluster::ClusterSpec& cluster) {
  const int num_workers = cluster.count(cluster::TaskType::kWorker);
  const int num_ps = cluster.count(cluster::TaskType::kPs);
  server::UpdateSpec update = job.update;
  update.num_workers = num_workers;
  PS_RETURN_IF_ERROR(server::ValidateUpdate(update, "job.update"));
  std::error_code ec;
  if (std::filesystem::exists(job.model_dir, ec) &&
      !std::filesystem::is_directory(job.model_dir, ec))
    return InvalidArgument("job.model_dir: " + QuoteInput(job.model_dir) + " is not a directory");
  PS_RETURN_IF_ERROR(data::CheckDataFiles(job.train_data, "job.train_data", job.base_dir));
  if (!job.eval_data.is_null())
    PS_RETURN_IF_ERROR(data::CheckDataFiles(job.eval_data, "job.eval_data", job.base_dir));
  // A cluster whose membership comes from the running job (empty lists): no placement yet.
  if (num_ps == 0) return Status::Ok();
  PS_ASSIGN_OR_RETURN(auto model, model::BuildModel(job.model, "job.model"));
  auto planned = job::PlanVariables(job, *model, num_ps);
  if (!planned.ok()) return InvalidArgument("job.model: " + planned.status().message());
  const job::VariablePlan& plan = *planned;

  // Floats of each non-lazy variable on each ps, and the dense (pulled whole) ones' bytes.
  std::map<std::pair<int, std::string>, uint64_t> held;  // (ps, variable) -> floats
  std::vector<uint64_t> dense_bytes(static_cast<size_t>(num_ps), 0);
  std::vector<std::string> largest(static_cast<size_t>(num_ps));
  std::vector<uint64_t> largest_bytes(static_cast<size_t>(num_ps), 0);
  std::map<std::string, const model::VariableDef*> defs;
  for (const auto& v : plan.variables) defs[v.name] = &v;
  for (const auto& s : plan.shards) {
    const cluster::ShardLayout& l = s.layout;
    if (l.lazy) continue;
    const uint64_t floats = static_cast<uint64_t>(l.rows) * static_cast<uint64_t>(l.cols);
    held[{s.ps, l.var}] += floats;
    const auto def = defs.find(l.var);
    if (def != defs.end() && def->second->sparse) continue;
    const auto ps = static_cast<size_t>(s.ps);
    dense_bytes[ps] += floats * kFloatBytes;
    if (floats * kFloatBytes > largest_bytes[ps]) {
      largest_bytes[ps] = floats * kFloatBytes;
      largest[ps] = l.var;
    }
  }
  for (const auto& [key, floats] : held) {
    if (floats <= static_cast<uint64_t>(cluster::kMaxShardElements)) continue;
    const auto& [ps, var] = key;
    return InvalidArgument(
        "job.model: variable " + QuoteInput(var, '"') + " " +
        cluster::ShapeString(defs[var]->shape) + " puts " + Bytes(floats * kFloatBytes) +
        " on ps:" + std::to_string(ps) + " of " + std::to_string(num_ps) +
        " ps task(s): more than the 4 TiB (2^40 floats) of one "
        "variable a ps holds; make it lazy, or partition it (job.partitioner) over more ps tasks");
  }
  const uint64_t frame = net::Limits{}.max_payload_bytes;
  for (int ps = 0; ps < num_ps; ++ps) {
    const auto p = static_cast<size_t>(ps);
    if (dense_bytes[p] <= frame) continue;
    return InvalidArgument(
        "job.model: the dense variables on ps:" + std::to_string(ps) + " of " +
        std::to_string(num_ps) + " ps task(s) hold " + Bytes(dense_bytes[p]) +
        " (the largest: " + QuoteInput(largest[p], '"') + ", " + Bytes(largest_bytes[p]) +
        "): a step pulls and pushes them in one frame of at most " + HumanBytes(frame) +
        "; partition them (job.partitioner) over more ps tasks");
  }
  return Status::Ok();
}

}  // namespace ps::chief
