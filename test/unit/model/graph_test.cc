// The layer graph as a whole: config validation, the shorthands' equivalence with their
// graphs, several heads.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/model/model.h"
#include "test/unit/model/grad_check.h"

using namespace ps::model;
using model_test::Build;
using model_test::CheckGradients;
using model_test::Pulled;
using model_test::Store;

namespace {

// Every graph error is one line.
std::string BuildError(const std::string& text) {
  std::string m = model_test::BuildError(text);
  CHECK(m.find('\n') == std::string::npos);
  return m;
}

// A graph with one dense input "x" [4] and the given layers; the head reads `head`.
std::string Graph(const std::string& layers, const std::string& head = "out",
                  const std::string& loss = "sigmoid_cross_entropy") {
  return R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":4},
    {"name":"img","type":"image","shape":[4,4,1]},{"name":"f0","type":"sparse","field":0}],
    "layers":[)" +
         layers + R"(],"outputs":[{"layer":")" + head + R"(","loss":")" + loss + R"("}]})";
}

Batch RandomBatch(int64_t size, std::vector<int64_t> vocab, int64_t dense_dim, int64_t classes,
                  uint32_t seed) {
  return model_test::RandomBatch(size, std::move(vocab), dense_dim, classes, true, seed);
}

// 100 SGD steps over `batches` (cycled); returns the store.
Store Train100(Model& m, const std::vector<Batch>& batches) {
  Store store(m, 77);
  Pulled p;
  Grads g;
  for (int step = 0; step < 100; ++step) {
    const Batch& b = batches[static_cast<size_t>(step) % batches.size()];
    p.Pull(m, store, b);
    auto r = m.ForwardBackward(b, p.params, &g);
    REQUIRE(r.ok());
    model_test::ApplySgd(m, p, g, 0.1f, &store);
  }
  return store;
}

void CheckSameVariables(const Model& a, const Model& b) {
  REQUIRE(a.variables().size() == b.variables().size());
  for (size_t v = 0; v < a.variables().size(); ++v) {
    CHECK(a.variables()[v].name == b.variables()[v].name);
    CHECK(a.variables()[v].shape == b.variables()[v].shape);
    CHECK(a.variables()[v].init == b.variables()[v].init);
    CHECK(a.variables()[v].sparse == b.variables()[v].sparse);
    CHECK(a.variables()[v].lazy == b.variables()[v].lazy);
  }
}

}  // namespace

