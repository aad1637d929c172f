// The plug-in API with examples/plugin (layer "prelu"): loading and its errors, the
// layer's forward values and gradients, and training a graph that uses it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "libps/model/plugins.h"
#include "test/support/temp_dir.h"
#include "test/unit/model/grad_check.h"
#include "test/unit/model/op_check.h"

using namespace ps::model;

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE(v != nullptr);
  return v;
}

void LoadExample() { REQUIRE(LoadPlugin(Env("PSTRAIN_EXAMPLE_PLUGIN"), "job.plugins[0]").ok()); }

}  // namespace

TEST_CASE("plug-ins load once; bad libraries and other API versions are refused naming the file") {
  const std::string good = Env("PSTRAIN_EXAMPLE_PLUGIN");
  CHECK(FindPluginLayer("prelu") == nullptr);
  CHECK(model_test::BuildError(R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":2}],
    "layers":[{"name":"p","type":"prelu","inputs":["x"]},{"name":"out","type":"dense","inputs":["p"],"units":1}],
    "outputs":[{"layer":"out","loss":"sigmoid_cross_entropy"}]})")
            .ends_with("(expected " + std::string(OpTypeList()) +
                       ", or a type of a plug-in in the job's \"plugins\")"));
  REQUIRE(LoadPlugin(good, "job.plugins[0]").ok());
  REQUIRE(LoadPlugin(good, "job.plugins[1]").ok());  // again: nothing happens
  CHECK(FindPluginLayer("prelu") != nullptr);

  const std::string old = Env("PSTRAIN_EXAMPLE_PLUGIN_V0");
  ps::Status st = LoadPlugin(old, "job.plugins[1]");
  CHECK(st.code() == ps::Code::kInvalidArgument);
  CHECK(st.message() ==
        "job.plugins[1]: " + old +
            ": built against plug-in API version 0, this pstrain has 1; rebuild it against this "
            "pstrain's plugin_api.h");
  st = LoadPlugin("/nonexistent/libnothing.so", "job.plugins[2]");
  CHECK(st.message().starts_with("job.plugins[2]: /nonexistent/libnothing.so: cannot load: "));
  st = LoadPlugin(Env("PSTRAIN_NOT_A_PLUGIN"), "job.plugins[3]");
  CHECK(st.message().ends_with(": not a pstrain plug-in (no PSTRAIN_PLUGIN_LAYERS(...) in it)"));
}

TEST_CASE(
    "a copy of a loaded plug-in (a bundle's) is that plug-in; another library with its type is refused") {
  LoadExample();
  const pstrain::plugin::LayerType* prelu = FindPluginLayer("prelu");
  REQUIRE(prelu != nullptr);
  ps::testing::TempDir tmp;
  const std::string bytes = ps::testing::ReadBytes(Env("PSTRAIN_EXAMPLE_PLUGIN"));
  for (const std::string name :
       {"a/libexample_layers.so", "b/libexample_layers.so", "libprelu..so"}) {
    ps::testing::WriteBytes(tmp / name, bytes);
    ps::Status st = LoadPlugin(tmp / name, "job.plugins[0]");
    INFO(name << ": " << st.ToString());
    CHECK(st.ok());
    CHECK(FindPluginLayer("prelu") == prelu);  // the first copy's, not reregistered
  }
  // Another library (one more byte at the end: it still loads) registering "prelu".
  ps::testing::WriteBytes(tmp / "other.so", bytes + '\0');
  ps::Status st = LoadPlugin(tmp / "other.so", "job.plugins[1]");
  CHECK(st.code() == ps::Code::kInvalidArgument);
  CHECK(st.message() == "job.plugins[1]: " + (tmp / "other.so") +
                            ": layer type \"prelu\" is already registered by " +
                            Env("PSTRAIN_EXAMPLE_PLUGIN"));
}

TEST_CASE(
    "plug-in layer prelu: forward against its definition, gradients against finite differences") {
  LoadExample();
  for (int64_t batch : {1, 3}) {
    auto h = model_test::OpHarness::Make("prelu", R"({"alpha_init":0.3})", {{2, 4}}, batch, 70);
    REQUIRE(h->defs.size() == 1);
    CHECK(h->defs[0].name == "l/alpha");
    CHECK(h->defs[0].shape == std::vector<int64_t>{4});
    h->Pull();
    std::vector<double> want;
    for (size_t i = 0; i < h->inputs[0].size(); ++i) {
      const double x = h->inputs[0][i];
      want.push_back(x > 0 ? x : h->full[0][i % 4] * x);
    }
    CHECK(model_test::CompareArrays(h->Forward(), want) == 0);
    CHECK(h->CheckGradients(71) == 0);
  }
  CHECK(model_test::BuildError(R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":2}],
    "layers":[{"name":"p","type":"prelu","inputs":["x"],"alpha":1},{"name":"out","type":"dense","inputs":["p"],"units":1}],
    "outputs":[{"layer":"out","loss":"sigmoid_cross_entropy"}]})") ==
        "job.model.layers.p: alpha: unknown key");
}

TEST_CASE(
    "a graph with a plug-in layer: initial values from the plug-in's initializer, model gradients, training") {
  LoadExample();
  auto m = model_test::Build(R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":2}],
    "layers":[{"name":"h","type":"dense","inputs":["x"],"units":8},
              {"name":"act","type":"prelu","inputs":["h"],"alpha_init":0.1},
              {"name":"out","type":"dense","inputs":["act"],"units":3}],
    "outputs":[{"layer":"out","loss":"softmax_cross_entropy"}]})");
  REQUIRE(m->variables().size() == 5);
  CHECK(m->variables()[2].name == "act/alpha");
  model_test::Store store(*m, 5);
  CHECK(store.full[2] == std::vector<float>(8, 0.1f));

  Batch b = model_test::RandomBatch(6, {}, 2, 3, false, 7);
  model_test::Store random(*m, 5);
  random.Randomize(*m, 6, 0.8f);
  CHECK(model_test::CheckGradients(*m, random, b) == 0);

  // Three separable blobs: SGD drives the training loss down by 10x.
  Batch blobs;
  blobs.size = 60;
  blobs.dense_dim = 2;
  const float centers[3][2] = {{2, 0}, {-1, 1.7f}, {-1, -1.7f}};
  for (int i = 0; i < 60; ++i) {
    blobs.dense.push_back(centers[i % 3][0] + 0.1f * static_cast<float>(i % 7 - 3));
    blobs.dense.push_back(centers[i % 3][1] + 0.1f * static_cast<float>(i % 5 - 2));
    blobs.labels.push_back(static_cast<float>(i % 3));
  }
  model_test::Pulled p;
  Grads g;
  p.Pull(*m, store, blobs);
  const double before = m->Forward(blobs, p.params)->loss_sum;
  for (int step = 0; step < 200; ++step) {
    p.Pull(*m, store, blobs);
    REQUIRE(m->ForwardBackward(blobs, p.params, &g).ok());
    model_test::ApplySgd(*m, p, g, 0.2f, &store);
  }
  p.Pull(*m, store, blobs);
  auto after = m->Forward(blobs, p.params);
  CHECK(after->loss_sum < 0.1 * before);
  CHECK(after->correct == 60);
  CHECK(store.full[2] != std::vector<float>(8, 0.1f));  // alpha moved
}
