// pstrain-serve's REST layer (libps/serving/rest.h) without HTTP: requests as (method,
// path, body) against models loaded from model dirs written here (a checkpoint of the
// initial values), answers checked for status, JSON and headers; predictions compared
// with the scores of the same examples built by hand and scored through the C++ API.
// The fixtures (rest_fixtures/) are api_rest.md's examples: row and columnar, one and
// two outputs; "<h:i:j>" in a response stands for head h's output j of instance i.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_checkpointer.h"
#include "libps/core/json.h"
#include "libps/data/text.h"
#include "libps/job/job.h"
#include "libps/server/store.h"
#include "libps/serving/bundle.h"
#include "libps/serving/rest.h"
#include "test/support/temp_dir.h"

namespace ps::serving {
namespace {

using ps::testing::TempDir;
using ps::testing::WriteBytes;

// A libsvm job: ids 0..9 field 0, 10..29 field 1 (zero_based); one sigmoid head.
Json LibSvmJob() {
  return Json::parse(R"({
    "model": {"type": "embedding_mlp",
              "fields": [{"table": "a", "vocab": 10, "dim": 4}, {"table": "b", "vocab": 20, "dim": 4}],
              "hidden": [8], "classes": 1},
    "train_data": {"format": "libsvm", "path": "unused.libsvm", "num_features": 30,
                   "zero_based": true, "field_offsets": [0, 10]},
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "batch_size": 16, "steps": 100, "seed": 3
  })");
}

// api_rest.md's example inputs as a tf.Example job: "tag" (hashed), "signals" [5],
// "sensor" [2, 2]; heads "prediction" (sigmoid) and "classes" (softmax of 3).
Json TfJob() {
  return Json::parse(R"({
    "model": {"type": "graph",
              "inputs": [{"name": "x", "type": "dense", "dim": 9},
                         {"name": "tag", "type": "sparse", "field": 0}],
              "layers": [{"name": "emb", "type": "embedding", "inputs": ["tag"], "vocab": 16,
                          "dim": 3, "combiner": "sum"},
                         {"name": "cat", "type": "concat", "inputs": ["x", "emb"]},
                         {"name": "h", "type": "dense", "inputs": ["cat"], "units": 6,
                          "activation": "relu"},
                         {"name": "prediction", "type": "dense", "inputs": ["h"], "units": 1},
                         {"name": "classes", "type": "dense", "inputs": ["h"], "units": 3}],
              "outputs": [{"layer": "prediction", "loss": "sigmoid_cross_entropy"},
                          {"layer": "classes", "loss": "softmax_cross_entropy"}]},
    "train_data": {"format": "tfrecord", "path": "unused.tfrecord", "label": "label",
                   "dense": [{"feature": "signals", "shape": [5]},
                             {"feature": "sensor", "shape": [2, 2]}],
                   "sparse": [{"feature": "tag", "type": "bytes", "hash_buckets": 16}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "batch_size": 16, "steps": 100, "seed": 5
  })");
}

// A model dir with job.json and a committed final checkpoint at `step` of the initial
// values, on 2 ps tasks.
std::string WriteModelDir(const TempDir& tmp, const std::string& name, Json json, int64_t step) {
  const std::string dir = tmp / name;
  json["base_dir"] = tmp.path();
  WriteBytes(dir + "/job.json", json.dump(2));
  auto job = job::ParseJob(json, tmp.path());
  REQUIRE(job.ok());
  auto model = model::BuildModel(job->model, "job.model");
  INFO(model.status().ToString());
  REQUIRE(model.ok());
  auto plan = job::PlanVariables(*job, **model, 2);
  REQUIRE(plan.ok());
  std::vector<std::unique_ptr<ps::server::Store>> stores;
  for (int p = 0; p < 2; ++p) {
    stores.push_back(std::make_unique<ps::server::Store>());
    REQUIRE(stores[p]->Configure(job->optimizer).ok());
  }
  for (const auto& s : plan->shards) {
    const auto& v = *std::find_if(plan->variables.begin(), plan->variables.end(),
                                  [&](const auto& d) { return d.name == s.layout.var; });
    REQUIRE(
        stores[s.ps]
            ->Create({.layout = s.layout, .init = v.init, .seed = job->seed, .row_policy = v.rows})
            .ok());
  }
  ckpt::Manifest m;
  m.global_step = step;
  m.unix_time = 1;
  m.final = true;
  m.num_ps = 2;
  m.extra = Json::object();
  for (int p = 0; p < 2; ++p) {
    ckpt::ShardCheckpointer ck(stores[p].get(), p);
    auto r = ck.Save({.model_dir = dir, .global_step = step, .delta_base = -1, .delta_parent = -1});
    REQUIRE(r.ok());
    m.shards.push_back({r->file, r->bytes, r->digest});
  }
  REQUIRE(ckpt::CommitCheckpoint(dir, m).ok());
  return dir;
}

std::shared_ptr<ServedModel> Serve(const std::string& name, const std::string& model_dir,
                                   std::map<std::string, int64_t> labels = {}) {
  std::vector<std::string> warnings;
  auto bundle = Bundle::LoadModelDir(model_dir, &warnings);
  INFO(bundle.status().ToString());
  REQUIRE(bundle.ok());
  auto v = ServedVersion::Make(*bundle);
  INFO(v.status().ToString());
  REQUIRE(v.ok());
  auto m = std::make_shared<ServedModel>(name, std::move(labels));
  m->Set(*v);
  return m;
}

std::string Fixture(const std::string& name) {
  const char* src = std::getenv("PSTRAIN_SOURCE_DIR");
  REQUIRE(src != nullptr);
  std::ifstream in(std::string(src) + "/test/unit/serving/rest_fixtures/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The response template with every "<h:i:j>" replaced by that score, as JSON.
Json Expected(const std::string& tmpl, const Scores& s) {
  std::string out;
  std::regex re("\"<([0-9]+):([0-9]+):([0-9]+)>\"");
  auto begin = std::sregex_iterator(tmpl.begin(), tmpl.end(), re);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    out += tmpl.substr(last, static_cast<size_t>(it->position()) - last);
    const size_t h = std::stoul((*it)[1]), i = std::stoul((*it)[2]), j = std::stoul((*it)[3]);
    const size_t k = s.heads[h].size() / static_cast<size_t>(s.examples);
    AppendFloat(&out, s.heads[h][i * k + j]);
    last = static_cast<size_t>(it->position() + it->length());
  }
  out += tmpl.substr(last);
  auto j = ParseRequestJson(out);
  REQUIRE(j.ok());
  return *j;
}

Json Body(const RestResponse& r) {
  auto j = ParseRequestJson(r.body);
  INFO(r.body);
  REQUIRE(j.ok());
  return *j;
}

std::string Header(const RestResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

Scores ScoreDirect(const ServedModel& m, const model::Batch& b) {
  auto s = m.Get()->Score(b);
  REQUIRE(s.ok());
  return *s;
}

void AddField(model::Batch* b, size_t f, std::vector<int64_t> ids, std::vector<float> values = {}) {
  auto& field = b->sparse[f];
  if (field.offsets.empty()) field.offsets.push_back(0);
  field.ids.insert(field.ids.end(), ids.begin(), ids.end());
  field.values.insert(field.values.end(), values.begin(), values.end());
  field.offsets.push_back(static_cast<int64_t>(field.ids.size()));
}

TEST_CASE(
    "row and columnar predict, one output (libsvm ids split into fields) and two (tf.Example)") {
  TempDir tmp;
  auto svm = Serve("svm", WriteModelDir(tmp, "svm", LibSvmJob(), 30));
  auto tf = Serve("tf", WriteModelDir(tmp, "tf", TfJob(), 40));
  RestApi api({}, {svm, tf});

  // libsvm: features 1, 12, 25 -> field 0 id 1, field 1 ids 2 and 15 (values given or 1).
  model::Batch b;
  b.size = 3;
  b.sparse.resize(2);
  AddField(&b, 0, {1}, {1});
  AddField(&b, 1, {2, 15}, {1, 1});
  AddField(&b, 0, {3}, {1});
  AddField(&b, 1, {8}, {1});
  AddField(&b, 0, {7}, {1});
  AddField(&b, 1, {}, {});
  const Scores rows = ScoreDirect(*svm, b);
  auto r = api.Handle("POST", "/v1/models/svm:predict", Fixture("row_one_output.request.json"));
  CHECK(r.status == 200);
  CHECK(Body(r) == Expected(Fixture("row_one_output.response.json"), rows));
  CHECK(Header(r, "X-Pstrain-Model-Step") == "30/30");
  CHECK(r.instances == 3);
  CHECK(r.model == "svm");

  b.sparse[0].values = {0.5f, 1, 3};
  b.sparse[1].values = {1, 2, 2.5f};
  const Scores cols = ScoreDirect(*svm, b);
  r = api.Handle("POST", "/V1/Models/svm/Versions/30:PREDICT",
                 Fixture("columnar_one_output.request.json"));
  CHECK(r.status == 200);
  CHECK(Body(r).dump() == Expected(Fixture("columnar_one_output.response.json"), cols).dump());

  // tf.Example: dense = signals then sensor; tag hashed into 16 buckets.
  model::Batch t;
  t.size = 2;
  t.dense_dim = 9;
  t.dense = {1, 2, 3, 4, 5, 1, 2, 3, 4, 3, 4, 1, 2, 5, 4, 5, 6, 8};
  t.sparse.resize(1);
  AddField(&t, 0, {static_cast<int64_t>(data::HashBytes("foo") % 16)});
  AddField(&t, 0, {static_cast<int64_t>(data::HashBytes("bar") % 16)});
  const Scores two = ScoreDirect(*tf, t);
  REQUIRE(two.heads.size() == 2);
  r = api.Handle("POST", "/v1/models/tf:predict", Fixture("row_two_outputs.request.json"));
  CHECK(r.status == 200);
  CHECK(Body(r) == Expected(Fixture("row_two_outputs.response.json"), two));
  r = api.Handle("POST", "/v1/models/tf/versions/40:predict",
                 Fixture("columnar_two_outputs.request.json"));
  CHECK(r.status == 200);
  CHECK(Body(r) == Expected(Fixture("columnar_two_outputs.response.json"), two));
  CHECK(Header(r, "X-Pstrain-Model-Step") == "40/40");
  // Printed with 9 significant digits: the text reads back as the very float.
  CHECK(r.body.find("\"prediction\":[") != std::string::npos);

  // NaN, Infinity and -Infinity are numbers in requests and responses, as in TF Serving.
  r = api.Handle("POST", "/v1/models/tf:predict",
                 R"({"instances": [{"tag": "NaN", "signals": [NaN, 1, Infinity, -Infinity, 2],
                                    "sensor": [[1, 2], [3, 4]]}]})");
  CHECK(r.status == 200);
  model::Batch odd;
  odd.size = 1;
  odd.dense_dim = 9;
  odd.dense = {NAN, 1, INFINITY, -INFINITY, 2, 1, 2, 3, 4};
  odd.sparse.resize(1);
  AddField(&odd, 0, {static_cast<int64_t>(data::HashBytes("NaN") % 16)});
  const Scores odd_scores = ScoreDirect(*tf, odd);
  // (NaN compares unequal: compared as text, where nlohmann prints it null.)
  CHECK(Body(r).dump() == Expected(R"({"predictions": [{"prediction": "<0:0:0>",
      "classes": ["<1:0:0>", "<1:0:1>", "<1:0:2>"]}]})",
                                   odd_scores)
                              .dump());
  auto parsed = ParseRequestJson(R"({"a": [NaN, -Infinity, "NaN", 1.5e3]})");
  REQUIRE(parsed.ok());
  CHECK((*parsed)["a"][2] == "NaN");
  // The libsvm reader refuses a value "nan", as it would in a file.
  r = api.Handle("POST", "/v1/models/svm:predict",
                 R"({"inputs": {"features": [[1]], "values": [[NaN]]}})");
  CHECK(r.status == 400);
  CHECK(Body(r)["error"] == "instance 0: bad feature '1:nan'");
}

