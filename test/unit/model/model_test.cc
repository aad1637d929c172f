#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/model/model.h"
#include "test/unit/model/grad_check.h"

using namespace ps::model;
using model_test::Build;
using model_test::BuildError;
using model_test::CheckGradients;
using model_test::Pulled;
using model_test::RandomBatch;
using model_test::Store;

TEST_CASE("mlp variables follow Keras names, shapes and initializers") {
  auto m = Build(
      R"({"type":"mlp","input_dim":784,"hidden":[256,128],"activation":"relu","classes":10})");
  const auto& v = m->variables();
  REQUIRE(v.size() == 6);
  CHECK(v[0].name == "dense_0/kernel");
  CHECK(v[0].shape == std::vector<int64_t>{784, 256});
  CHECK(v[0].init.kind == InitKind::kGlorotUniform);
  CHECK_FALSE(v[0].sparse);
  CHECK(v[1].name == "dense_0/bias");
  CHECK(v[1].shape == std::vector<int64_t>{256});
  CHECK(v[1].init.kind == InitKind::kZeros);
  CHECK(v[4].name == "dense_2/kernel");
  CHECK(v[4].shape == std::vector<int64_t>{128, 10});
  CHECK(v[5].shape == std::vector<int64_t>{10});
  CHECK(m->outputs() == 10);
}

TEST_CASE("embedding_mlp variables: one table per name, shared tables once") {
  auto m = Build(R"({"type":"embedding_mlp","fields":[
      {"table":"words","vocab":100,"dim":8},
      {"vocab":7,"dim":3,"combiner":"sum","init":{"type":"normal","stddev":0.1}},
      {"table":"words","combiner":"sqrtn"}],
    "dense_dim":2,"hidden":[16],"classes":1})");
  const auto& v = m->variables();
  REQUIRE(v.size() == 6);
  CHECK(v[0].name == "words/embeddings");
  CHECK(v[0].shape == std::vector<int64_t>{100, 8});
  CHECK(v[0].sparse);
  CHECK(v[0].init == InitSpec{InitKind::kUniform, -0.05, 0.05});
  CHECK(v[1].name == "embedding_1/embeddings");
  CHECK(v[1].shape == std::vector<int64_t>{7, 3});
  CHECK(v[1].init == InitSpec{InitKind::kNormal, 0.0, 0.1});
  CHECK(v[2].name == "dense_0/kernel");
  CHECK(v[2].shape == std::vector<int64_t>{8 + 3 + 8 + 2, 16});
  CHECK(v[4].shape == std::vector<int64_t>{16, 1});
  CHECK(v[1].row_elements() == 3);
  CHECK(v[2].num_elements() == 21 * 16);
  CHECK(m->outputs() == 1);
}

TEST_CASE("RowsNeeded returns sorted unique rows per sparse variable, empty for dense") {
  auto m = Build(R"({"type":"embedding_mlp","fields":[
      {"table":"a","vocab":50,"dim":2},{"table":"b","vocab":10,"dim":2},{"table":"a"}],
    "classes":2})");
  Batch b;
  b.size = 3;
  SparseField f0{{0, 3, 3, 5}, {42, 7, 42, 0, 7}, {}};
  SparseField f1{{0, 1, 2, 2}, {9, 9}, {}};
  SparseField f2{{0, 0, 2, 4}, {13, 42, 49, 3}, {}};
  b.sparse = {f0, f1, f2};
  b.labels = {0, 1, 1};
  std::vector<std::vector<int64_t>> rows = {{99}, {99}, {99}, {99}, {99}, {99}, {99}};
  REQUIRE(m->RowsNeeded(b, &rows).ok());
  REQUIRE(rows.size() == m->variables().size());
  CHECK(rows[0] == std::vector<int64_t>{0, 3, 7, 13, 42, 49});
  CHECK(rows[1] == std::vector<int64_t>{9});
  for (size_t v = 2; v < rows.size(); ++v) CHECK(rows[v].empty());

  auto lr = Build(R"({"type":"logistic_regression","num_features":100,"num_fields":2})");
  REQUIRE(lr->RowsNeeded(Batch{3, 0, {}, {f0, f2}, {}}, &rows).ok());
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == std::vector<int64_t>{0, 3, 7, 13, 42, 49});
  CHECK(rows[1].empty());
}

