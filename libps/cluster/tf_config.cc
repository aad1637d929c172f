#include "libps/cluster/tf_config.h"

#include <cstdlib>
#include <initializer_list>
#include <map>

namespace ps::cluster {

namespace {

constexpr const char* kExpectedTypes = "(expected chief, worker, ps or evaluator)";
constexpr std::string_view kLegacyChiefName = "master";

// JSON-quoted and escaped, so odd bytes in user input cannot break the one-line error.
std::string Quote(std::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool IsHostNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

bool IsIpv6Char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
         c == '.';
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// "cluster has 2 worker tasks" / "cluster has 1 chief task".
std::string CountPhrase(int count, TaskType type) {
  return "cluster has " + std::to_string(count) + " " + TaskTypeName(type) +
         (count == 1 ? " task" : " tasks");
}

Status CheckTask(const ClusterSpec& spec, TaskId task, const std::string& type_path,
                 const std::string& index_path, const std::string& cluster_path) {
  // TensorFlow lets an evaluator be absent from `cluster` (it is not part of the
  // training cluster); its index must then be 0.
  if (task.type == TaskType::kEvaluator && spec.count(task.type) == 0) {
    if (task.index != 0) {
      return InvalidArgument(index_path + ": must be 0 for an evaluator that is not listed in " +
                             cluster_path);
    }
    return Status::Ok();
  }
  if (spec.count(task.type) == 0) {
    return InvalidArgument(type_path + ": " + Quote(TaskTypeName(task.type)) + " is not in " +
                           cluster_path);
  }
  if (!spec.has(task)) {
    return InvalidArgument(index_path + ": " + std::to_string(task.index) + " is out of range (" +
                           CountPhrase(spec.count(task.type), task.type) + ")");
  }
  return Status::Ok();
}

Result<TaskType> ParseTaskTypeOrError(std::string_view name, const std::string& path) {
  auto type = ParseTaskType(name);
  if (!type) {
    return InvalidArgument(path + ": unknown task type " + Quote(name) + " " + kExpectedTypes);
  }
  return *type;
}

// TF_CONFIG's task types: ParseTaskType plus "master", Estimator's and Kubeflow's legacy
// name of the chief.
Result<TaskType> ParseTfConfigType(std::string_view name, const std::string& path) {
  if (name == kLegacyChiefName) return TaskType::kChief;
  return ParseTaskTypeOrError(name, path);
}

// TensorFlow reads task.index with int(): a JSON integer or a string of decimal digits.
Status ReadTaskIndex(const Json& value, const std::string& path, int* out) {
  int64_t index = 0;
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    std::string_view digits = text;
    const bool negative = !digits.empty() && digits.front() == '-';
    if (negative) digits.remove_prefix(1);
    if (digits.empty() || digits.size() > 10) {
      return InvalidArgument(path + ": " + Quote(text) + " is not an integer");
    }
    for (char c : digits) {
      if (c < '0' || c > '9')
        return InvalidArgument(path + ": " + Quote(text) + " is not an integer");
      index = index * 10 + (c - '0');
    }
    if (negative) index = -index;
  } else if (value.is_number_integer()) {
    index = value.get<int64_t>();
  } else if (value.is_number_float()) {
    return InvalidArgument(path + ": expected an integer, got " + value.dump());
  } else {
    return InvalidArgument(path + ": expected an integer, got " + std::string(value.type_name()));
  }
  if (index < 0) return InvalidArgument(path + ": must be >= 0, got " + std::to_string(index));
  if (index > 1000000)
    return InvalidArgument(path + ": " + std::to_string(index) + " is too large");
  *out = static_cast<int>(index);
  return Status::Ok();
}

// Keys of `object` outside `known`, as warnings "<path>.<key>: unknown key, ignored".
void WarnUnknownKeys(const Json& object, const std::string& path,
                     std::initializer_list<std::string_view> known,
                     std::vector<std::string>* warnings) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool is_known = false;
    for (std::string_view k : known) is_known = is_known || it.key() == k;
    if (!is_known) warnings->push_back(path + "." + it.key() + ": unknown key, ignored");
  }
}

}  // namespace

const char* TaskTypeName(TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return "chief";
    case TaskType::kWorker:
      return "worker";
    case TaskType::kPs:
      return "ps";
    case TaskType::kEvaluator:
      return "evaluator";
  }
  return "unknown";
}

