// pstrain's C++ plug-in API: custom layers for the layer graph, in a shared library that
// a job names ("plugins": ["/path/libmylayers.so"]). Workers, the chief and the evaluator
// load it when they read the job; its layer types are then used in "layers" like the
// built-in ones, and their variables live on the ps tasks like any other.
//
// This header is self-contained (standard library only): a plug-in needs nothing else
// from pstrain. Build it with the same compiler and standard library as pstrain (the API
// passes std::string, std::vector and std::span across the boundary), e.g.
//   g++ -std=c++20 -O2 -fPIC -shared -I<pstrain source> mylayers.cc -o libmylayers.so
// examples/plugin/ is a complete example, built by Meson and trained by the tests.
//
// Contract of a layer (shapes are per example, batch excluded; activations are row-major
// [batch * size]; `vars[v]` holds variable v whole, in the order Variables() lists them):
//   - Forward writes every element of `out` [batch * OutputSize()].
//   - Backward adds d(loss)/d(input i) into dinputs[i] (an empty span: not needed) and
//     WRITES (overwrites) d(loss)/d(var v) into dvars[v]; dout is d(loss)/d(out).
//   - Backward follows a Forward with the same inputs on the same object; an object is
//     used by one thread at a time, so it may keep what Forward computed.
// pstrain checks each layer's gradients against finite differences in its own tests;
// do the same for yours (test/unit/model/plugin_test.cc shows how).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

// The API version this header describes. A plug-in built against another version is
// refused when it is loaded, naming both versions.
#ifndef PSTRAIN_PLUGIN_API_VERSION
#define PSTRAIN_PLUGIN_API_VERSION 1
#endif

namespace pstrain::plugin {

struct VariableSpec {
  std::string name;            // the variable is "<layer name>/<name>"
  std::vector<int64_t> shape;  // row-major
  // An initializer as in the job file, e.g. {"type": "glorot_uniform"} (docs/reference/job.md)
  std::string init_json = R"({"type": "zeros"})";
};

struct Context {
  int64_t batch = 0;
  bool training = false;  // true in training steps, false in evaluation
  uint64_t step = 0;      // training steps this model instance ran before this one
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::vector<int64_t> OutputShape() const = 0;
  virtual std::vector<VariableSpec> Variables() const = 0;
  virtual void Forward(const Context& ctx, std::span<const std::span<const float>> inputs,
                       std::span<const std::span<const float>> vars, std::span<float> out) = 0;
  virtual void Backward(const Context& ctx, std::span<const std::span<const float>> inputs,
                        std::span<const std::span<const float>> vars, std::span<const float> out,
                        std::span<const float> dout, std::span<const std::span<float>> dinputs,
                        std::span<const std::span<float>> dvars) = 0;
};

// Builds a layer from its config (the layer's JSON object without name, type and inputs,
// as text) and its inputs' shapes. On a bad config returns null and sets *error to a
// one-line message (pstrain prefixes it with the layer's path).
using LayerFactory = std::unique_ptr<Layer> (*)(
    const std::string& config_json, const std::vector<std::vector<int64_t>>& input_shapes,
    std::string* error);

struct LayerType {
  const char* type;  // the "type" of a layer in the job file; must not be a built-in one
  LayerFactory factory;
};

}  // namespace pstrain::plugin

// Exports the plug-in's layer types and the API version it was built against. Use once,
// at namespace scope, in one source file of the plug-in:
//   PSTRAIN_PLUGIN_LAYERS({"swish", &MakeSwish}, {"prelu", &MakePrelu})
#define PSTRAIN_PLUGIN_LAYERS(...)                                                   \
  extern "C" int pstrain_plugin_api_version() { return PSTRAIN_PLUGIN_API_VERSION; } \
  extern "C" const ::pstrain::plugin::LayerType* pstrain_plugin_layers(int* count) { \
    static const ::pstrain::plugin::LayerType kTypes[] = {__VA_ARGS__};              \
    *count = static_cast<int>(sizeof(kTypes) / sizeof(kTypes[0]));                   \
    return kTypes;                                                                   \
  }