TEST_CASE("mlp gradients match central differences") {
  for (const char* act : {"relu", "tanh", "sigmoid", "linear"}) {
    for (int classes : {1, 3}) {
      INFO("activation " << act << " classes " << classes);
      auto m = Build(std::string(R"({"type":"mlp","input_dim":4,"hidden":[5,3],"activation":")") +
                     act + R"(","classes":)" + std::to_string(classes) + "}");
      Store store(*m, 11);
      store.Randomize(*m, 12, 0.8f);
      Batch b = RandomBatch(4, {}, 4, classes, false, 13);
      CHECK(CheckGradients(*m, store, b) == 0);
    }
  }
}

TEST_CASE(
    "embedding_mlp gradients match central differences (all combiners, weights, "
    "duplicates, shared table, dense features)") {
  for (bool weighted : {false, true}) {
    INFO("weighted " << weighted);
    auto m = Build(R"({"type":"embedding_mlp","fields":[
        {"table":"t","vocab":6,"dim":3,"combiner":"mean"},
        {"vocab":4,"dim":2,"combiner":"sum"},
        {"table":"t","combiner":"sqrtn"}],
      "dense_dim":2,"hidden":[4],"activation":"tanh","classes":3})");
    Store store(*m, 21);
    store.Randomize(*m, 22, 0.8f);
    Batch b = RandomBatch(5, {6, 4, 6}, 2, 3, weighted, 23);
    CHECK(CheckGradients(*m, store, b) == 0);
  }
  SECTION("TF tutorial shape: one mean-pooled field -> Dense(1, sigmoid)") {
    auto m = Build(R"({"type":"embedding_mlp","fields":[{"vocab":9,"dim":4}],"classes":1})");
    Store store(*m, 31);
    store.Randomize(*m, 32, 0.8f);
    Batch b = RandomBatch(6, {9}, 0, 1, false, 33);
    CHECK(CheckGradients(*m, store, b) == 0);
  }
}

TEST_CASE("logistic_regression gradients match central differences") {
  auto m = Build(R"({"type":"logistic_regression","num_features":8,"num_fields":2})");
  Store store(*m, 41);
  store.Randomize(*m, 42, 0.8f);
  Batch b = RandomBatch(5, {8, 8}, 0, 1, true, 43);
  CHECK(CheckGradients(*m, store, b) == 0);
}

TEST_CASE("duplicate ids in one example give one gradient row holding their sum") {
  // Sum pooling, no hidden layer, one output: logit = sum_j e[id_j] · w + bias, so
  // d(mean loss)/d e[r] = count(r) * (p - y) * w / batch.
  auto m = Build(
      R"({"type":"embedding_mlp","fields":[{"vocab":10,"dim":2,"combiner":"sum"}],"classes":1})");
  Store store(*m, 1);
  store.full[0] = std::vector<float>(20, 0.0f);
  store.full[1] = {0.5f, -1.0f};  // kernel [2, 1]
  store.full[2] = {0.0f};
  Batch b;
  b.size = 1;
  b.sparse = {SparseField{{0, 4}, {3, 8, 3, 3}, {}}};
  b.labels = {1};
  Pulled p;
  p.Pull(*m, store, b);
  CHECK(p.rows[0] == std::vector<int64_t>{3, 8});
  Grads g;
  auto r = m->ForwardBackward(b, p.params, &g);
  REQUIRE(r.ok());
  REQUIRE(g.values[0].size() == 4);  // two rows of dim 2
  // logit 0 -> p = 0.5, dlogit = -0.5
  CHECK(g.values[0][0] == Approx(3 * -0.5 * 0.5));
  CHECK(g.values[0][1] == Approx(3 * -0.5 * -1.0));
  CHECK(g.values[0][2] == Approx(-0.5 * 0.5));
  CHECK(g.values[0][3] == Approx(-0.5 * -1.0));
  CHECK(r->loss_sum == Approx(std::log(2.0)));
  CHECK(r->examples == 1);
  CHECK(r->correct == 1);
}