TEST_CASE("graph configs are checked when built, each error one line naming layer and key") {
  const std::string dense = R"({"name":"out","type":"dense","inputs":["x"],"units":1})";
  REQUIRE(Build(Graph(dense))->variables().size() == 2);

  CHECK(
      BuildError(Graph(R"({"name":"out","type":"densse","inputs":["x"],"units":1})")) ==
      std::string("job.model.layers.out.type: unknown layer type \"densse\" (expected ") +
          "dense, activation, "
          "dropout, layer_norm, concat, add, multiply, reshape, flatten, embedding, linear, fm, cross, "
          "dot_interaction, conv2d, max_pool2d, avg_pool2d, or a type of a plug-in in the job's \"plugins\")");
  CHECK(BuildError(Graph(R"({"name":"out","type":"dense","inputs":["y"],"units":1})")) ==
        "job.model.layers.out.inputs[0]: unknown input \"y\" (no input or layer has that name)");
  CHECK(BuildError(Graph(R"({"name":"a","type":"dense","inputs":["out"],"units":4},
                            {"name":"b","type":"activation","inputs":["a"],"activation":"relu"},
                            {"name":"out","type":"dense","inputs":["b"],"units":1})")) ==
        "job.model.layers.a.inputs: cycle a -> b -> out -> a");
  CHECK(BuildError(Graph(R"({"name":"out","type":"dense","inputs":["out"],"units":1})")) ==
        "job.model.layers.out.inputs: cycle out -> out");
  CHECK(BuildError(Graph(R"({"name":"a","type":"dense","inputs":["x"],"units":3},
                            {"name":"s","type":"add","inputs":["a","x"]},
                            {"name":"out","type":"dense","inputs":["s"],"units":1})")) ==
        "job.model.layers.s.inputs[1]: shape [4] of \"x\" differs from [3] of \"a\"");
  CHECK(
      BuildError(Graph(R"({"name":"c","type":"conv2d","inputs":["x"],"filters":2,"kernel_size":3},
                            {"name":"out","type":"dense","inputs":["c"],"units":1})")) ==
      "job.model.layers.c.inputs[0]: \"x\" has shape [4]; expected an image [height, width, channels]");
  CHECK(
      BuildError(Graph(R"({"name":"c","type":"conv2d","inputs":["img"],"filters":2,"kernel_size":5},
                            {"name":"out","type":"dense","inputs":["c"],"units":1})")) ==
      "job.model.layers.c.kernel_size: window 5 is larger than the input's 4 with padding \"valid\"");
  CHECK(
      BuildError(Graph(R"({"name":"out","type":"dense","inputs":["x"],"units":3})")) ==
      "job.model.outputs[0].loss: sigmoid_cross_entropy needs 1 output, layer \"out\" has shape [3]");
  CHECK(
      BuildError(Graph(dense, "out", "softmax_cross_entropy")) ==
      "job.model.outputs[0].loss: softmax_cross_entropy needs at least 2 outputs (one per class), layer \"out\" "
      "has shape [1]");
  CHECK(BuildError(Graph(
            R"({"name":"e1","type":"embedding","inputs":["f0"],"table":"t","vocab":10,"dim":4},
                            {"name":"e2","type":"embedding","inputs":["f0"],"table":"t","dim":8},
                            {"name":"c","type":"concat","inputs":["e1","e2"]},
                            {"name":"out","type":"dense","inputs":["c"],"units":1})")) ==
        "job.model.layers.e2.dim: 8 differs from 4 of table \"t\" (job.model.layers.e1)");
  CHECK(BuildError(Graph(
            R"({"name":"e1","type":"embedding","inputs":["f0"],"table":"t","vocab":10,"dim":4},
                            {"name":"e2","type":"embedding","inputs":["f0"],"table":"t","vocab":12},
                            {"name":"c","type":"concat","inputs":["e1","e2"]},
                            {"name":"out","type":"dense","inputs":["c"],"units":1})")) ==
        "job.model.layers.e2.vocab: 12 differs from 10 of table \"t\" (job.model.layers.e1)");
  CHECK(
      BuildError(Graph(R"({"name":"out","type":"dense","inputs":["f0"],"units":1})")) ==
      "job.model.layers.out.inputs[0]: \"f0\" is a sparse input; only embedding and linear layers read sparse "
      "inputs");
  CHECK(
      BuildError(Graph(R"({"name":"e","type":"embedding","inputs":["x"],"vocab":3,"dim":2},
                            {"name":"out","type":"dense","inputs":["e"],"units":1})")) ==
      "job.model.layers.e.inputs[0]: \"x\" is not a sparse input; embedding layers read sparse inputs only");
  CHECK(BuildError(Graph(R"({"name":"out","type":"dense","inputs":["x"],"units":1},
                            {"name":"out","type":"dense","inputs":["x"],"units":1})")) ==
        "job.model.layers.out: the name is used twice");
  CHECK(BuildError(Graph(R"({"name":"x","type":"dense","inputs":["x"],"units":1})", "x")) ==
        "job.model.layers.x: the name is used twice");
  CHECK(BuildError(Graph(R"({"name":"spare","type":"dense","inputs":["x"],"units":2},)" + dense)) ==
        "job.model.layers.spare: its output reaches no entry of outputs");
  CHECK(BuildError(Graph(R"({"name":"out","type":"dense","inputs":["x"],"units":1,"unit":2})")) ==
        "job.model.layers.out.unit: unknown key");
  CHECK(
      BuildError(Graph(
          R"({"name":"out","type":"dense","inputs":["x"],"units":1,"activation":"swish"})")) ==
      "job.model.layers.out.activation: unknown activation \"swish\" (expected linear, relu, gelu, tanh or sigmoid)");
  CHECK(BuildError(Graph(R"({"name":"r","type":"reshape","inputs":["x"],"shape":[3,-1]},
                            {"name":"out","type":"dense","inputs":["r"],"units":1})")) ==
        "job.model.layers.r.shape: [3, -1] does not hold the 4 values of input shape [4]");
  CHECK(BuildError(Graph(R"({"name":"a/b","type":"dense","inputs":["x"],"units":1})", "a/b")) ==
        "job.model.layers[0].name: \"a/b\" may hold only letters, digits, '_', '-' and '.'");
  CHECK(
      BuildError(
          R"({"type":"graph","inputs":[{"name":"x","type":"tensor","dim":2}],"layers":[],"outputs":[]})") ==
      "job.model.inputs.x.type: unknown input type \"tensor\" (expected dense, image or sparse)");
  CHECK(BuildError(R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":2}],
    "layers":[{"name":"out","type":"dense","inputs":["x"],"units":1}],
    "outputs":[{"layer":"nope","loss":"sigmoid_cross_entropy"}]})") ==
        "job.model.outputs[0].layer: unknown layer \"nope\"");
  CHECK(
      BuildError(R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":2}],
    "layers":[{"name":"out","type":"dense","inputs":["x"],"units":1}],
    "outputs":[{"layer":"out","loss":"hinge"}]})") ==
      "job.model.outputs[0].loss: unknown loss \"hinge\" (expected softmax_cross_entropy, sigmoid_cross_entropy or "
      "mean_squared_error)");
  CHECK(BuildError(R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":2}],
    "layers":[{"name":"out","type":"activation","inputs":["x"],"activation":"tanh"}],
    "outputs":[{"layer":"out","loss":"mean_squared_error"}]})")
            .find("job.model.outputs[0].loss") == 0);
  CHECK(BuildError(R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":1}],
    "layers":[{"name":"out","type":"activation","inputs":["x"],"activation":"tanh"}],
    "outputs":[{"layer":"out","loss":"mean_squared_error"}]})") ==
        "job.model.layers: the model has no variables to train");
}

TEST_CASE("each shorthand and its graph give bit-identical parameters after 100 steps") {
  struct Case {
    const char* name;
    std::string shorthand, graph;
    std::vector<int64_t> vocab;
    int64_t dense_dim, classes;
  };
  const std::vector<Case> cases = {
      {"mlp",
       R"({"type":"mlp","input_dim":5,"hidden":[8,6],"activation":"tanh","classes":3})",
       R"({"type":"graph","inputs":[{"name":"pixels","type":"dense","dim":5}],
           "layers":[{"name":"dense_0","type":"dense","inputs":["pixels"],"units":8,"activation":"tanh"},
                     {"name":"dense_1","type":"dense","inputs":["dense_0"],"units":6,"activation":"tanh"},
                     {"name":"dense_2","type":"dense","inputs":["dense_1"],"units":3}],
           "outputs":[{"layer":"dense_2","loss":"softmax_cross_entropy"}]})",
       {},
       5,
       3},
      {"embedding_mlp",
       R"({"type":"embedding_mlp","fields":[{"table":"words","vocab":30,"dim":4},
           {"vocab":7,"dim":3,"combiner":"sum","lazy":true},{"table":"words","combiner":"sqrtn"}],
           "dense_dim":2,"hidden":[6],"classes":1})",
       R"({"type":"graph","inputs":[{"name":"a","type":"sparse","field":0},{"name":"b","type":"sparse","field":1},
             {"name":"c","type":"sparse","field":2},{"name":"d","type":"dense","dim":2}],
           "layers":[{"name":"ea","type":"embedding","inputs":["a"],"table":"words","vocab":30,"dim":4},
                     {"name":"eb","type":"embedding","inputs":["b"],"table":"embedding_1","vocab":7,"dim":3,
                      "combiner":"sum","lazy":true},
                     {"name":"ec","type":"embedding","inputs":["c"],"table":"words","combiner":"sqrtn"},
                     {"name":"x","type":"concat","inputs":["ea","eb","ec","d"]},
                     {"name":"dense_0","type":"dense","inputs":["x"],"units":6,"activation":"relu"},
                     {"name":"dense_1","type":"dense","inputs":["dense_0"],"units":1}],
           "outputs":[{"layer":"dense_1","loss":"sigmoid_cross_entropy"}]})",
       {30, 7, 30},
       2,
       1},
      {"logistic_regression",
       R"({"type":"logistic_regression","num_features":40,"num_fields":2})",
       R"({"type":"graph","inputs":[{"name":"u","type":"sparse","field":0},{"name":"v","type":"sparse","field":1}],
           "layers":[{"name":"linear","type":"linear","inputs":["u","v"],"vocab":40}],
           "outputs":[{"layer":"linear","loss":"sigmoid_cross_entropy"}]})",
       {40, 40},
       0,
       1},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    auto a = Build(c.shorthand);
    auto b = Build(c.graph);
    CheckSameVariables(*a, *b);
    std::vector<Batch> batches;
    for (uint32_t k = 0; k < 7; ++k)
      batches.push_back(RandomBatch(9, c.vocab, c.dense_dim, c.classes, 500 + k));
    Store sa = Train100(*a, batches);
    Store sb = Train100(*b, batches);
    CHECK(sa.full == sb.full);
    CHECK_FALSE(sa.full == Store(*a, 77).full);  // training moved them
  }
}

