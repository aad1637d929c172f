#include "libps/model/plugins.h"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "libps/core/files.h"
#include "libps/core/text.h"
#include "libps/model/initializer.h"

namespace ps::model {
namespace {

// A library is known by its content: every bundle carries its own copy of a job's
// plug-ins, so one process loading two bundles of a model (or one bundle by two paths)
// meets the same library under several paths. A copy is not dlopened again (its types
// would clash with the first copy's); its types are the first copy's. (A CRC does not
// guard against a forged library, but whoever can place one can run code anyway.)
using Content = std::pair<uint64_t, uint32_t>;  // size, masked CRC-32C

struct Registry {
  std::mutex mu;
  std::set<std::string> loaded;                             // paths
  std::map<Content, std::string> libraries;                 // content -> first path
  std::map<std::string, pstrain::plugin::LayerType> types;  // type -> entry
  std::map<std::string, std::string> owner;                 // type -> path
};

Registry& GetRegistry() {
  static Registry r;
  return r;
}

bool IsBuiltIn(const std::string& type) {
  const std::string list = std::string(", ") + OpTypeList() + ",";
  return list.find(", " + type + ",") != std::string::npos;
}

// A plug-in layer behind the Op interface: owns the output; passes the variables whole.
class PluginOp final : public Op {
 public:
  PluginOp(std::unique_ptr<pstrain::plugin::Layer> layer, Shape shape, std::vector<size_t> vars)
      : layer_(std::move(layer)), vars_(std::move(vars)) {
    SetShape(std::move(shape));
    has_variables_ = !vars_.empty();
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    y_.resize(static_cast<size_t>(ctx.batch_size * size_));
    var_values_.clear();
    for (size_t v : vars_) var_values_.push_back(ctx.params->values[v]);
    layer_->Forward(Context(ctx), in, var_values_, y_);
    return std::span<const float>(y_);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>> in,
                std::span<float> dout, std::span<const std::span<float>> din) override {
    var_grads_.clear();
    for (size_t v : vars_) var_grads_.emplace_back(ctx.grads->values[v]);
    layer_->Backward(Context(ctx), in, var_values_, y_, dout, din, var_grads_);
  }

 private:
  static pstrain::plugin::Context Context(const OpContext& ctx) {
    return {ctx.batch_size, ctx.training, ctx.step};
  }

  std::unique_ptr<pstrain::plugin::Layer> layer_;
  std::vector<size_t> vars_;
  std::vector<float> y_;
  std::vector<std::span<const float>> var_values_;
  std::vector<std::span<float>> var_grads_;
};

}  // namespace

Status LoadPlugin(const std::string& path, const std::string& where) {
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  if (reg.loaded.contains(path)) return Status::Ok();
  const std::string at = where + ": " + path;
  // An unreadable file is left to dlopen to report.
  std::optional<Content> content;
  if (auto sum = SumFile(path); sum.ok()) content = Content{sum->bytes, sum->crc};
  if (content && reg.libraries.contains(*content)) {
    reg.loaded.insert(path);
    return Status::Ok();
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    return InvalidArgument(at + ": cannot load: " + (e != nullptr ? e : "unknown error"));
  }
  using VersionFn = int (*)();
  using LayersFn = const pstrain::plugin::LayerType* (*)(int*);
  auto version = reinterpret_cast<VersionFn>(dlsym(handle, "pstrain_plugin_api_version"));
  auto layers = reinterpret_cast<LayersFn>(dlsym(handle, "pstrain_plugin_layers"));
  if (version == nullptr || layers == nullptr) {
    dlclose(handle);
    return InvalidArgument(at + ": not a pstrain plug-in (no PSTRAIN_PLUGIN_LAYERS(...) in it)");
  }
  if (version() != PSTRAIN_PLUGIN_API_VERSION) {
    const int v = version();
    dlclose(handle);
    return InvalidArgument(at + ": built against plug-in API version " + std::to_string(v) +
                           ", this pstrain has " + std::to_string(PSTRAIN_PLUGIN_API_VERSION) +
                           "; rebuild it against this pstrain's plugin_api.h");
  }
  int count = 0;
  const pstrain::plugin::LayerType* types = layers(&count);
  for (int i = 0; i < count; ++i) {
    const std::string type = types[i].type != nullptr ? types[i].type : "";
    if (type.empty() || types[i].factory == nullptr) {
      return InvalidArgument(at + ": layer type " + std::to_string(i) + " has no name or factory");
    }
    if (IsBuiltIn(type))
      return InvalidArgument(at + ": layer type " + QuoteInput(type, '"') + " is built in");
    if (auto it = reg.owner.find(type); it != reg.owner.end()) {
      return InvalidArgument(at + ": layer type " + QuoteInput(type, '"') +
                             " is already registered by " + it->second);
    }
  }
  for (int i = 0; i < count; ++i) {
    reg.types[types[i].type] = types[i];
    reg.owner[types[i].type] = path;
  }
  reg.loaded.insert(path);
  if (content) reg.libraries.emplace(*content, path);
  return Status::Ok();
}

const pstrain::plugin::LayerType* FindPluginLayer(const std::string& type) {
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.types.find(type);
  return it == reg.types.end() ? nullptr : &it->second;
}

Result<std::unique_ptr<Op>> MakePluginOp(const pstrain::plugin::LayerType& type, OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, SIZE_MAX));
  Json config = b.config->object();
  for (const char* key : {"name", "type", "inputs"}) config.erase(key);
  std::string error;
  std::unique_ptr<pstrain::plugin::Layer> layer = type.factory(config.dump(), b.in_shapes, &error);
  if (layer == nullptr) {
    return InvalidArgument(b.path + ": " +
                           (error.empty() ? "the plug-in refused the config" : error));
  }
  Shape shape = layer->OutputShape();
  for (int64_t d : shape) {
    if (d < 1)
      return InvalidArgument(b.path + ": the plug-in's output shape " + ShapeString(shape) +
                             " is invalid");
  }
  std::vector<size_t> vars;
  for (const pstrain::plugin::VariableSpec& v : layer->Variables()) {
    const std::string where = b.path + ".variables." + v.name;
    PS_ASSIGN_OR_RETURN(Json init_json, ParseJson(v.init_json, where + ".init"));
    PS_ASSIGN_OR_RETURN(InitSpec init, ParseInit(init_json, where + ".init"));
    if (v.name.empty() || v.shape.empty())
      return InvalidArgument(where + ": needs a name and a shape");
    for (int64_t d : v.shape) {
      if (d < 1) return InvalidArgument(where + ": shape " + ShapeString(v.shape) + " is invalid");
    }
    PS_ASSIGN_OR_RETURN(size_t index,
                        b.vars->Add({b.name + "/" + v.name, v.shape, init, false}, b.path));
    vars.push_back(index);
  }
  return std::unique_ptr<Op>(
      std::make_unique<PluginOp>(std::move(layer), std::move(shape), std::move(vars)));
}

}  // namespace ps::model
