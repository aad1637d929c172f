#include "libps/cluster/slurm.h"

#include <cstdlib>

namespace ps::cluster {

namespace {

constexpr size_t kMaxHosts = 100000;

// Appends instead of "\"" + std::string(text): GCC 12 warns (-Wrestrict, a false positive
// fixed in GCC 13) on inserting a literal before a temporary string.
std::string Quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.append(1, '"').append(text).append(1, '"');
  return out;
}

// A decimal number of at most 9 digits; nullopt otherwise.
std::optional<int> Number(std::string_view text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

// "1-3,5,07-09" -> {"1","2","3","5","07","08","09"}.
Result<std::vector<std::string>> ExpandRanges(std::string_view ranges, const std::string& where) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t comma = ranges.find(',', start);
    std::string_view item = ranges.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    size_t dash = item.find('-');
    std::string_view lo_text = item.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    auto lo = Number(lo_text), hi = Number(hi_text);
    if (!lo || !hi)
      return InvalidArgument(where + ": " + Quoted(item) + " is not a number or a range a-b");
    if (*hi < *lo) return InvalidArgument(where + ": range " + std::string(item) + " is reversed");
    if (out.size() + static_cast<size_t>(*hi - *lo) >= kMaxHosts) {
      return InvalidArgument(where + ": more than " + std::to_string(kMaxHosts) + " hosts");
    }
    for (int v = *lo; v <= *hi; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// One part ("rack[1-2]-n[01,03]") into host names, bracket group by bracket group.
Status ExpandPart(std::string_view part, const std::string& where, std::vector<std::string>* out) {
  size_t open = part.find('[');
  if (open == std::string_view::npos) {
    if (part.find(']') != std::string_view::npos) return InvalidArgument(where + ": unmatched ']'");
    out->emplace_back(part);
    return Status::Ok();
  }
  size_t close = part.find(']', open);
  if (close == std::string_view::npos) return InvalidArgument(where + ": unclosed '['");
  PS_ASSIGN_OR_RETURN(auto values, ExpandRanges(part.substr(open + 1, close - open - 1), where));
  std::vector<std::string> tails;
  PS_RETURN_IF_ERROR(ExpandPart(part.substr(close + 1), where, &tails));
  const std::string_view prefix = part.substr(0, open);
  for (const auto& v : values) {
    for (const auto& t : tails) {
      if (out->size() >= kMaxHosts)
        return InvalidArgument(where + ": more than " + std::to_string(kMaxHosts) + " hosts");
      out->push_back(std::string(prefix) + v + t);
    }
  }
  return Status::Ok();
}

Result<std::string> Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return InvalidArgument(std::string(name) + " is not set (run this inside an srun step)");
  }
  return std::string(value);
}

Result<int> EnvInt(const char* name) {
  PS_ASSIGN_OR_RETURN(std::string text, Env(name));
  auto value = Number(text);
  if (!value) return InvalidArgument(std::string(name) + ": " + Quoted(text) + " is not a count");
  return *value;
}

}  // namespace

Result<std::vector<std::string>> ExpandSlurmHostList(std::string_view text, std::string_view what) {
  const std::string where = std::string(what) + ": " + Quoted(text);
  if (text.empty()) return InvalidArgument(where + ": empty host list");
  std::vector<std::string> hosts;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '[') ++depth;
    if (i < text.size() && text[i] == ']') --depth;
    if (i < text.size() && (text[i] != ',' || depth > 0)) continue;
    std::string_view part = text.substr(start, i - start);
    if (part.empty()) return InvalidArgument(where + ": empty host name");
    PS_RETURN_IF_ERROR(ExpandPart(part, where, &hosts));
    start = i + 1;
  }
  for (const auto& h : hosts) {
    if (h.empty()) return InvalidArgument(where + ": empty host name");
  }
  return hosts;
}