TEST_CASE("model status and metadata as TF Serving's") {
  TempDir tmp;
  auto tf = Serve("tf", WriteModelDir(tmp, "tf", TfJob(), 40), {{"stable", 40}, {"old", 7}});
  RestApi api({}, {tf});
  const Json status = Json::parse(
      R"({"model_version_status": [{"version": "40", "state": "AVAILABLE",
          "status": {"error_code": "OK", "error_message": ""}}]})");
  for (const char* path : {"/v1/models/tf", "/v1/models/tf/versions/40",
                           "/v1/models/tf/labels/stable", "/v1/MODELS/tf/LABELS/stable"}) {
    auto r = api.Handle("GET", path, "");
    INFO(path);
    CHECK(r.status == 200);
    CHECK(Body(r) == status);
    CHECK(Header(r, "X-Pstrain-Model-Step") == "40/40");
  }
  auto r = api.Handle("GET", "/v1/models/tf/metadata", "");
  CHECK(r.status == 200);
  const Json m = Body(r);
  CHECK(m["model_spec"] == Json{{"name", "tf"}, {"signature_name", ""}, {"version", "40"}});
  const Json& sig = m["metadata"]["signature_def"]["signature_def"]["serving_default"];
  CHECK(sig["method_name"] == "tensorflow/serving/predict");
  CHECK(sig["inputs"]["tag"]["dtype"] == "DT_STRING");
  CHECK(sig["inputs"]["sensor"]["dtype"] == "DT_FLOAT");
  CHECK(sig["inputs"]["sensor"]["tensor_shape"]["dim"] ==
        Json::parse(R"([{"size": "-1", "name": ""}, {"size": "2", "name": ""},
                        {"size": "2", "name": ""}])"));
  CHECK(sig["outputs"]["classes"]["tensor_shape"]["dim"][1]["size"] == "3");
  CHECK(sig["outputs"].size() == 2);

  // 404: unknown model, version, label (and a label of a version not loaded).
  for (const char* path : {"/v1/models/nope", "/v1/models/tf/versions/41", "/v1/models/tf/labels/x",
                           "/v1/models/tf/labels/old", "/v2/models/tf", "/v1/models/tf/extra"}) {
    auto e = api.Handle("GET", path, "");
    INFO(path);
    CHECK(e.status == 404);
    CHECK(Body(e)["error"].is_string());
  }
  CHECK(Header(api.Handle("GET", "/v1/models/nope", ""), "X-Pstrain-Model-Step") == "none");
  CHECK(api.Handle("POST", "/v1/models/tf", "{}").status == 405);
  CHECK(api.Handle("GET", "/v1/models/tf:predict", "").status == 405);
}

