// What pstrain-serve serves: models named on the command line (--model NAME=PATH) or in
// a TensorFlow Serving model config file (the ModelServerConfig text format:
// model_config_list { config { name base_path model_version_policy version_labels } }),
// and which versions of a model to keep loaded.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "libps/core/status.h"

namespace ps::serving {

// TF Serving's ServableVersionPolicy. A version is the step of a full checkpoint.
struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int num_versions = 0;           // kLatest; 0: the server's default (--keep-versions)
  std::vector<int64_t> versions;  // kSpecific, ascending, no duplicates
  bool operator==(const VersionPolicy&) const = default;
};

struct ModelSpec {
  std::string name;
  std::string base_path;  // a bundle or a training model dir
  VersionPolicy policy;
  std::map<std::string, int64_t> labels;  // label -> version
  bool operator==(const ModelSpec&) const = default;
};

// Parses a ModelServerConfig in protobuf text format. `what` names the source in errors
// (InvalidArgument, with line and column for syntax errors). Rejected: an unknown field,
// a model without a name or base_path, two models of one name, a negative version or
// label, a label naming a version outside a `specific` policy, `latest` with
// num_versions 0, and a config without model_config_list.
Result<std::vector<ModelSpec>> ParseModelConfig(std::string_view text, const std::string& what);
// The same for a file (NotFound when it does not exist). A relative base_path is taken
// relative to the file's directory.
Result<std::vector<ModelSpec>> ReadModelConfigFile(const std::string& path);
// --model NAME=PATH: the latest versions, no labels.
Result<ModelSpec> ParseModelFlag(std::string_view flag);

// Of the `available` versions (any order), the ones `policy` keeps loaded, ascending;
// `keep` is the count for a kLatest policy with num_versions 0.
std::vector<int64_t> SelectVersions(const VersionPolicy& policy, std::vector<int64_t> available,
                                    int keep);

}  // namespace ps::serving
