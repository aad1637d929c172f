#include "launcher/tf_config.h"

#include <cstdio>
#include <string_view>

#include "libps/core/json.h"
#include "libps/daemon/daemon.h"

namespace ps::launcher {

using cluster::TaskId;
using daemon::kExitOk;
using daemon::kExitUsage;

namespace {

std::string ShellSingleQuote(std::string_view text) {
  std::string out = "'";
  for (char ch : text) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

}  // namespace

std::string FormatTfConfigs(const cluster::ClusterSpec& spec, bool json) {
  std::string out;
  bool first = true;
  for (const TaskId& id : spec.AllTasks()) {
    const cluster::HostPort& hp = spec.address(id);
    std::string tf = cluster::ToTfConfigJson(spec, id);
    if (json) {
      Json line = Json::object();
      line["task"] = id.ToString();
      line["type"] = cluster::TaskTypeName(id.type);
      line["index"] = id.index;
      line["host"] = hp.host;
      line["port"] = hp.port;
      line["tf_config"] = Json::parse(tf);
      out += line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    } else {
      if (!first) out += "\n";
      out += "# " + id.ToString() + " (" + hp.ToString() + ")\n";
      out += "export TF_CONFIG=" + ShellSingleQuote(tf) + "\n";
    }
    first = false;
  }
  return out;
}

int RunTfConfig(const TfConfigCommand& command) {
  auto spec = cluster::ReadClusterFile(command.cluster_file);
  if (!spec.ok()) {
    PrintErr("pstrain tf-config: " + spec.status().message());
    return kExitUsage;
  }
  std::string text = FormatTfConfigs(*spec, command.json);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace ps::launcher
