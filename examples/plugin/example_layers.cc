// An example pstrain plug-in: one layer type, "prelu" (a ReLU whose negative slope is
// learned per channel, as Keras' PReLU with shared axes all but the last):
//   y = x if x > 0, else alpha[c] * x     (c: position along the last axis)
//   variable "<layer>/alpha" [channels], initialised to "alpha_init" (default 0.25)
// Built by Meson into libexample_layers.so; test/unit/model/plugin_test.cc checks its
// gradients and trains it, test/integration/zoo_test.cc trains it on a real cluster.
//
// Use in a job:
//   "plugins": ["/path/to/libexample_layers.so"],
//   ... {"name": "act", "type": "prelu", "inputs": ["hidden"], "alpha_init": 0.1} ...
#include <nlohmann/json.hpp>

#include "libps/model/plugin_api.h"

namespace {

using pstrain::plugin::Context;

class Prelu final : public pstrain::plugin::Layer {
 public:
  Prelu(std::vector<int64_t> shape, double alpha_init)
      : shape_(std::move(shape)), alpha_init_(alpha_init) {
    channels_ = shape_.back();
    size_ = 1;
    for (int64_t d : shape_) size_ *= d;
  }
  std::vector<int64_t> OutputShape() const override { return shape_; }
  std::vector<pstrain::plugin::VariableSpec> Variables() const override {
    return {{"alpha",
             {channels_},
             nlohmann::json{{"type", "constant"}, {"value", alpha_init_}}.dump()}};
  }
  void Forward(const Context& ctx, std::span<const std::span<const float>> in,
               std::span<const std::span<const float>> vars, std::span<float> out) override {
    const float* x = in[0].data();
    const float* alpha = vars[0].data();
    const int64_t n = ctx.batch * size_;
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0 ? x[i] : alpha[i % channels_] * x[i];
  }
  void Backward(const Context& ctx, std::span<const std::span<const float>> in,
                std::span<const std::span<const float>> vars, std::span<const float>,
                std::span<const float> dout, std::span<const std::span<float>> din,
                std::span<const std::span<float>> dvars) override {
    const float* x = in[0].data();
    const float* alpha = vars[0].data();
    float* dalpha = dvars[0].data();
    for (int64_t c = 0; c < channels_; ++c) dalpha[c] = 0.0f;
    const int64_t n = ctx.batch * size_;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = i % channels_;
      if (x[i] <= 0) dalpha[c] += dout[i] * x[i];
      if (!din[0].empty()) din[0][i] += x[i] > 0 ? dout[i] : alpha[c] * dout[i];
    }
  }

 private:
  std::vector<int64_t> shape_;
  double alpha_init_;
  int64_t channels_ = 1;
  int64_t size_ = 1;
};

std::unique_ptr<pstrain::plugin::Layer> MakePrelu(const std::string& config,
                                                  const std::vector<std::vector<int64_t>>& shapes,
                                                  std::string* error) {
  const nlohmann::json j = nlohmann::json::parse(config, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "config: not a JSON object";
    return nullptr;
  }
  double alpha = 0.25;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "alpha_init") {
      *error = it.key() + ": unknown key";
      return nullptr;
    }
    if (!it.value().is_number()) {
      *error = "alpha_init: expected a number";
      return nullptr;
    }
    alpha = it.value().get<double>();
  }
  if (shapes.size() != 1) {
    *error = "inputs: takes 1 input, got " + std::to_string(shapes.size());
    return nullptr;
  }
  return std::make_unique<Prelu>(shapes[0], alpha);
}

}  // namespace

PSTRAIN_PLUGIN_LAYERS({"prelu", &MakePrelu})