TEST_CASE("Forward gives probabilities and the same loss as ForwardBackward") {
  auto m = Build(R"({"type":"mlp","input_dim":3,"hidden":[4],"classes":4})");
  Store store(*m, 5);
  Batch b = RandomBatch(7, {}, 3, 4, false, 6);
  Pulled p;
  p.Pull(*m, store, b);
  Grads g;
  auto step = m->ForwardBackward(b, p.params, &g);
  REQUIRE(step.ok());
  auto eval = m->Forward(b, p.params);
  REQUIRE(eval.ok());
  CHECK(eval->examples == 7);
  CHECK(eval->outputs == 4);
  CHECK(eval->has_labels);
  CHECK(eval->loss_sum == Approx(step->loss_sum));
  CHECK(eval->correct == step->correct);
  REQUIRE(eval->probabilities.size() == 28);
  int64_t correct = 0;
  for (int64_t i = 0; i < 7; ++i) {
    double sum = 0;
    int64_t best = 0;
    for (int64_t c = 0; c < 4; ++c) {
      sum += eval->probabilities[i * 4 + c];
      if (eval->probabilities[i * 4 + c] > eval->probabilities[i * 4 + best]) best = c;
    }
    CHECK(sum == Approx(1.0));
    correct += best == static_cast<int64_t>(b.labels[i]);
  }
  CHECK(correct == eval->correct);

  b.labels.clear();  // evaluation without labels
  auto unlabeled = m->Forward(b, p.params);
  REQUIRE(unlabeled.ok());
  CHECK_FALSE(unlabeled->has_labels);
  CHECK(unlabeled->loss_sum == 0);
  CHECK(unlabeled->probabilities == eval->probabilities);
  CHECK(m->ForwardBackward(b, p.params, &g).status().message() ==
        "batch.labels: has 0 entries, expected size = 7");
}

TEST_CASE("batches and params that do not fit the model are errors, not crashes") {
  auto m = Build(R"({"type":"embedding_mlp","fields":[{"vocab":5,"dim":2}],"classes":3})");
  Store store(*m, 1);
  Batch good = RandomBatch(3, {5}, 0, 3, false, 2);
  Pulled p;
  p.Pull(*m, store, good);
  Grads g;
  REQUIRE(m->ForwardBackward(good, p.params, &g).ok());
  std::vector<std::vector<int64_t>> rows;

  auto error = [&](const Batch& b) {
    return m->ForwardBackward(b, p.params, &g).status().message();
  };
  Batch b = good;
  b.sparse.clear();
  CHECK(error(b) == "batch.sparse: has 0 fields, the model reads 1");
  b = good;
  b.sparse[0].ids[0] = 5;
  CHECK(error(b) == "batch.sparse[0].ids[0]: 5 is outside the table's 5 rows");
  CHECK(m->RowsNeeded(b, &rows).message() ==
        "batch.sparse[0].ids[0]: 5 is outside the table's 5 rows");
  b = good;
  b.sparse[0].offsets.back() += 1;
  CHECK(error(b) == "batch.sparse[0].offsets[3]: must equal ids.size() = " +
                        std::to_string(good.sparse[0].ids.size()));
  b = good;
  b.sparse[0].offsets = {0, 2, 1, static_cast<int64_t>(good.sparse[0].ids.size())};
  CHECK(error(b) == "batch.sparse[0].offsets[2]: offsets must not decrease");
  b = good;
  b.sparse[0].values = {1.0f};
  CHECK(error(b).starts_with("batch.sparse[0].values: has 1 entries"));
  b = good;
  b.labels[1] = 3;
  CHECK(error(b) == "batch.labels[1]: 3.000000 is not a class index in [0, 3)");
  b = good;
  b.labels[1] = 0.5f;
  CHECK(error(b) == "batch.labels[1]: 0.500000 is not a class index in [0, 3)");
  b = good;
  b.dense_dim = 1;
  CHECK(error(b) == "batch.dense_dim: 1 does not match the model's 0");
  b = good;
  b.size = 0;
  b.labels.clear();
  b.sparse[0] = SparseField{{0}, {}, {}};
  CHECK(error(b) == "batch.size: must be > 0 for a training step");
  auto empty_eval = m->Forward(b, p.params);
  REQUIRE(empty_eval.ok());
  CHECK(empty_eval->examples == 0);

  // Params not matching the pulled rows.
  ps::model::Params bad = p.params;
  bad.values.pop_back();
  CHECK(m->Forward(good, bad).status().message() ==
        "params.values: has 2 variables, the model has 3");
  bad = p.params;
  bad.values[1] = bad.values[1].subspan(1);
  CHECK(m->Forward(good, bad).status().message() ==
        "params.values[dense_0/kernel]: has 5 floats, expected 6");
  bad = p.params;
  std::vector<int64_t> fewer(p.rows[0].begin() + 1, p.rows[0].end());
  std::vector<float> fewer_values(p.values[0].begin() + 2, p.values[0].end());
  bad.rows[0] = fewer;
  bad.values[0] = fewer_values;
  CHECK(m->Forward(good, bad).status().message() ==
        "params.rows[embedding_0/embeddings]: lacks row " + std::to_string(p.rows[0][0]) +
            " that the batch uses");
  bad.rows.clear();
  CHECK(m->Forward(good, bad).status().message() ==
        "params.rows: missing rows of embedding_0/embeddings");

  auto lr = Build(R"({"type":"logistic_regression","num_features":4})");
  Batch lb = RandomBatch(2, {4}, 0, 1, false, 3);
  lb.labels[0] = 1.5f;
  CHECK(lr->Forward(lb, p.params).status().message() ==
        "batch.labels[0]: 1.500000 is not in [0, 1]");
}

