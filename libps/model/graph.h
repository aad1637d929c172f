// The layer graph: a model config {"type": "graph", ...} (docs/reference/job.md documents every
// key) read into a plan of ops, and the Model that runs it. The three shorthand model
// types (mlp, embedding_mlp, logistic_regression) are written as graph configs by
// model.cc and built here: one code path.
//
// A plan is checked whole when it is built (at job-read time): unknown layer types or
// inputs, duplicate names, cycles, shape mismatches, tables declared twice with different
// shapes, layers whose output reaches no head — each an InvalidArgument naming
// "<path>.layers.<name>.<key>" (or inputs.<name>, outputs[i]).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/model/model.h"
#include "libps/model/ops.h"

namespace ps::model {

struct GraphNode {
  std::string name;
  std::unique_ptr<Op> op;   // null for graph inputs
  std::vector<int> inputs;  // node indices, all smaller than this node's
  Shape shape;              // per example; empty for sparse inputs
  int64_t size = 0;         // NumElements(shape); 0 for sparse inputs
  // Graph inputs only.
  bool sparse = false;
  int64_t dense_offset = 0;  // dense/image: first column in batch.dense
  SparseInput field;         // sparse: which batch.sparse field
  // True when d(loss)/d(output) is needed: the op has variables or an input needs it.
  bool needs_grad = false;
};

struct GraphHead {
  HeadInfo info;
  int node = 0;
  int64_t label_column = -1;  // -1: batch.labels; else that column of batch.dense
};

struct GraphPlan {
  std::vector<GraphNode> nodes;  // graph inputs, then layers in run (topological) order
  std::vector<GraphHead> heads;
  std::vector<VariableDef> variables;
  int64_t dense_dim = 0;   // batch.dense_dim the model reads (0: none)
  int64_t num_fields = 0;  // batch.sparse.size() the model reads
};

// Reads and checks a graph config; `path` names it in errors ("job.model").
Result<GraphPlan> BuildGraphPlan(const Json& config, const std::string& path);

// The Model running a plan.
std::unique_ptr<Model> MakeGraphModel(GraphPlan plan);

}  // namespace ps::model
