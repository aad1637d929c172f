// `pstrain tf-config`: every task's TF_CONFIG from a cluster file, to set on each host.
#pragma once

#include <string>

#include "launcher/cli.h"
#include "libps/cluster/tf_config.h"

namespace ps::launcher {

// For every task of the cluster (chief, workers, ps, evaluator):
//  env:  "# worker:1 (host:2222)\nexport TF_CONFIG='<ToTfConfigJson>'\n", blank line between
//  json: one line per task, keys always in this order so scripts can cut them apart:
//        {"task":"worker:1","type":"worker","index":1,"host":"h","port":2222,"tf_config":{...}}
std::string FormatTfConfigs(const cluster::ClusterSpec& spec, bool json);

// Prints FormatTfConfigs of the cluster file. 2 when the file is unreadable or invalid.
int RunTfConfig(const TfConfigCommand& command);

}  // namespace ps::launcher