TEST_CASE("BuildModel rejects bad configs naming the key") {
  CHECK(BuildError(R"({"type":"mlp","input_dim":784,"hidden":[256,0],"classes":10})") ==
        "job.model.hidden[1]: must be > 0, got 0");
  CHECK(BuildError(R"({"type":"mlp","input_dim":784,"hiden":[256],"classes":10})") ==
        "job.model.hiden: unknown key");
  CHECK(BuildError(R"({"type":"mlp","hidden":[256],"classes":10})") ==
        "job.model.input_dim: required key is missing");
  CHECK(BuildError(R"({"type":"mlp","input_dim":0,"classes":10})") ==
        "job.model.input_dim: must be > 0, got 0");
  CHECK(BuildError(R"({"type":"mlp","input_dim":4,"classes":0})") ==
        "job.model.classes: must be > 0, got 0");
  CHECK(
      BuildError(R"({"type":"mlp","input_dim":4,"classes":2,"activation":"gelu"})") ==
      "job.model.activation: unknown activation \"gelu\" (expected relu, tanh, sigmoid or linear)");
  CHECK(BuildError(R"({"type":"mlp","input_dim":4,"classes":2,"hidden":[1e9]})") ==
        "job.model.hidden[0]: must be <= 16777216, got 1000000000");
  CHECK(BuildError(R"({"type":"mlp","input_dim":4,"classes":"two"})") ==
        "job.model.classes: expected an integer, got string");
  CHECK(
      BuildError(R"({"type":"cnn"})") ==
      "job.model.type: unknown model type \"cnn\" (expected graph, mlp, embedding_mlp or logistic_regression)");
  CHECK(BuildError(R"({"input_dim":4})") == "job.model.type: required key is missing");
  CHECK(BuildError(R"([1, 2])") == "job.model: must be a JSON object");

  CHECK(BuildError(R"({"type":"embedding_mlp","classes":1})") ==
        "job.model.fields: required key is missing");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[],"classes":1})") ==
        "job.model.fields: must not be empty unless dense_dim > 0");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[3],"classes":1})") ==
        "job.model.fields[0]: must be a JSON object");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"vocab":10}],"classes":1})") ==
        "job.model.fields[0].dim: required key is missing");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"vocab":10,"dim":-2}],"classes":1})") ==
        "job.model.fields[0].dim: must be > 0, got -2");
  CHECK(
      BuildError(
          R"({"type":"embedding_mlp","fields":[{"vocab":10,"dim":2,"combiner":"max"}],"classes":1})") ==
      "job.model.fields[0].combiner: unknown combiner \"max\" (expected mean, sum or sqrtn)");
  CHECK(BuildError(
            R"({"type":"embedding_mlp","fields":[{"vocab":10,"dim":2,"size":3}],"classes":1})") ==
        "job.model.fields[0].size: unknown key");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"table":"t","vocab":10,"dim":2},
        {"table":"t","vocab":11}],"classes":1})") ==
        "job.model.fields[1].vocab: 11 differs from 10 of table \"t\" (fields[0])");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"table":"t","vocab":10,"dim":2},
        {"table":"t","init":{"type":"zeros"}}],"classes":1})") ==
        "job.model.fields[1].init: table \"t\" is initialised by fields[0]");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"vocab":10,"dim":2,
        "init":{"type":"normal","stddev":-1}}],"classes":1})") ==
        "job.model.fields[0].init.stddev: must be finite and >= 0, got -1.000000");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"vocab":10,"dim":2,
        "init":{"type":"zeros","value":1}}],"classes":1})") ==
        "job.model.fields[0].init.value: unknown key");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"vocab":10,"dim":2,
        "init":{"type":"orthogonal"}}],"classes":1})") ==
        "job.model.fields[0].init.type: unknown initializer \"orthogonal\" (expected zeros, ones, "
        "constant, uniform, normal, truncated_normal or glorot_uniform)");
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"vocab":10,"dim":2,
        "init":{"kind":"zeros"}}],"classes":1})") ==
        "job.model.fields[0].init.type: required key is missing");
  CHECK(
      BuildError(
          R"({"type":"embedding_mlp","fields":[{"vocab":10,"dim":2}],"dense_dim":-1,"classes":1})") ==
      "job.model.dense_dim: must be >= 0, got -1");

  CHECK(BuildError(R"({"type":"logistic_regression"})") ==
        "job.model.num_features: required key is missing");
  CHECK(BuildError(R"({"type":"logistic_regression","num_features":10,"num_fields":0})") ==
        "job.model.num_fields: must be > 0, got 0");
  CHECK(BuildError(R"({"type":"logistic_regression","num_features":10,"classes":2})") ==
        "job.model.classes: unknown key");
}

