// Creating the job's variables on the ps tasks.
#include <algorithm>

#include "libps/chief/shell.h"
#include "libps/core/log.h"
#include "libps/core/text.h"
#include "libps/server/wire_specs.h"

namespace ps::chief {

Status Chief::CreateVariables(std::stop_token stop) {
  SetState("creating variables");
  PS_ASSIGN_OR_RETURN(auto model, model::BuildModel(job_.model, "job.model"));
  PS_ASSIGN_OR_RETURN(plan_, job::PlanVariables(job_, *model, static_cast<int>(ps_.size())));
  std::vector<proto::CreateShards> per_ps(ps_.size());
  for (auto& m : per_ps) {
    m.optimizer = ps::server::OptimizerToWire(job_.optimizer);
    m.update = ps::server::UpdateToWire(job_.update);
  }
  for (const auto& s : plan_.shards) {
    auto v = std::find_if(plan_.variables.begin(), plan_.variables.end(),
                          [&](const auto& d) { return d.name == s.layout.var; });
    per_ps[static_cast<size_t>(s.ps)].shards.push_back(
        ps::server::ShardDefToWire({.layout = s.layout,
                                    .init = v->init,
                                    .seed = job_.seed,
                                    .row_policy = v->rows,
                                    .sparse = v->sparse}));
  }
  create_msgs_ = per_ps;
  auto replies =
      CallEach(ps_, std::vector<proto::Body>(per_ps.begin(), per_ps.end()), net::Millis{0}, stop);
  for (size_t p = 0; p < ps_.size(); ++p) {
    auto& r = replies[p];
    if (!r.ok()) return r.status().WithContext("creating variables on " + ps_[p]->peer_name());
  }
  int64_t bytes = 0;
  int lazy = 0;
  int64_t sparse = 0;  // ShardDef::sparse_class
  for (const auto& v : plan_.variables) {
    if (v.lazy)
      ++lazy;
    else
      bytes += v.num_elements() * 4;
    if (v.sparse || v.lazy) ++sparse;
  }
  const auto vars = static_cast<int64_t>(plan_.variables.size());
  if (auto warning = ps::server::OneClassWarning(job_.update, vars - sparse, sparse, "job.update");
      !warning.empty()) {
    PS_LOG(Warning) << warning;
  }
  PS_LOG(Info) << plan_.variables.size() << " variables in " << plan_.shards.size() << " shards ("
               << Fixed(bytes / 1048576.0, 1) << " MiB"
               << (lazy > 0
                       ? " + " + std::to_string(lazy) + " lazy table(s), rows created on first push"
                       : "")
               << ") created on " << ps_.size() << " ps task(s)";
  return Status::Ok();
}

}  // namespace ps::chief
