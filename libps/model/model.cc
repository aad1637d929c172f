// BuildModel: reads the model config (documented in model.h) strictly.
#include "libps/model/model.h"

#include <map>
#include <utility>

#include "libps/core/text.h"
#include "libps/model/graph.h"

namespace ps::model {

int64_t VariableDef::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t VariableDef::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

namespace {

struct EmbeddingTableSpec {
  std::string name;  // variable "<name>/embeddings"
  int64_t vocab = 0;
  int64_t dim = 0;
  InitSpec init{InitKind::kUniform, -0.05, 0.05};  // Keras Embedding
  bool lazy = false;
  RowPolicy row_policy;
};

struct EmbeddingFieldSpec {
  int table = 0;  // index into EmbeddingMlpSpec::tables
  Combiner combiner = Combiner::kMean;
};

// mlp and embedding_mlp (mlp: no tables or fields, dense_dim = input_dim).
struct EmbeddingMlpSpec {
  std::vector<EmbeddingTableSpec> tables;
  std::vector<EmbeddingFieldSpec> fields;  // field i reads batch.sparse[i]
  int64_t dense_dim = 0;
  std::vector<int64_t> hidden;
  Activation activation = Activation::kRelu;
  int64_t classes = 1;  // 1: sigmoid BCE; >= 2: softmax CE
};

// Adds a table's "admit"/"evict" keys to its layer's JSON (none for the default policy).
void AddRowPolicy(const RowPolicy& p, Json* layer) {
  const Json keys = RowPolicyToJson(p);
  if (keys.contains("admit")) (*layer)["admit"] = keys["admit"];
  if (keys.contains("evict")) (*layer)["evict"] = keys["evict"];
}

Json Output(const std::string& layer, int64_t classes) {
  return Json::array(
      {{{"layer", layer},
        {"loss", classes == 1 ? "sigmoid_cross_entropy" : "softmax_cross_entropy"}}});
}

// The graph an mlp / embedding_mlp stands for: field i -> embedding layer "pool_<i>"
// (tables in order of first use), concatenated in field order with the dense features,
// then "dense_<l>" layers; the last one is the linear output layer.
Json EmbeddingMlpGraph(const EmbeddingMlpSpec& spec) {
  Json inputs = Json::array();
  Json layers = Json::array();
  Json pieces = Json::array();
  std::vector<bool> declared(spec.tables.size(), false);
  for (size_t f = 0; f < spec.fields.size(); ++f) {
    const std::string field = "field_" + std::to_string(f);
    inputs.push_back({{"name", field}, {"type", "sparse"}, {"field", f}});
    const EmbeddingFieldSpec& fs = spec.fields[f];
    const EmbeddingTableSpec& t = spec.tables[static_cast<size_t>(fs.table)];
    Json layer = {{"name", "pool_" + std::to_string(f)},
                  {"type", "embedding"},
                  {"inputs", {field}},
                  {"table", t.name},
                  {"combiner", CombinerName(fs.combiner)}};
    if (!declared[static_cast<size_t>(fs.table)]) {
      declared[static_cast<size_t>(fs.table)] = true;
      layer["vocab"] = t.vocab;
      layer["dim"] = t.dim;
      layer["init"] = InitToJson(t.init);
      layer["lazy"] = t.lazy;
      AddRowPolicy(t.row_policy, &layer);
    }
    pieces.push_back(layer["name"]);
    layers.push_back(std::move(layer));
  }
  if (spec.dense_dim > 0) {
    inputs.push_back({{"name", "features"}, {"type", "dense"}, {"dim", spec.dense_dim}});
    pieces.push_back("features");
  }
  Json x = pieces[0];
  if (pieces.size() > 1) {
    layers.push_back({{"name", "concat"}, {"type", "concat"}, {"inputs", pieces}});
    x = "concat";
  }
  for (size_t l = 0; l <= spec.hidden.size(); ++l) {
    const bool last = l == spec.hidden.size();
    const std::string name = "dense_" + std::to_string(l);
    layers.push_back({{"name", name},
                      {"type", "dense"},
                      {"inputs", {x}},
                      {"units", last ? spec.classes : spec.hidden[l]},
                      {"activation", last ? "linear" : ActivationName(spec.activation)}});
    x = name;
  }
  return {{"type", "graph"},
          {"inputs", inputs},
          {"layers", layers},
          {"outputs", Output(x, spec.classes)}};
}

// logistic_regression: one linear layer "linear" over every field. `rows_key`: "vocab"
// (ids index the rows) or "num_buckets" (ids are hashed into them).
Json LogisticRegressionGraph(const char* rows_key, int64_t rows, int64_t num_fields, bool lazy,
                             const RowPolicy& row_policy) {
  Json inputs = Json::array();
  Json fields = Json::array();
  for (int64_t f = 0; f < num_fields; ++f) {
    inputs.push_back({{"name", "field_" + std::to_string(f)}, {"type", "sparse"}, {"field", f}});
    fields.push_back("field_" + std::to_string(f));
  }
  Json linear = {
      {"name", "linear"}, {"type", "linear"}, {"inputs", fields}, {rows_key, rows}, {"lazy", lazy}};
  AddRowPolicy(row_policy, &linear);
  return {{"type", "graph"},
          {"inputs", inputs},
          {"layers", Json::array({linear})},
          {"outputs", Output("linear", 1)}};
}

Result<std::unique_ptr<Model>> BuildGraph(const Json& graph, const std::string& path) {
  PS_ASSIGN_OR_RETURN(GraphPlan plan, BuildGraphPlan(graph, path));
  return MakeGraphModel(std::move(plan));
}

constexpr int64_t kMaxDim = int64_t{1} << 16;
constexpr int64_t kMaxRows = int64_t{1} << 40;

Status CheckRange(const std::string& path, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo) {
    return InvalidArgument(path +
                           (lo == 1 ? ": must be > 0" : ": must be >= " + std::to_string(lo)) +
                           ", got " + std::to_string(v));
  }
  if (v > hi) {
    return InvalidArgument(path + ": must be <= " + std::to_string(hi) + ", got " +
                           std::to_string(v));
  }
  return Status::Ok();
}

// The shorthands keep their four activations (gelu is a graph feature).
Status ReadActivation(JsonReader& r, Activation* out) {
  std::string name = "relu";
  PS_RETURN_IF_ERROR(r.GetOr("activation", &name));
  if (!ParseActivation(name, out) || *out == Activation::kGelu) {
    return InvalidArgument(r.Path("activation") + ": unknown activation " + QuoteInput(name, '"') +
                           " (expected relu, tanh, sigmoid or linear)");
  }
  return Status::Ok();
}

Status ReadCombiner(JsonReader& r, Combiner* out) {
  std::string name = "mean";
  PS_RETURN_IF_ERROR(r.GetOr("combiner", &name));
  if (!ParseCombiner(name, out)) {
    return InvalidArgument(r.Path("combiner") + ": unknown combiner " + QuoteInput(name, '"') +
                           " (expected mean, sum or sqrtn)");
  }
  return Status::Ok();
}

// hidden, activation, classes: shared by mlp and embedding_mlp.
Status ReadHead(JsonReader& r, EmbeddingMlpSpec* spec) {
  PS_RETURN_IF_ERROR(r.GetOr("hidden", &spec->hidden));
  for (size_t i = 0; i < spec->hidden.size(); ++i) {
    PS_RETURN_IF_ERROR(CheckRange(r.Path("hidden") + "[" + std::to_string(i) + "]", spec->hidden[i],
                                  1, kMaxWidth));
  }
  PS_RETURN_IF_ERROR(ReadActivation(r, &spec->activation));
  PS_RETURN_IF_ERROR(r.Get("classes", &spec->classes));
  return CheckRange(r.Path("classes"), spec->classes, 1, kMaxWidth);
}

Result<std::unique_ptr<Model>> BuildMlp(JsonReader& r) {
  EmbeddingMlpSpec spec;
  PS_RETURN_IF_ERROR(r.Get("input_dim", &spec.dense_dim));
  PS_RETURN_IF_ERROR(CheckRange(r.Path("input_dim"), spec.dense_dim, 1, kMaxWidth));
  PS_RETURN_IF_ERROR(ReadHead(r, &spec));
  PS_RETURN_IF_ERROR(r.Finish());
  return BuildGraph(EmbeddingMlpGraph(spec), r.path());
}

Result<std::unique_ptr<Model>> BuildEmbeddingMlp(JsonReader& r) {
  EmbeddingMlpSpec spec;
  const Json* fields = r.Find("fields");
  if (fields == nullptr) return InvalidArgument(r.Path("fields") + ": required key is missing");
  if (!fields->is_array()) {
    return InvalidArgument(r.Path("fields") + ": expected an array, got " + fields->type_name());
  }
  std::map<std::string, size_t> table_index;  // name -> index in spec.tables
  std::vector<size_t> table_first_field;
  for (size_t i = 0; i < fields->size(); ++i) {
    JsonReader f((*fields)[i], r.Path("fields") + "[" + std::to_string(i) + "]");
    PS_RETURN_IF_ERROR(f.status());
    std::string table = "embedding_" + std::to_string(i);
    PS_RETURN_IF_ERROR(f.GetOr("table", &table));
    if (table.empty()) return InvalidArgument(f.Path("table") + ": must not be empty");
    EmbeddingFieldSpec field;
    PS_RETURN_IF_ERROR(ReadCombiner(f, &field.combiner));
    int64_t vocab = 0;
    int64_t dim = 0;
    auto it = table_index.find(table);
    if (it == table_index.end()) {
      EmbeddingTableSpec t;
      t.name = table;
      PS_RETURN_IF_ERROR(f.Get("vocab", &t.vocab));
      PS_RETURN_IF_ERROR(CheckRange(f.Path("vocab"), t.vocab, 1, kMaxRows));
      PS_RETURN_IF_ERROR(f.Get("dim", &t.dim));
      PS_RETURN_IF_ERROR(CheckRange(f.Path("dim"), t.dim, 1, kMaxDim));
      if (const Json* init = f.Find("init")) {
        PS_ASSIGN_OR_RETURN(t.init, ParseInit(*init, f.Path("init")));
      }
      PS_RETURN_IF_ERROR(f.GetOr("lazy", &t.lazy));
      PS_RETURN_IF_ERROR(ReadRowPolicy(f, t.lazy, &t.row_policy));
      field.table = static_cast<int>(spec.tables.size());
      table_index.emplace(table, spec.tables.size());
      table_first_field.push_back(i);
      spec.tables.push_back(std::move(t));
    } else {
      const EmbeddingTableSpec& t = spec.tables[it->second];
      const std::string first = "fields[" + std::to_string(table_first_field[it->second]) + "]";
      vocab = t.vocab;
      dim = t.dim;
      PS_RETURN_IF_ERROR(f.GetOr("vocab", &vocab));
      if (vocab != t.vocab) {
        return InvalidArgument(f.Path("vocab") + ": " + std::to_string(vocab) + " differs from " +
                               std::to_string(t.vocab) + " of table " + QuoteInput(table, '"') +
                               " (" + first + ")");
      }
      PS_RETURN_IF_ERROR(f.GetOr("dim", &dim));
      if (dim != t.dim) {
        return InvalidArgument(f.Path("dim") + ": " + std::to_string(dim) + " differs from " +
                               std::to_string(t.dim) + " of table " + QuoteInput(table, '"') +
                               " (" + first + ")");
      }
      if (f.Has("init")) {
        return InvalidArgument(f.Path("init") + ": table " + QuoteInput(table, '"') +
                               " is initialised by " + first);
      }
      for (const char* key : {"lazy", "admit", "evict"}) {
        if (f.Has(key)) {
          return InvalidArgument(f.Path(key) + ": set on the first field of table " +
                                 QuoteInput(table, '"') + " (" + first + ") only");
        }
      }
      field.table = static_cast<int>(it->second);
    }
    PS_RETURN_IF_ERROR(f.Finish());
    spec.fields.push_back(field);
  }
  PS_RETURN_IF_ERROR(r.GetOr("dense_dim", &spec.dense_dim));
  PS_RETURN_IF_ERROR(CheckRange(r.Path("dense_dim"), spec.dense_dim, 0, kMaxWidth));
  if (spec.fields.empty() && spec.dense_dim == 0) {
    return InvalidArgument(r.Path("fields") + ": must not be empty unless dense_dim > 0");
  }
  PS_RETURN_IF_ERROR(ReadHead(r, &spec));
  PS_RETURN_IF_ERROR(r.Finish());
  return BuildGraph(EmbeddingMlpGraph(spec), r.path());
}

Result<std::unique_ptr<Model>> BuildLogisticRegression(JsonReader& r) {
  int64_t rows = 0;
  int64_t num_fields = 1;
  bool lazy = false;
  const char* rows_key = r.Has("num_buckets") ? "num_buckets" : "num_features";
  if (r.Has("num_buckets") && r.Has("num_features")) {
    return InvalidArgument(r.Path("num_buckets") +
                           ": give either num_features or num_buckets, not both");
  }
  PS_RETURN_IF_ERROR(r.Get(rows_key, &rows));
  PS_RETURN_IF_ERROR(CheckRange(r.Path(rows_key), rows, 1, kMaxRows));
  PS_RETURN_IF_ERROR(r.GetOr("num_fields", &num_fields));
  PS_RETURN_IF_ERROR(CheckRange(r.Path("num_fields"), num_fields, 1, 1 << 16));
  PS_RETURN_IF_ERROR(r.GetOr("lazy", &lazy));
  RowPolicy row_policy;
  PS_RETURN_IF_ERROR(ReadRowPolicy(r, lazy, &row_policy));
  PS_RETURN_IF_ERROR(r.Finish());
  const bool hashed = std::string_view(rows_key) == "num_buckets";
  return BuildGraph(
      LogisticRegressionGraph(hashed ? "num_buckets" : "vocab", rows, num_fields, lazy, row_policy),
      r.path());
}

}  // namespace

Result<std::unique_ptr<Model>> BuildModel(const Json& config, std::string path) {
  JsonReader r(config, std::move(path));
  PS_RETURN_IF_ERROR(r.status());
  std::string type;
  PS_RETURN_IF_ERROR(r.Get("type", &type));
  if (type == "mlp") return BuildMlp(r);
  if (type == "embedding_mlp") return BuildEmbeddingMlp(r);
  if (type == "logistic_regression") return BuildLogisticRegression(r);
  if (type == "graph") return BuildGraph(config, r.path());
  return InvalidArgument(r.Path("type") + ": unknown model type " + QuoteInput(type, '"') +
                         " (expected graph, mlp, embedding_mlp or logistic_regression)");
}

}  // namespace ps::model