TEST_CASE("several versions: by number or label, the newest by default; models removed") {
  TempDir tmp;
  const std::string dir = WriteModelDir(tmp, "tf", TfJob(), 40);
  WriteModelDir(tmp, "tf", TfJob(), 50);
  auto m = std::make_shared<ServedModel>("tf");
  for (int64_t step : {40, 50}) {
    std::vector<std::string> warnings;
    auto b = Bundle::LoadModelDir(dir, step, &warnings);
    INFO(b.status().ToString());
    REQUIRE(b.ok());
    auto v = ServedVersion::Make(*b);
    REQUIRE(v.ok());
    CHECK((*v)->version() == step);
    m->Put(*v);
  }
  std::vector<std::string> warnings;
  CHECK(Bundle::LoadModelDir(dir, 45, &warnings).status().code() == Code::kNotFound);
  m->SetLabels({{"stable", 40}, {"gone", 30}});
  m->SetLoading(60, true);
  auto table = std::make_shared<ServedModels>();
  table->Put(m);
  RestApi api({}, table);
  auto versions = [](const RestResponse& r) {
    std::vector<std::string> out;
    const Json body = Body(r);
    for (const auto& v : body["model_version_status"]) {
      out.push_back(v["version"].get<std::string>() + ":" + v["state"].get<std::string>());
    }
    return out;
  };
  auto r = api.Handle("GET", "/v1/models/tf", "");
  CHECK(r.status == 200);
  CHECK(versions(r) == std::vector<std::string>{"60:LOADING", "50:AVAILABLE", "40:AVAILABLE"});
  CHECK(Header(r, "X-Pstrain-Model-Step") == "50/50");
  r = api.Handle("GET", "/v1/models/tf/versions/40", "");
  CHECK(versions(r) == std::vector<std::string>{"40:AVAILABLE"});
  CHECK(Header(r, "X-Pstrain-Model-Step") == "40/40");
  r = api.Handle("GET", "/v1/models/tf/labels/stable/metadata", "");
  CHECK(Body(r)["model_spec"]["version"] == "40");
  CHECK(Header(r, "X-Pstrain-Model-Step") == "40/40");
  r = api.Handle("GET", "/v1/models/tf/labels/gone", "");
  CHECK(r.status == 404);
  CHECK(Body(r)["error"] == "Servable not found for request: Specific(tf, 30)");
  CHECK(api.Handle("GET", "/v1/models/tf/versions/60", "").status == 404);
  CHECK(Body(api.Handle("GET", "/v1/models/tf/labels/x", ""))["error"] ==
        "Unrecognized servable version label: x");
  // A version unloaded: the newest left answers; requests holding it finish on it.
  auto held = m->Find(50);
  m->Remove(50);
  CHECK(Header(api.Handle("GET", "/v1/models/tf", ""), "X-Pstrain-Model-Step") == "40/40");
  CHECK(api.Handle("GET", "/v1/models/tf/versions/50", "").status == 404);
  CHECK(held->bundle()->info().source_step == 50);
  // A model removed: 404 as for any unknown model.
  table->Remove("tf");
  r = api.Handle("GET", "/v1/models/tf", "");
  CHECK(r.status == 404);
  CHECK(Body(r)["error"] == "Servable not found for request: Latest(tf)");
}