TEST_CASE("default initializers keep Keras' meaning when the ps fills them") {
  auto mlp = Build(R"({"type":"embedding_mlp","fields":[{"vocab":40,"dim":20}],
    "hidden":[30],"classes":1})");
  Store store(*mlp, 1);
  auto max_abs = [](const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, std::fabs(double{x}));
    return m;
  };
  // embedding_0/embeddings [40, 20]: uniform in [-0.05, 0.05)
  CHECK(max_abs(store.full[0]) <= 0.05);
  CHECK(max_abs(store.full[0]) > 0.045);
  // dense_0/kernel [20, 30]: glorot_uniform, limit sqrt(6 / (20 + 30))
  const double limit = std::sqrt(6.0 / 50.0);
  CHECK(max_abs(store.full[1]) <= limit);
  CHECK(max_abs(store.full[1]) > 0.9 * limit);
  // dense_0/bias [30]: zeros; dense_1/kernel [30, 1]: limit sqrt(6 / 31)
  CHECK(store.full[2] == std::vector<float>(30, 0.0f));
  CHECK(max_abs(store.full[3]) <= std::sqrt(6.0 / 31.0));
  CHECK(max_abs(store.full[3]) > 0.0);
  // Same seed, same values.
  CHECK(Store(*mlp, 1).full == store.full);

  auto lr = Build(R"({"type":"logistic_regression","num_features":50})");
  Store lr_store(*lr, 1);
  CHECK(lr_store.full[0] == std::vector<float>(50, 0.0f));
  CHECK(lr_store.full[1] == std::vector<float>(1, 0.0f));
}

