// Loading of layer plug-ins (plugin_api.h): shared libraries whose layer types the graph
// builder then accepts. The registry is process-wide: once loaded, a plug-in's types are
// known to every model built afterwards; libraries are never unloaded.
#pragma once

#include <memory>
#include <string>

#include "libps/core/status.h"
#include "libps/model/ops.h"
#include "libps/model/plugin_api.h"

namespace ps::model {

// dlopens `path`, checks its API version against PSTRAIN_PLUGIN_API_VERSION and registers
// its layer types; thread-safe. Once per library: a path loaded before, or a file with
// the same size and CRC-32C as a library loaded before (a bundle's copy of it), adds
// nothing and is not dlopened. Errors are InvalidArgument
// "<where>: <path>: ..." — not a shared library, no pstrain_plugin_* symbols, another API
// version, a type that is built in or registered by another plug-in.
Status LoadPlugin(const std::string& path, const std::string& where);

// The registered plug-in layer type `type`, or null.
const pstrain::plugin::LayerType* FindPluginLayer(const std::string& type);

// An Op running a plug-in layer (used by MakeOp).
Result<std::unique_ptr<Op>> MakePluginOp(const pstrain::plugin::LayerType& type, OpBuild& b);

}  // namespace ps::model
