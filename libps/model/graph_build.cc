// BuildGraphPlan: reads a graph config strictly and builds its ops in topological order.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "libps/core/text.h"
#include "libps/model/graph.h"

namespace ps::model {

const char* LossKindName(LossKind k) {
  switch (k) {
    case LossKind::kSoftmaxCrossEntropy:
      return "softmax_cross_entropy";
    case LossKind::kSigmoidCrossEntropy:
      return "sigmoid_cross_entropy";
    case LossKind::kMeanSquaredError:
      return "mean_squared_error";
  }
  return "unknown";
}

namespace {

Status CheckName(const std::string& name, const std::string& where) {
  if (name.empty()) return InvalidArgument(where + ": must not be empty");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok)
      return InvalidArgument(where + ": " + QuoteInput(name, '"') +
                             " may hold only letters, digits, '_', '-' and '.'");
  }
  return Status::Ok();
}

// One "layers" entry before its op is built.
struct LayerEntry {
  std::string name, type, path;
  const Json* json = nullptr;
  std::vector<std::string> input_names;
  std::vector<int> inputs;  // index into the combined name table (inputs, then layers)
};

Status ReadGraphInput(const Json& j, const std::string& index_path, GraphNode* node,
                      std::string* path) {
  JsonReader r(j, index_path);
  PS_RETURN_IF_ERROR(r.status());
  PS_RETURN_IF_ERROR(r.Get("name", &node->name));
  PS_RETURN_IF_ERROR(CheckName(node->name, r.Path("name")));
  *path = r.path().substr(0, r.path().rfind('[')) + "." + node->name;
  JsonReader in(j, *path);
  in.Find("name");
  std::string type;
  PS_RETURN_IF_ERROR(in.Get("type", &type));
  if (type == "sparse") {
    node->sparse = true;
    int64_t field = 0;
    PS_RETURN_IF_ERROR(in.Get("field", &field));
    if (field < 0 || field >= 65536) {
      return InvalidArgument(in.Path("field") + ": must be in [0, 65536), got " +
                             std::to_string(field));
    }
    node->field.field = static_cast<int>(field);
    PS_RETURN_IF_ERROR(in.GetOr("weighted", &node->field.weighted));
  } else if (type == "dense" || type == "image") {
    if (type == "dense") {
      int64_t dim = 0;
      PS_RETURN_IF_ERROR(ReadPositive(in, "dim", &dim, true, kMaxWidth));
      node->shape = {dim};
    } else {
      PS_RETURN_IF_ERROR(in.Get("shape", &node->shape));
      if (node->shape.size() != 3) {
        return InvalidArgument(in.Path("shape") + ": expected [height, width, channels], got " +
                               ShapeString(node->shape));
      }
      for (int64_t d : node->shape) {
        if (d < 1 || d > 65536)
          return InvalidArgument(in.Path("shape") + ": dimensions must be in [1, 65536]");
      }
    }
    node->size = NumElements(node->shape);
    if (node->size > kMaxWidth)
      return InvalidArgument(in.Path("shape") + ": more than 2^24 values");
    PS_RETURN_IF_ERROR(in.GetOr("offset", &node->dense_offset));
    if (node->dense_offset < 0 || node->dense_offset > kMaxWidth) {
      return InvalidArgument(in.Path("offset") + ": must be in [0, 2^24], got " +
                             std::to_string(node->dense_offset));
    }
  } else {
    return InvalidArgument(in.Path("type") + ": unknown input type " + QuoteInput(type, '"') +
                           " (expected dense, image or sparse)");
  }
  return in.Finish();
}

Status ReadHead(const Json& j, const std::string& path,
                const std::map<std::string, int>& layer_index, GraphHead* head,
                std::string* layer) {
  JsonReader r(j, path);
  PS_RETURN_IF_ERROR(r.status());
  PS_RETURN_IF_ERROR(r.Get("layer", layer));
  if (!layer_index.contains(*layer)) {
    return InvalidArgument(r.Path("layer") + ": unknown layer \"" + *layer + "\"");
  }
  head->info.name = *layer;
  PS_RETURN_IF_ERROR(r.GetOr("name", &head->info.name));
  PS_RETURN_IF_ERROR(CheckName(head->info.name, r.Path("name")));
  std::string loss;
  PS_RETURN_IF_ERROR(r.Get("loss", &loss));
  if (loss == LossKindName(LossKind::kSoftmaxCrossEntropy)) {
    head->info.loss = LossKind::kSoftmaxCrossEntropy;
  } else if (loss == LossKindName(LossKind::kSigmoidCrossEntropy)) {
    head->info.loss = LossKind::kSigmoidCrossEntropy;
  } else if (loss == LossKindName(LossKind::kMeanSquaredError)) {
    head->info.loss = LossKind::kMeanSquaredError;
  } else {
    return InvalidArgument(
        r.Path("loss") + ": unknown loss " + QuoteInput(loss, '"') +
        " (expected softmax_cross_entropy, sigmoid_cross_entropy or mean_squared_error)");
  }
  PS_RETURN_IF_ERROR(r.GetOr("weight", &head->info.weight));
  if (!(head->info.weight >= 0.0 && head->info.weight <= 1e6)) {
    return InvalidArgument(r.Path("weight") + ": must be in [0, 1e6], got " +
                           std::to_string(head->info.weight));
  }
  PS_RETURN_IF_ERROR(r.GetOr("label_column", &head->label_column));
  if (r.Has("label_column") && (head->label_column < 0 || head->label_column >= kMaxWidth)) {
    return InvalidArgument(r.Path("label_column") + ": must be in [0, 2^24), got " +
                           std::to_string(head->label_column));
  }
  return r.Finish();
}

