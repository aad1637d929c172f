#include "libps/serving/model_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "libps/core/files.h"
#include "libps/core/text.h"
#include "libps/serving/model_server_config.pb.h"

namespace ps::serving {

namespace {

namespace pb = pstrain::serving_config;

constexpr size_t kMaxConfigBytes = size_t{1} << 20;

// The first error protobuf's text parser reports, as "line L column C: message".
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (text.empty())
      text = "line " + std::to_string(line + 1) + " column " + std::to_string(column + 1) + ": " +
             message;
  }
  std::string text;
};

Result<ModelSpec> FromProto(const pb::ModelConfig& c, const std::string& where) {
  ModelSpec m;
  m.name = c.name();
  m.base_path = c.base_path();
  if (m.name.empty()) return InvalidArgument(where + ": name is empty");
  if (m.base_path.empty()) return InvalidArgument(where + " (" + m.name + "): base_path is empty");
  const std::string at = where + " (" + m.name + ")";
  const auto& p = c.model_version_policy();
  switch (p.policy_choice_case()) {
    case pb::ServableVersionPolicy::kLatest:
      if (p.latest().num_versions() == 0)
        return InvalidArgument(at + ": model_version_policy latest needs num_versions >= 1");
      m.policy.num_versions = static_cast<int>(std::min<uint32_t>(p.latest().num_versions(), 1000));
      break;
    case pb::ServableVersionPolicy::kAll:
      m.policy.kind = VersionPolicy::Kind::kAll;
      break;
    case pb::ServableVersionPolicy::kSpecific: {
      m.policy.kind = VersionPolicy::Kind::kSpecific;
      std::set<int64_t> versions;
      for (int64_t v : p.specific().versions()) {
        if (v < 0) return InvalidArgument(at + ": version " + std::to_string(v) + " is negative");
        versions.insert(v);
      }
      if (versions.empty())
        return InvalidArgument(at + ": model_version_policy specific lists no versions");
      m.policy.versions.assign(versions.begin(), versions.end());
      break;
    }
    case pb::ServableVersionPolicy::POLICY_CHOICE_NOT_SET:
      break;  // the latest version(s): the server's default count
  }
  for (const auto& [label, version] : c.version_labels()) {
    if (label.empty()) return InvalidArgument(at + ": a version label is empty");
    if (version < 0)
      return InvalidArgument(at + ": label " + QuoteInput(label) + " names a negative version");
    if (m.policy.kind == VersionPolicy::Kind::kSpecific &&
        !std::binary_search(m.policy.versions.begin(), m.policy.versions.end(), version)) {
      return InvalidArgument(at + ": label " + QuoteInput(label) + " names version " +
                             std::to_string(version) + ", which the specific policy does not list");
    }
    m.labels.emplace(label, version);
  }
  return m;
}

}  // namespace

Result<std::vector<ModelSpec>> ParseModelConfig(std::string_view text, const std::string& what) {
  pb::ModelServerConfig config;
  google::protobuf::TextFormat::Parser parser;
  FirstError error;
  parser.RecordErrorsTo(&error);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return InvalidArgument(
        what + ": " + (error.text.empty() ? std::string("not a ModelServerConfig") : error.text));
  }
  if (!config.has_model_config_list())
    return InvalidArgument(what + ": no model_config_list (the only config pstrain-serve reads)");
  std::vector<ModelSpec> out;
  std::set<std::string> names;
  int i = 0;
  for (const auto& c : config.model_config_list().config()) {
    PS_ASSIGN_OR_RETURN(ModelSpec m, FromProto(c, what + ": config " + std::to_string(i++)));
    if (!names.insert(m.name).second)
      return InvalidArgument(what + ": two models named " + QuoteInput(m.name));
    out.push_back(std::move(m));
  }
  if (out.empty()) return InvalidArgument(what + ": model_config_list names no model");
  return out;
}

Result<std::vector<ModelSpec>> ReadModelConfigFile(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxConfigBytes));
  PS_ASSIGN_OR_RETURN(auto models, ParseModelConfig(text, path));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (auto& m : models) {
    if (std::filesystem::path(m.base_path).is_relative())
      m.base_path = (dir / m.base_path).string();
  }
  return models;
}

Result<ModelSpec> ParseModelFlag(std::string_view flag) {
  const size_t eq = flag.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == flag.size())
    return InvalidArgument("--model " + QuoteInput(flag) + ": expected NAME=PATH");
  ModelSpec m;
  m.name = std::string(flag.substr(0, eq));
  m.base_path = std::string(flag.substr(eq + 1));
  return m;
}

std::vector<int64_t> SelectVersions(const VersionPolicy& policy, std::vector<int64_t> available,
                                    int keep) {
  std::sort(available.begin(), available.end());
  available.erase(std::unique(available.begin(), available.end()), available.end());
  switch (policy.kind) {
    case VersionPolicy::Kind::kAll:
      return available;
    case VersionPolicy::Kind::kSpecific: {
      std::vector<int64_t> out;
      std::set_intersection(available.begin(), available.end(), policy.versions.begin(),
                            policy.versions.end(), std::back_inserter(out));
      return out;
    }
    case VersionPolicy::Kind::kLatest:
      break;
  }
  const size_t n =
      static_cast<size_t>(std::max(policy.num_versions > 0 ? policy.num_versions : keep, 1));
  if (available.size() > n)
    available.erase(available.begin(), available.end() - static_cast<std::ptrdiff_t>(n));
  return available;
}

}  // namespace ps::serving