TEST_CASE("predict errors: 400 for bad requests, 413 over the limit, 503 before loading") {
  TempDir tmp;
  auto svm = Serve("svm", WriteModelDir(tmp, "svm", LibSvmJob(), 30));
  auto tf = Serve("tf", WriteModelDir(tmp, "tf", TfJob(), 40));
  auto pending = std::make_shared<ServedModel>("pending");
  RestApi api({.body_limit = 256}, {svm, tf, pending});
  auto err = [&](const std::string& model, const std::string& body) {
    auto r = api.Handle("POST", "/v1/models/" + model + ":predict", body);
    INFO(body + " -> " + r.body);
    CHECK(Body(r)["error"].is_string());
    return r.status;
  };
  CHECK(err("svm", "{not json") == 400);
  CHECK(err("svm", "[1, 2]") == 400);
  CHECK(err("svm", R"({"instances": [[1]], "inputs": [[1]]})") == 400);
  CHECK(err("svm", R"({"instance": [[1]]})") == 400);
  CHECK(err("svm", R"({"signature_name": "other", "instances": [[1]]})") == 400);
  CHECK(err("svm", R"({"instances": []})") == 400);
  CHECK(err("svm", R"({"instances": [{"feature": [1]}]})") == 400);  // unknown input
  CHECK(err("svm", R"({"instances": [{"values": [1]}]})") == 400);   // missing input
  CHECK(err("svm", R"({"instances": [["a"]]})") == 400);             // wrong type
  CHECK(err("svm", R"({"instances": [[30]]})") == 400);              // outside the ids
  CHECK(err("svm", R"({"inputs": {"features": [[1]], "values": [[1], [2]]}})") == 400);
  CHECK(err("tf", R"({"instances": [[1]]})") == 400);  // several inputs: name them
  CHECK(err("tf", R"({"instances": [{"tag": "a", "signals": [1, 2], "sensor": [1, 2, 3, 4]}]})") ==
        400);  // wrong shape
  CHECK(err("tf", R"({"instances": [{"signals": [1, 2, 3, 4, 5], "sensor": [1, 2, 3, 4]}]})") ==
        400);  // missing input
  CHECK(err("svm", R"({"instances": [[1]], "pad": ")" + std::string(300, 'x') + "\"}") == 413);
  CHECK(err("pending", R"({"instances": [[1]]})") == 503);
  CHECK(api.Handle("POST", "/v1/models/svm:predict", R"({"instances": [[1]]})").status == 200);
}