// A cycle among the layers not yet ordered (each has an unordered input): walk inputs
// until a layer repeats. Returns "a -> b -> a" in data-flow order.
std::string DescribeCycle(const std::vector<LayerEntry>& layers, size_t first_layer,
                          const std::vector<bool>& done, size_t start) {
  std::vector<size_t> walk;
  std::map<size_t, size_t> seen;
  size_t at = start;
  while (!seen.contains(at)) {
    seen[at] = walk.size();
    walk.push_back(at);
    for (int in : layers[at].inputs) {
      if (static_cast<size_t>(in) >= first_layer && !done[in - first_layer]) {
        at = in - first_layer;
        break;
      }
    }
  }
  std::vector<size_t> cycle(walk.begin() + static_cast<std::ptrdiff_t>(seen[at]), walk.end());
  std::reverse(cycle.begin(), cycle.end());  // walked from consumer to producer
  std::rotate(cycle.begin(), std::find(cycle.begin(), cycle.end(), at), cycle.end());
  std::string s;
  for (size_t l : cycle) s += layers[l].name + " -> ";
  return s + layers[cycle.front()].name;
}

}  // namespace

Result<GraphPlan> BuildGraphPlan(const Json& config, const std::string& path) {
  JsonReader r(config, path);
  PS_RETURN_IF_ERROR(r.status());
  r.Find("type");
  GraphPlan plan;
  std::map<std::string, int> index;  // input and layer names -> combined index

  const Json* inputs = r.Find("inputs");
  if (inputs == nullptr || !inputs->is_array() || inputs->empty()) {
    return InvalidArgument(r.Path("inputs") + ": expected a non-empty array of inputs");
  }
  for (size_t i = 0; i < inputs->size(); ++i) {
    GraphNode node;
    std::string ipath;
    PS_RETURN_IF_ERROR(ReadGraphInput(
        (*inputs)[i], r.Path("inputs") + "[" + std::to_string(i) + "]", &node, &ipath));
    if (!index.emplace(node.name, static_cast<int>(i)).second) {
      return InvalidArgument(ipath + ": the name is used twice");
    }
    if (node.sparse) {
      plan.num_fields = std::max<int64_t>(plan.num_fields, node.field.field + 1);
    } else {
      plan.dense_dim = std::max(plan.dense_dim, node.dense_offset + node.size);
    }
    plan.nodes.push_back(std::move(node));
  }
  const size_t first_layer = plan.nodes.size();

  const Json* layers_json = r.Find("layers");
  if (layers_json == nullptr || !layers_json->is_array() || layers_json->empty()) {
    return InvalidArgument(r.Path("layers") + ": expected a non-empty array of layers");
  }
  std::vector<LayerEntry> layers;
  for (size_t i = 0; i < layers_json->size(); ++i) {
    const Json& j = (*layers_json)[i];
    JsonReader lr(j, r.Path("layers") + "[" + std::to_string(i) + "]");
    PS_RETURN_IF_ERROR(lr.status());
    LayerEntry e;
    e.json = &j;
    PS_RETURN_IF_ERROR(lr.Get("name", &e.name));
    PS_RETURN_IF_ERROR(CheckName(e.name, lr.Path("name")));
    e.path = r.Path("layers") + "." + e.name;
    if (!index.emplace(e.name, static_cast<int>(first_layer + i)).second) {
      return InvalidArgument(e.path + ": the name is used twice");
    }
    JsonReader named(j, e.path);
    PS_RETURN_IF_ERROR(named.Get("type", &e.type));
    PS_RETURN_IF_ERROR(named.Get("inputs", &e.input_names));
    if (e.input_names.empty()) return InvalidArgument(named.Path("inputs") + ": must not be empty");
    layers.push_back(std::move(e));
  }
  for (LayerEntry& e : layers) {
    for (size_t k = 0; k < e.input_names.size(); ++k) {
      auto it = index.find(e.input_names[k]);
      if (it == index.end()) {
        return InvalidArgument(e.path + ".inputs[" + std::to_string(k) + "]: unknown input \"" +
                               e.input_names[k] + "\" (no input or layer has that name)");
      }
      e.inputs.push_back(it->second);
    }
  }

  std::map<std::string, int> layer_index;
  for (size_t l = 0; l < layers.size(); ++l) layer_index[layers[l].name] = static_cast<int>(l);
  const Json* outputs = r.Find("outputs");
  if (outputs == nullptr || !outputs->is_array() || outputs->empty()) {
    return InvalidArgument(r.Path("outputs") + ": expected a non-empty array of outputs");
  }
  std::vector<std::string> head_layers;
  std::set<std::string> head_names;
  for (size_t i = 0; i < outputs->size(); ++i) {
    GraphHead head;
    std::string layer;
    const std::string hpath = r.Path("outputs") + "[" + std::to_string(i) + "]";
    PS_RETURN_IF_ERROR(ReadHead((*outputs)[i], hpath, layer_index, &head, &layer));
    if (!head_names.insert(head.info.name).second) {
      return InvalidArgument(hpath + ".name: head " + QuoteInput(head.info.name, '"') +
                             " is named twice");
    }
    if (head.label_column >= 0) plan.dense_dim = std::max(plan.dense_dim, head.label_column + 1);
    head_layers.push_back(layer);
    plan.heads.push_back(std::move(head));
  }
  PS_RETURN_IF_ERROR(r.Finish());

  // Topological order (Kahn), the earliest declared ready layer first.
  std::vector<bool> done(layers.size(), false);
  std::vector<size_t> order;
  std::vector<int> node_of(first_layer + layers.size(), -1);
  for (size_t i = 0; i < first_layer; ++i) node_of[i] = static_cast<int>(i);
  while (order.size() < layers.size()) {
    bool progressed = false;
    for (size_t l = 0; l < layers.size(); ++l) {
      if (done[l]) continue;
      const bool ready = std::all_of(layers[l].inputs.begin(), layers[l].inputs.end(),
                                     [&](int in) { return node_of[in] >= 0; });
      if (!ready) continue;
      done[l] = true;
      order.push_back(l);
      node_of[first_layer + l] = static_cast<int>(first_layer + order.size() - 1);
      progressed = true;
      break;
    }
    if (!progressed) {
      size_t start = 0;
      while (done[start]) ++start;
      return InvalidArgument(layers[start].path + ".inputs: cycle " +
                             DescribeCycle(layers, first_layer, done, start));
    }
  }

  // Layers whose output reaches a head.
  std::vector<bool> used(first_layer + layers.size(), false);
  std::vector<int> stack;
  stack.reserve(head_layers.size());
  for (const std::string& h : head_layers)
    stack.push_back(static_cast<int>(first_layer) + layer_index[h]);
  while (!stack.empty()) {
    const int at = stack.back();
    stack.pop_back();
    if (used[at]) continue;
    used[at] = true;
    if (static_cast<size_t>(at) >= first_layer) {
      for (int in : layers[at - first_layer].inputs) stack.push_back(in);
    }
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    if (!used[first_layer + l]) {
      return InvalidArgument(layers[l].path + ": its output reaches no entry of outputs");
    }
  }

  VarSet vars;
  for (size_t l : order) {
    LayerEntry& e = layers[l];
    JsonReader lr(*e.json, e.path);
    lr.Find("name");
    lr.Find("type");
    lr.Find("inputs");
    OpBuild b;
    b.config = &lr;
    b.name = e.name;
    b.path = e.path;
    b.vars = &vars;
    GraphNode node;
    node.name = e.name;
    for (int in : e.inputs) {
      const GraphNode& src = plan.nodes[node_of[in]];
      node.inputs.push_back(node_of[in]);
      b.in_shapes.push_back(src.shape);
      b.in_names.push_back(src.name);
      b.in_sparse.push_back(src.sparse);
      b.sparse.push_back(src.field);
      node.needs_grad = node.needs_grad || src.needs_grad;
    }
    PS_ASSIGN_OR_RETURN(node.op, MakeOp(e.type, b));
    node.shape = node.op->shape();
    node.size = node.op->size();
    if (node.size < 1 || node.size > kMaxWidth) {
      return InvalidArgument(e.path + ": output shape " + ShapeString(node.shape) +
                             " must hold 1 to 2^24 values");
    }
    node.needs_grad = node.needs_grad || node.op->has_variables();
    plan.nodes.push_back(std::move(node));
  }
  for (size_t h = 0; h < plan.heads.size(); ++h) {
    GraphHead& head = plan.heads[h];
    head.node = node_of[first_layer + layer_index[head_layers[h]]];
    const GraphNode& n = plan.nodes[head.node];
    const std::string hpath = r.Path("outputs") + "[" + std::to_string(h) + "]";
    const bool softmax = head.info.loss == LossKind::kSoftmaxCrossEntropy;
    if (softmax ? n.size < 2 : n.size != 1) {
      return InvalidArgument(hpath + ".loss: " + LossKindName(head.info.loss) + " needs " +
                             (softmax ? "at least 2 outputs (one per class)" : "1 output") +
                             ", layer " + QuoteInput(n.name, '"') + " has shape " +
                             ShapeString(n.shape));
    }
    head.info.outputs = n.size;
  }
  plan.variables = vars.Release();
  if (plan.variables.empty())
    return InvalidArgument(r.Path("layers") + ": the model has no variables to train");
  return plan;
}

}  // namespace ps::model