std::optional<TaskType> ParseTaskType(std::string_view name) {
  for (TaskType type : kAllTaskTypes) {
    if (name == TaskTypeName(type)) return type;
  }
  return std::nullopt;
}

std::string HostPort::ToString() const {
  std::string out = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return out + ":" + std::to_string(port);
}

Result<HostPort> ParseHostPort(std::string_view text) {
  const std::string q = Quote(text);
  if (text.empty()) return InvalidArgument("empty address (expected \"host:port\")");
  std::string_view host;
  std::string_view rest;  // what follows the host: ":port", or empty
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return InvalidArgument(q + " has an unclosed '['");
    host = text.substr(1, close - 1);
    rest = text.substr(close + 1);
    if (host.empty()) return InvalidArgument(q + " has an empty host");
    if (host.find(':') == std::string_view::npos) {
      return InvalidArgument(q + " has brackets around a host that is not an IPv6 address");
    }
    for (char c : host) {
      if (!IsIpv6Char(c)) {
        return InvalidArgument(q + " has an invalid character " + Quote(std::string(1, c)) +
                               " in its IPv6 address");
      }
    }
    if (!rest.empty() && rest.front() != ':') {
      return InvalidArgument(q + " has unexpected characters after ']'");
    }
  } else {
    if (text.find("://") != std::string_view::npos) {
      return InvalidArgument(q + " has a URL scheme (write \"host:port\")");
    }
    size_t colon = text.find(':');
    if (colon == std::string_view::npos) return InvalidArgument(q + " has no port");
    if (text.find(':', colon + 1) != std::string_view::npos) {
      return InvalidArgument(q +
                             " looks like an IPv6 address without brackets (write it as "
                             "\"[::1]:2222\")");
    }
    host = text.substr(0, colon);
    rest = text.substr(colon);
    if (host.empty()) return InvalidArgument(q + " has an empty host");
    for (char c : host) {
      if (!IsHostNameChar(c)) {
        return InvalidArgument(q + " has an invalid character " + Quote(std::string(1, c)) +
                               " in its host");
      }
    }
  }
  if (rest.size() <= 1) return InvalidArgument(q + " has no port");
  std::string_view port_text = rest.substr(1);
  uint32_t port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9') {
      return InvalidArgument(q + " has a non-numeric port " + Quote(port_text));
    }
    port = port * 10 + static_cast<uint32_t>(c - '0');
    if (port > 65535) break;
  }
  if (port == 0 || port > 65535) {
    return InvalidArgument(q + " has port " + std::string(port_text) +
                           ", which is out of range (1-65535)");
  }
  return HostPort{std::string(host), static_cast<uint16_t>(port)};
}

std::string TaskId::ToString() const {
  return std::string(TaskTypeName(type)) + ":" + std::to_string(index);
}

const HostPort& ClusterSpec::address(TaskId id) const {
  PS_ASSERT(has(id));
  return tasks[Index(id.type)][static_cast<size_t>(id.index)];
}

std::vector<TaskId> ClusterSpec::TrainingTasks() const {
  std::vector<TaskId> out;
  for (TaskType type : {TaskType::kChief, TaskType::kWorker, TaskType::kPs}) {
    for (int i = 0; i < count(type); ++i) out.push_back({type, i});
  }
  return out;
}

std::vector<TaskId> ClusterSpec::AllTasks() const {
  std::vector<TaskId> out;
  for (TaskType type : kAllTaskTypes) {
    for (int i = 0; i < count(type); ++i) out.push_back({type, i});
  }
  return out;
}

Status ValidateClusterSpec(const ClusterSpec& spec, const std::string& path) {
  for (TaskType type : {TaskType::kChief, TaskType::kEvaluator}) {
    if (spec.count(type) > 1) {
      return InvalidArgument(path + "." + TaskTypeName(type) + ": at most one " +
                             TaskTypeName(type) + " task is allowed, got " +
                             std::to_string(spec.count(type)));
    }
  }
  // Duplicates are compared on the lower-cased host (DNS names are case-insensitive).
  std::map<std::pair<std::string, uint16_t>, TaskId> seen;
  for (TaskId id : spec.AllTasks()) {
    const HostPort& hp = spec.address(id);
    const std::string where =
        path + "." + TaskTypeName(id.type) + "[" + std::to_string(id.index) + "]";
    // A spec built in code gets the same checks as one parsed from text.
    auto reparsed = ParseHostPort(hp.ToString());
    if (!reparsed.ok() || !(*reparsed == hp)) {
      return InvalidArgument(
          where + ": " +
          (reparsed.ok() ? Quote(hp.host) + " is not a valid host" : reparsed.status().message()));
    }
    auto [it, inserted] = seen.emplace(std::make_pair(Lower(hp.host), hp.port), id);
    if (!inserted) {
      return InvalidArgument(where + ": address " + Quote(hp.ToString()) + " is already used by " +
                             it->second.ToString());
    }
  }
  return Status::Ok();
}