TEST_CASE("criteo_tsv and idx inputs become the reader's examples") {
  TempDir tmp;
  Json criteo = Json::parse(R"({
    "model": {"type": "embedding_mlp",
              "fields": [{"table": "c1", "vocab": 10, "dim": 2}, {"table": "c2", "vocab": 10, "dim": 2}],
              "dense_dim": 2, "hidden": [4], "classes": 1},
    "train_data": {"format": "criteo_tsv", "path": "unused.tsv", "integer_columns": 2,
                   "categorical_columns": 2, "dense": "raw", "buckets": 10},
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "batch_size": 16, "steps": 100, "seed": 7
  })");
  Json idx = Json::parse(R"({
    "model": {"type": "mlp", "input_dim": 4, "hidden": [5], "classes": 3},
    "train_data": {"format": "idx", "images": "unused-images", "labels": "unused-labels"},
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "batch_size": 16, "steps": 100, "seed": 8
  })");
  auto c = Serve("criteo", WriteModelDir(tmp, "criteo", criteo, 10));
  auto i = Serve("idx", WriteModelDir(tmp, "idx", idx, 20));
  RestApi api({}, {c, i});

  model::Batch b;
  b.size = 2;
  b.dense_dim = 2;
  b.dense = {3, 7, 1, 0};  // I2 missing: an empty cell, 0
  b.sparse.resize(2);
  auto h = [](const char* s) { return static_cast<int64_t>(data::HashBytes(s) % 10); };
  AddField(&b, 0, {h("68fd1e64")});
  AddField(&b, 1, {h("abc")});
  AddField(&b, 0, {h("x")});
  AddField(&b, 1, {});  // C2 null: no id
  auto r = api.Handle("POST", "/v1/models/criteo:predict",
                      R"({"instances": [{"I1": 3, "I2": 7, "C1": "68fd1e64", "C2": "abc"},
                                        {"I1": 1, "C1": "x", "C2": null}]})");
  CHECK(r.status == 200);
  CHECK(Body(r) == Expected(R"({"predictions": ["<0:0:0>", "<0:1:0>"]})", ScoreDirect(*c, b)));
  CHECK(api.Handle("POST", "/v1/models/criteo:predict", R"({"instances": [{"I1": "3"}]})").status ==
        400);
  CHECK(api.Handle("POST", "/v1/models/criteo:predict", R"({"instances": [{"C1": "a	b"}]})")
            .status == 400);
  const Json sig =
      Body(api.Handle("GET", "/v1/models/criteo/metadata",
                      ""))["metadata"]["signature_def"]["signature_def"]["serving_default"];
  CHECK(sig["inputs"].size() == 4);
  CHECK(sig["inputs"]["I2"]["dtype"] == "DT_INT64");
  CHECK(sig["inputs"]["C1"]["dtype"] == "DT_STRING");

  model::Batch img;
  img.size = 1;
  img.dense_dim = 4;
  for (int p : {0, 255, 10, 3}) img.dense.push_back(static_cast<float>(p) * (1.0f / 255.0f));
  r = api.Handle("POST", "/v1/models/idx:predict", R"({"instances": [[0, 255, 10, 3]]})");
  CHECK(r.status == 200);
  CHECK(Body(r) ==
        Expected(R"({"predictions": [["<0:0:0>", "<0:0:1>", "<0:0:2>"]]})", ScoreDirect(*i, img)));
  r = api.Handle("POST", "/v1/models/idx:predict", R"({"inputs": {"image": [[0, 255, 10, 3]]}})");
  CHECK(Body(r) ==
        Expected(R"({"outputs": [["<0:0:0>", "<0:0:1>", "<0:0:2>"]]})", ScoreDirect(*i, img)));
  for (const char* bad : {R"({"instances": [[0, 256, 10, 3]]})",
                          R"({"instances": [[0, 1.5, 10, 3]]})", R"({"instances": [[0, 1, 2]]})"}) {
    INFO(bad);
    CHECK(api.Handle("POST", "/v1/models/idx:predict", bad).status == 400);
  }
  CHECK(Body(api.Handle("GET", "/v1/models/idx/metadata",
                        ""))["metadata"]["signature_def"]["signature_def"]["serving_default"]
                            ["inputs"]["image"]["tensor_shape"]["dim"][1]["size"] == "4");
}

}  // namespace
}  // namespace ps::serving