namespace {

// Plain SGD on a fixed dataset in mini-batches; returns the final accuracy over all batches.
double Train(Model& m, Store& store, const std::vector<Batch>& batches, int epochs, float lr) {
  Pulled p;
  Grads g;
  for (int e = 0; e < epochs; ++e) {
    for (const Batch& b : batches) {
      p.Pull(m, store, b);
      auto r = m.ForwardBackward(b, p.params, &g);
      REQUIRE(r.ok());
      model_test::ApplySgd(m, p, g, lr, &store);
    }
  }
  int64_t correct = 0, total = 0;
  for (const Batch& b : batches) {
    p.Pull(m, store, b);
    auto r = m.Forward(b, p.params);
    REQUIRE(r.ok());
    correct += r->correct;
    total += r->examples;
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

}  // namespace

TEST_CASE("a tiny MLP trained with SGD separates three Gaussian blobs") {
  auto m = Build(R"({"type":"mlp","input_dim":2,"hidden":[8],"activation":"relu","classes":3})");
  Store store(*m, 100);
  std::mt19937 rng(101);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  const float centers[3][2] = {{2, 0}, {-1, 1.7f}, {-1, -1.7f}};
  std::vector<Batch> batches;
  for (int k = 0; k < 4; ++k) {
    Batch b;
    b.size = 30;
    b.dense_dim = 2;
    for (int i = 0; i < 30; ++i) {
      const int c = (i + k) % 3;
      b.dense.push_back(centers[c][0] + noise(rng));
      b.dense.push_back(centers[c][1] + noise(rng));
      b.labels.push_back(static_cast<float>(c));
    }
    batches.push_back(std::move(b));
  }
  Pulled p;
  p.Pull(*m, store, batches[0]);
  const double before = m->Forward(batches[0], p.params)->loss_sum;
  CHECK(Train(*m, store, batches, 100, 0.2f) == 1.0);
  p.Pull(*m, store, batches[0]);
  CHECK(m->Forward(batches[0], p.params)->loss_sum < 0.1 * before);
}

TEST_CASE("embedding_mlp and logistic_regression learn which ids mean label 1") {
  // Label 1 iff the example's ids are mostly below 10 (ids of one example share a half).
  std::mt19937 rng(200);
  std::vector<Batch> batches;
  for (int k = 0; k < 5; ++k) {
    Batch b;
    b.size = 20;
    SparseField f;
    f.offsets.push_back(0);
    for (int i = 0; i < 20; ++i) {
      const bool positive = (i + k) % 2 == 0;
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int j = 0; j < n; ++j)
        f.ids.push_back((positive ? 0 : 10) + static_cast<int64_t>(rng() % 10));
      f.offsets.push_back(static_cast<int64_t>(f.ids.size()));
      b.labels.push_back(positive ? 1.0f : 0.0f);
    }
    b.sparse.push_back(std::move(f));
    batches.push_back(std::move(b));
  }
  SECTION("embedding_mlp, TF tutorial shape") {
    auto m = Build(R"({"type":"embedding_mlp","fields":[{"vocab":20,"dim":4}],"classes":1})");
    Store store(*m, 300);
    CHECK(Train(*m, store, batches, 60, 1.0f) == 1.0);
  }
  SECTION("logistic_regression") {
    auto m = Build(R"({"type":"logistic_regression","num_features":20})");
    Store store(*m, 400);
    CHECK(Train(*m, store, batches, 60, 1.0f) == 1.0);
  }
  SECTION("logistic_regression with hashed ids (num_buckets)") {
    auto m = Build(R"({"type":"logistic_regression","num_buckets":4096})");
    CHECK(m->variables()[0].shape == std::vector<int64_t>{4096, 1});
    Store store(*m, 400);
    CHECK(Train(*m, store, batches, 60, 1.0f) == 1.0);
  }
}

TEST_CASE("logistic_regression takes num_features or num_buckets, not both") {
  CHECK(BuildError(R"({"type":"logistic_regression","num_features":10,"num_buckets":64})") ==
        "job.model.num_buckets: give either num_features or num_buckets, not both");
  CHECK(BuildError(R"({"type":"logistic_regression"})") ==
        "job.model.num_features: required key is missing");
  CHECK(BuildError(R"({"type":"logistic_regression","num_buckets":0})")
            .find("job.model.num_buckets: must be > 0") == 0);
}

TEST_CASE(
    "\"lazy\" marks a table's variable lazy: first field of a table, and logistic_regression") {
  auto m = Build(R"({"type":"embedding_mlp","fields":[
      {"table":"ids","vocab":1099511627776,"dim":16,"lazy":true},{"table":"ids"},
      {"table":"small","vocab":10,"dim":2}],"classes":1})");
  REQUIRE(m != nullptr);
  REQUIRE(m->variables().size() >= 2);
  CHECK(m->variables()[0].name == "ids/embeddings");
  CHECK(m->variables()[0].shape == std::vector<int64_t>{int64_t{1} << 40, 16});
  CHECK(m->variables()[0].lazy);
  CHECK_FALSE(m->variables()[1].lazy);
  for (size_t v = 2; v < m->variables().size(); ++v) CHECK_FALSE(m->variables()[v].lazy);
  auto lr = Build(
      R"({"type":"logistic_regression","num_features":1099511627776,"num_fields":3,"lazy":true})");
  CHECK(lr->variables()[0].lazy);
  CHECK_FALSE(lr->variables()[1].lazy);
  CHECK_FALSE(Build(R"({"type":"logistic_regression","num_features":10})")->variables()[0].lazy);

  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"table":"t","vocab":5,"dim":2},
      {"table":"t","lazy":true}],"classes":1})") ==
        "job.model.fields[1].lazy: set on the first field of table \"t\" (fields[0]) only");
  CHECK(BuildError(R"({"type":"logistic_regression","num_features":10,"lazy":1})")
            .find("job.model.lazy") == 0);
  CHECK(BuildError(R"({"type":"mlp","input_dim":4,"classes":2,"lazy":true})") ==
        "job.model.lazy: unknown key");
}