Result<ClusterSpec> ParseClusterSpec(const Json& cluster, const std::string& path) {
  JsonReader r(cluster, path);
  PS_RETURN_IF_ERROR(r.status());
  ClusterSpec spec;
  if (r.Has("chief") && r.Has(kLegacyChiefName)) {
    return InvalidArgument(r.Path(kLegacyChiefName) +
                           ": \"master\" is the legacy name of the chief; "
                           "list the chief under \"chief\" or \"master\", not both");
  }
  for (auto it = cluster.begin(); it != cluster.end(); ++it) {
    PS_ASSIGN_OR_RETURN(TaskType type, ParseTfConfigType(it.key(), r.Path(it.key())));
    std::vector<std::string> addresses;
    PS_RETURN_IF_ERROR(r.Get(it.key(), &addresses));
    if (type == TaskType::kChief && addresses.size() > 1) {
      return InvalidArgument(r.Path(it.key()) + ": at most one chief task is allowed, got " +
                             std::to_string(addresses.size()));
    }
    auto& out = spec.of(type);
    for (size_t i = 0; i < addresses.size(); ++i) {
      auto hp = ParseHostPort(addresses[i]);
      if (!hp.ok()) {
        return InvalidArgument(r.Path(it.key()) + "[" + std::to_string(i) +
                               "]: " + hp.status().message());
      }
      out.push_back(std::move(hp).value());
    }
  }
  PS_RETURN_IF_ERROR(r.Finish());
  PS_RETURN_IF_ERROR(ValidateClusterSpec(spec, path));
  return spec;
}

Status ValidateTfConfig(const TfConfig& config, const std::string& path) {
  const std::string cluster_path = path + ".cluster";
  PS_RETURN_IF_ERROR(ValidateClusterSpec(config.cluster, cluster_path));
  return CheckTask(config.cluster, config.task, path + ".task.type", path + ".task.index",
                   cluster_path);
}

Result<TfConfig> ParseTfConfig(std::string_view json_text, std::string_view what) {
  PS_ASSIGN_OR_RETURN(Json json, ParseJson(json_text, what));
  return ParseTfConfigJson(json, std::string(what));
}

Result<TfConfig> ParseTfConfigJson(const Json& json, const std::string& root) {
  JsonReader r(json, root);
  PS_RETURN_IF_ERROR(r.status());
  TfConfig config;

  const Json* cluster = r.Find("cluster");
  if (cluster == nullptr) return InvalidArgument(r.Path("cluster") + ": required key is missing");
  PS_ASSIGN_OR_RETURN(config.cluster, ParseClusterSpec(*cluster, r.Path("cluster")));

  JsonReader task = r.Child("task");
  PS_RETURN_IF_ERROR(task.status());
  std::string type_name;
  PS_RETURN_IF_ERROR(task.Get("type", &type_name));
  PS_ASSIGN_OR_RETURN(config.task.type, ParseTfConfigType(type_name, task.Path("type")));
  const Json* index = task.Find("index");
  if (index == nullptr) return InvalidArgument(task.Path("index") + ": required key is missing");
  PS_RETURN_IF_ERROR(ReadTaskIndex(*index, task.Path("index"), &config.task.index));
  PS_RETURN_IF_ERROR(CheckTask(config.cluster, config.task, task.Path("type"), task.Path("index"),
                               r.Path("cluster")));

  PS_RETURN_IF_ERROR(r.GetOr("rpc_layer", &config.rpc_layer));
  PS_RETURN_IF_ERROR(r.GetOr("environment", &config.environment));
  PS_RETURN_IF_ERROR(r.GetOr("session_master", &config.session_master));
  // TensorFlow ignores keys it does not know; so do we, loudly, so that a newer operator
  // adding one cannot stop a fleet.
  WarnUnknownKeys(task.object(), task.path(), {"type", "index"}, &config.warnings);
  WarnUnknownKeys(json, root, {"cluster", "task", "rpc_layer", "environment", "session_master"},
                  &config.warnings);
  return config;
}