TEST_CASE("several heads: weighted losses, labels from a dense column, per-head results") {
  // Head "click" (sigmoid, batch.labels) and head "value" (MSE on dense column 3), sharing
  // a hidden layer over dense columns 0..2.
  auto m = Build(R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":3}],
    "layers":[{"name":"h","type":"dense","inputs":["x"],"units":5,"activation":"gelu"},
              {"name":"click","type":"dense","inputs":["h"],"units":1},
              {"name":"value","type":"dense","inputs":["h"],"units":1}],
    "outputs":[{"layer":"click","loss":"sigmoid_cross_entropy"},
               {"layer":"value","loss":"mean_squared_error","weight":0.25,"label_column":3}]})");
  REQUIRE(m->heads().size() == 2);
  CHECK(m->heads()[1].name == "value");
  CHECK(m->heads()[1].weight == 0.25);
  Batch b = RandomBatch(6, {}, 4, 1, 9);
  Store store(*m, 3);
  store.Randomize(*m, 4, 0.8f);
  CHECK(CheckGradients(*m, store, b) == 0);

  Pulled p;
  p.Pull(*m, store, b);
  auto e = m->Forward(b, p.params);
  REQUIRE(e.ok());
  REQUIRE(e->heads.size() == 2);
  CHECK(e->probabilities == e->heads[0].predictions);
  CHECK(e->loss_sum == Approx(e->heads[0].loss_sum + 0.25 * e->heads[1].loss_sum));
  double mse = 0;
  for (int i = 0; i < 6; ++i) {
    CHECK(e->heads[1].labels[i] == b.dense[i * 4 + 3]);
    mse += std::pow(e->heads[1].predictions[i] - b.dense[i * 4 + 3], 2);
  }
  CHECK(e->heads[1].loss_sum == Approx(mse));
  CHECK(e->heads[0].labels == b.labels);

  b.dense[2 * 4 + 3] = std::nanf("");
  Grads g;
  CHECK(m->ForwardBackward(b, p.params, &g).status().message() ==
        "batch.dense[2][3] (label of head \"value\"): nan is not finite");
  b.dense_dim = 3;
  CHECK(m->Forward(b, p.params).status().message() ==
        "batch.dense_dim: 3 does not match the model's 4");
}

TEST_CASE("a head with nothing to train below it still reports its loss") {
  // Head "raw" reads an activation of the input directly; head "fit" trains a dense layer.
  auto m = Build(R"({"type":"graph","inputs":[{"name":"x","type":"dense","dim":1}],
    "layers":[{"name":"raw","type":"activation","inputs":["x"],"activation":"tanh"},
              {"name":"fit","type":"dense","inputs":["x"],"units":1}],
    "outputs":[{"layer":"fit","loss":"mean_squared_error"},{"layer":"raw","loss":"mean_squared_error"}]})");
  Batch b = model_test::RandomBatch(5, {}, 1, 1, false, 3);
  Store store(*m, 1);
  Pulled p;
  p.Pull(*m, store, b);
  Grads g;
  auto r = m->ForwardBackward(b, p.params, &g);
  REQUIRE(r.ok());
  auto e = m->Forward(b, p.params);
  REQUIRE(e.ok());
  CHECK(r->loss_sum == Approx(e->loss_sum));
  CHECK(e->heads[1].loss_sum > 0);
  CHECK(CheckGradients(*m, store, b) == 0);
}