TEST_CASE(
    "\"admit\" and \"evict\" set a lazy table's row policy, on every way to declare a table") {
  auto m = Build(R"({"type":"embedding_mlp","fields":[
      {"table":"ids","vocab":1099511627776,"dim":4,"lazy":true,"admit":{"min_count":3},
       "evict":{"ttl_steps":1000,"max_rows":50000}},{"table":"ids"},
      {"table":"small","vocab":10,"dim":2,"lazy":true,"evict":{"max_rows":7}},
      {"table":"plain","vocab":10,"dim":2,"lazy":true}],"classes":1})");
  REQUIRE(m != nullptr);
  const auto& v = m->variables();
  REQUIRE(v.size() >= 3);
  CHECK(v[0].rows == RowPolicy{.admit_min_count = 3, .ttl_steps = 1000, .max_rows = 50000});
  CHECK(v[1].rows == RowPolicy{.admit_min_count = 1, .ttl_steps = 0, .max_rows = 7});
  CHECK(v[2].rows == RowPolicy{});
  for (size_t i = 3; i < v.size(); ++i) CHECK(v[i].rows == RowPolicy{});

  auto lr = Build(R"({"type":"logistic_regression","num_buckets":1000000,"lazy":true,
                      "admit":{"min_count":2},"evict":{"ttl_steps":10}})");
  CHECK(lr->variables()[0].rows == RowPolicy{.admit_min_count = 2, .ttl_steps = 10, .max_rows = 0});

  auto g = Build(R"({"type":"graph","inputs":[{"name":"a","type":"sparse","field":0},
      {"name":"b","type":"sparse","field":1}],
      "layers":[{"name":"e","type":"embedding","inputs":["a"],"vocab":100,"dim":2,"lazy":true,
                 "admit":{"min_count":4}},
                {"name":"f","type":"embedding","inputs":["b"],"table":"e"},
                {"name":"w","type":"linear","inputs":["a"],"vocab":100,"lazy":true,"evict":{"ttl_steps":5}},
                {"name":"c","type":"concat","inputs":["e","f","w"]},
                {"name":"o","type":"dense","inputs":["c"],"units":1}],
      "outputs":[{"layer":"o","loss":"mean_squared_error"}]})");
  REQUIRE(g != nullptr);
  for (const auto& var : g->variables()) {
    CAPTURE(var.name);
    if (var.name == "e/embeddings") CHECK(var.rows == RowPolicy{.admit_min_count = 4});
    if (var.name == "w/weights") CHECK(var.rows == RowPolicy{.ttl_steps = 5});
  }
}