Result<std::vector<int>> ExpandSlurmTasksPerNode(std::string_view text, std::string_view what) {
  const std::string where = std::string(what) + ": " + Quoted(text);
  std::vector<int> out;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string_view item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    std::string_view count_text = item, repeat_text = "1";
    size_t paren = item.find('(');
    if (paren != std::string_view::npos) {
      if (item.size() < paren + 4 || item.substr(paren, 2) != "(x" || item.back() != ')') {
        return InvalidArgument(where + ": " + Quoted(item) + " is not N or N(xM)");
      }
      count_text = item.substr(0, paren);
      repeat_text = item.substr(paren + 2, item.size() - paren - 3);
    }
    auto count = Number(count_text), repeat = Number(repeat_text);
    if (!count || !repeat || *count < 1 || *repeat < 1) {
      return InvalidArgument(where + ": " + Quoted(item) + " is not N or N(xM) with N, M >= 1");
    }
    if (out.size() + static_cast<size_t>(*repeat) > kMaxHosts) {
      return InvalidArgument(where + ": more than " + std::to_string(kMaxHosts) + " nodes");
    }
    out.insert(out.end(), static_cast<size_t>(*repeat), *count);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<SlurmStep> SlurmStepFromEnvironment() {
  SlurmStep step;
  PS_ASSIGN_OR_RETURN(step.procid, EnvInt("SLURM_PROCID"));
  PS_ASSIGN_OR_RETURN(step.num_tasks, EnvInt("SLURM_STEP_NUM_TASKS"));
  PS_ASSIGN_OR_RETURN(step.nodelist, Env("SLURM_STEP_NODELIST"));
  PS_ASSIGN_OR_RETURN(step.tasks_per_node, Env("SLURM_STEP_TASKS_PER_NODE"));
  return step;
}

Result<TfConfig> TfConfigFromSlurm(const SlurmStep& step, const SlurmRoles& roles) {
  if (roles.ps < 1) return InvalidArgument("--ps: must be >= 1");
  if (roles.workers < 1) return InvalidArgument("--workers: must be >= 1");
  if (roles.base_port < 1 || roles.base_port > 65535)
    return InvalidArgument("--base-port: must be in 1..65535");
  PS_ASSIGN_OR_RETURN(auto hosts, ExpandSlurmHostList(step.nodelist, "SLURM_STEP_NODELIST"));
  PS_ASSIGN_OR_RETURN(auto per_node,
                      ExpandSlurmTasksPerNode(step.tasks_per_node, "SLURM_STEP_TASKS_PER_NODE"));
  if (hosts.size() != per_node.size()) {
    return InvalidArgument("SLURM_STEP_TASKS_PER_NODE: " + std::to_string(per_node.size()) +
                           " node(s), but " + "SLURM_STEP_NODELIST has " +
                           std::to_string(hosts.size()));
  }
  // Every task of the step, node by node: host:(base_port + slot on the node).
  std::vector<HostPort> addresses;
  for (size_t n = 0; n < hosts.size(); ++n) {
    if (roles.base_port + per_node[n] - 1 > 65535) {
      return InvalidArgument("--base-port: " + std::to_string(roles.base_port) + " + " +
                             std::to_string(per_node[n]) + " tasks on " + hosts[n] +
                             " passes port 65535");
    }
    for (int slot = 0; slot < per_node[n]; ++slot) {
      addresses.push_back({hosts[n], static_cast<uint16_t>(roles.base_port + slot)});
    }
  }
  if (static_cast<int>(addresses.size()) != step.num_tasks) {
    return InvalidArgument("SLURM_STEP_TASKS_PER_NODE: " + std::to_string(addresses.size()) +
                           " tasks, but SLURM_STEP_NUM_TASKS is " + std::to_string(step.num_tasks));
  }
  const int wanted = 1 + (roles.evaluator ? 1 : 0) + roles.ps + roles.workers;
  if (wanted != step.num_tasks) {
    return InvalidArgument("--ps " + std::to_string(roles.ps) + " --workers " +
                           std::to_string(roles.workers) + (roles.evaluator ? " --evaluator" : "") +
                           " and one chief need " + std::to_string(wanted) +
                           " tasks; the step has " + std::to_string(step.num_tasks) + " (srun -n " +
                           std::to_string(wanted) + ")");
  }
  if (step.procid < 0 || step.procid >= step.num_tasks) {
    return InvalidArgument("SLURM_PROCID: " + std::to_string(step.procid) +
                           " is not below SLURM_STEP_NUM_TASKS " + std::to_string(step.num_tasks));
  }
  // Ranks by role in TF's order (sorted job names): chief, evaluator, ps, worker.
  TfConfig config;
  const std::pair<TaskType, int> order[] = {{TaskType::kChief, 1},
                                            {TaskType::kEvaluator, roles.evaluator ? 1 : 0},
                                            {TaskType::kPs, roles.ps},
                                            {TaskType::kWorker, roles.workers}};
  size_t rank = 0;
  for (const auto& [type, count] : order) {
    for (int i = 0; i < count; ++i, ++rank) {
      if (static_cast<int>(rank) == step.procid) config.task = {type, i};
      config.cluster.of(type).push_back(addresses[rank]);
    }
  }
  PS_RETURN_IF_ERROR(ValidateTfConfig(config, "TF_CONFIG from Slurm"));
  return config;
}

}  // namespace ps::cluster