Status ValidateForPsTraining(const TfConfig& config) {
  PS_RETURN_IF_ERROR(ValidateTfConfig(config));
  if (config.task.type == TaskType::kEvaluator) return Status::Ok();
  for (TaskType type : {TaskType::kPs, TaskType::kWorker}) {
    if (config.cluster.count(type) == 0) {
      return InvalidArgument(std::string("TF_CONFIG.cluster.") + TaskTypeName(type) +
                             ": parameter-server training needs at least one " +
                             TaskTypeName(type) + " task");
    }
  }
  return Status::Ok();
}

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string ClusterIdCanonical(const ClusterSpec& spec) {
  std::string out = "pstrain-cluster-v1\n";
  for (TaskType type : {TaskType::kChief, TaskType::kWorker, TaskType::kPs}) {
    out += TaskTypeName(type);
    out += '=';
    const auto& addresses = spec.of(type);
    for (size_t i = 0; i < addresses.size(); ++i) {
      if (i > 0) out += ',';
      out += addresses[i].ToString();
    }
    out += '\n';
  }
  return out;
}

uint64_t ClusterId(const ClusterSpec& spec) { return Fnv1a64(ClusterIdCanonical(spec)); }

Result<TfConfig> LoadTfConfig(const std::string* file_or_null) {
  if (file_or_null != nullptr) {
    PS_ASSIGN_OR_RETURN(Json json, ReadJsonFile(*file_or_null));
    auto config = ParseTfConfigJson(json, "TF_CONFIG");
    if (!config.ok()) return config.status().WithContext(*file_or_null);
    return config;
  }
  const char* env = std::getenv("TF_CONFIG");
  if (env == nullptr) return InvalidArgument("TF_CONFIG is not set (or use --tf-config FILE)");
  if (*env == '\0') return InvalidArgument("TF_CONFIG is empty (or use --tf-config FILE)");
  return ParseTfConfig(env, "TF_CONFIG");
}

Status ApplyOverrides(const TaskOverrides& overrides, TfConfig* config) {
  TaskId task = config->task;
  if (overrides.task_type) {
    PS_ASSIGN_OR_RETURN(task.type, ParseTaskTypeOrError(*overrides.task_type, "--task-type"));
  }
  if (overrides.task_index) task.index = *overrides.task_index;
  // Name the flag the user passed; an index inherited from TF_CONFIG is named as such.
  const std::string type_path = overrides.task_type ? "--task-type" : "TF_CONFIG.task.type";
  const std::string index_path = overrides.task_index ? "--task-index" : "TF_CONFIG.task.index";
  PS_RETURN_IF_ERROR(CheckTask(config->cluster, task, type_path, index_path, "TF_CONFIG.cluster"));
  config->task = task;
  return Status::Ok();
}

namespace {
Json ClusterJson(const ClusterSpec& spec) {
  Json cluster = Json::object();
  for (TaskType type : kAllTaskTypes) {
    if (spec.count(type) == 0) continue;
    Json list = Json::array();
    for (const HostPort& hp : spec.of(type)) list.push_back(hp.ToString());
    cluster[TaskTypeName(type)] = std::move(list);
  }
  return cluster;
}
}  // namespace

std::string ToTfConfigJson(const ClusterSpec& spec, TaskId task) {
  Json root = Json::object();
  root["cluster"] = ClusterJson(spec);
  root["task"] = Json::object();
  root["task"]["type"] = TaskTypeName(task.type);
  root["task"]["index"] = task.index;
  return root.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<ClusterSpec> ParseClusterFile(std::string_view json_text, const std::string& what) {
  PS_ASSIGN_OR_RETURN(Json json, ParseJson(json_text, what));
  return ParseClusterFileJson(json, what);
}

Result<ClusterSpec> ParseClusterFileJson(const Json& json, const std::string& what) {
  Result<ClusterSpec> spec = InvalidArgument("unset");
  if (json.is_object() && json.contains("cluster")) {
    JsonReader r(json, "");
    const Json* cluster = r.Find("cluster");
    spec = ParseClusterSpec(*cluster, "cluster");
    if (spec.ok()) {
      Status st = r.Finish();
      if (!st.ok()) spec = st;
    }
  } else {
    spec = ParseClusterSpec(json, "cluster");
  }
  if (!spec.ok()) return spec.status().WithContext(what);
  return spec;
}

Result<ClusterSpec> ReadClusterFile(const std::string& path) {
  PS_ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  return ParseClusterFileJson(json, path);
}

}  // namespace ps::cluster