TEST_CASE("\"admit\" and \"evict\": errors name the key") {
  // Not lazy.
  CHECK(
      BuildError(R"({"type":"embedding_mlp","fields":[{"vocab":5,"dim":2,"admit":{"min_count":2}}],
      "classes":1})") ==
      "job.model.fields[0].admit: applies to lazy tables only (set \"lazy\": true on this table)");
  CHECK(BuildError(R"({"type":"logistic_regression","num_features":10,"evict":{"ttl_steps":2}})") ==
        "job.model.evict: applies to lazy tables only (set \"lazy\": true on this table)");
  CHECK(BuildError(R"({"type":"graph","inputs":[{"name":"a","type":"sparse","field":0}],
      "layers":[{"name":"e","type":"embedding","inputs":["a"],"vocab":100,"dim":2,"evict":{"max_rows":3}}],
      "outputs":[{"layer":"e","loss":"mean_squared_error"}]})")
            .find(".evict: applies to lazy tables only") != std::string::npos);
  CHECK(BuildError(R"({"type":"graph","inputs":[{"name":"a","type":"sparse","field":0}],
      "layers":[{"name":"w","type":"linear","inputs":["a"],"vocab":100,"lazy":false,"admit":{"min_count":3}}],
      "outputs":[{"layer":"w","loss":"mean_squared_error"}]})")
            .find(".admit: applies to lazy tables only") != std::string::npos);
  // Ranges and shapes.
  const std::string f = R"({"type":"embedding_mlp","fields":[{"vocab":5,"dim":2,"lazy":true,)";
  CHECK(BuildError(f + R"("admit":{"min_count":256}}],"classes":1})") ==
        "job.model.fields[0].admit.min_count: must be in [1, 255], got 256");
  CHECK(BuildError(f + R"("admit":{"min_count":0}}],"classes":1})") ==
        "job.model.fields[0].admit.min_count: must be in [1, 255], got 0");
  CHECK(BuildError(f + R"("admit":{}}],"classes":1})") ==
        "job.model.fields[0].admit.min_count: required key is missing");
  CHECK(BuildError(f + R"("admit":3}],"classes":1})").find("job.model.fields[0].admit") == 0);
  CHECK(BuildError(f + R"("admit":{"min_count":2,"decay":1}}],"classes":1})") ==
        "job.model.fields[0].admit.decay: unknown key");
  CHECK(BuildError(f + R"("evict":{}}],"classes":1})") ==
        "job.model.fields[0].evict: give ttl_steps, max_rows or both");
  CHECK(BuildError(f + R"("evict":{"ttl_steps":0}}],"classes":1})") ==
        "job.model.fields[0].evict.ttl_steps: must be in [1, 2147483648], got 0");
  CHECK(BuildError(f + R"("evict":{"max_rows":-4}}],"classes":1})") ==
        "job.model.fields[0].evict.max_rows: must be in [1, 1099511627776], got -4");
  CHECK(BuildError(f + R"("evict":{"max_rows":4,"lfu":true}}],"classes":1})") ==
        "job.model.fields[0].evict.lfu: unknown key");
  // Only on a table's first field; a shared graph table must agree.
  CHECK(BuildError(R"({"type":"embedding_mlp","fields":[{"table":"t","vocab":5,"dim":2,"lazy":true},
      {"table":"t","evict":{"ttl_steps":3}}],"classes":1})") ==
        "job.model.fields[1].evict: set on the first field of table \"t\" (fields[0]) only");
  CHECK(
      BuildError(R"({"type":"graph","inputs":[{"name":"a","type":"sparse","field":0}],
      "layers":[{"name":"e","type":"embedding","inputs":["a"],"vocab":100,"dim":2,"lazy":true,
                 "admit":{"min_count":4}},
                {"name":"f","type":"embedding","inputs":["a"],"table":"e","admit":{"min_count":5}},
                {"name":"c","type":"concat","inputs":["e","f"]}],
      "outputs":[{"layer":"c","loss":"mean_squared_error"}]})")
          .find(
              "admit/evict: {\"admit\":{\"min_count\":5}} differs from {\"admit\":{\"min_count\":4}}") !=
      std::string::npos);
}
