// The layers of the layer graph (graph.h) as operations over batch-first activations.
// Internal to libps/model (and its tests): GraphModel builds one Op per layer of a job's
// graph and runs them in topological order.
//
// Activations are float arrays [batch * size], row-major, one example after the other;
// an activation's per-example Shape excludes the batch (images are [height, width,
// channels], channels last as in Keras). Every op owns its output buffer.
//
// Thread rules: an Op keeps scratch between calls; one instance per thread (as Model).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/model/batch.h"
#include "libps/model/layers.h"
#include "libps/model/model.h"

namespace ps::model {

using Shape = std::vector<int64_t>;
// The widest a layer or an input may be (units, dims, classes, offsets).
inline constexpr int64_t kMaxWidth = int64_t{1} << 24;
int64_t NumElements(const Shape& s);
std::string ShapeString(const Shape& s);  // "[28, 28, 1]"

// What one Forward / Backward call sees besides its activations.
struct OpContext {
  const Batch* batch = nullptr;
  const Params* params = nullptr;
  Grads* grads = nullptr;  // sized by ResizeGrads; null in Forward-only passes
  int64_t batch_size = 0;
  bool training = false;  // dropout is active only when true
  uint64_t step = 0;      // number of training passes before this one (dropout masks)
};

// The model's variables while a graph is built: layers add theirs, embedding tables are
// shared by name. Variable names are unique.
class VarSet {
 public:
  // Adds a variable; error "<path>: variable \"<name>\" is defined twice".
  Result<size_t> Add(VariableDef def, const std::string& path);

  struct Table {
    std::string name;  // variable "<name>/embeddings"
    int64_t rows = 0;
    int64_t dim = 0;
    InitSpec init;
    bool lazy = false;
    RowPolicy row_policy = {};
    bool hashed = false;  // declared with num_buckets: ids are hashed into rows
    std::string first;    // the layer path that declared it first
    size_t var = 0;
  };
  // Declares (first use) or re-declares a shared embedding table. On a re-declaration the
  // given rows/dim/init/lazy/admit/evict must match the first ("<path>.<key>: ... differs from ...
  // of table \"t\" (<first>)"); *_given = false means "not stated here, inherit".
  struct TableDecl {
    std::string name;
    int64_t rows = 0;
    bool rows_given = false;
    std::string rows_key = "vocab";  // "vocab", or "num_buckets" (hashed)
    int64_t dim = 0;
    bool dim_given = false;
    InitSpec init{InitKind::kUniform, -0.05, 0.05};
    bool init_given = false;
    bool lazy = false;
    bool lazy_given = false;
    RowPolicy row_policy = {};
    bool row_policy_given = false;
  };
  Result<Table> DeclareTable(const TableDecl& decl, const std::string& path);

  const std::vector<VariableDef>& defs() const { return defs_; }
  std::vector<VariableDef> Release() { return std::move(defs_); }

 private:
  std::vector<VariableDef> defs_;
  std::vector<Table> tables_;
};

// A graph input of type "sparse": batch.sparse[field], with or without its values as
// weights.
struct SparseInput {
  int field = 0;
  bool weighted = true;
};

class Op {
 public:
  virtual ~Op() = default;

  const Shape& shape() const { return shape_; }
  int64_t size() const { return size_; }
  bool has_variables() const { return has_variables_; }

  // Appends the row ids (hashed when the layer hashes) of its sparse variables that the
  // batch touches to rows[var]; unsorted, duplicates allowed. The batch is valid.
  virtual void CollectRows(const Batch& batch, std::vector<std::vector<int64_t>>* rows) const;
  // Lowers bound[field] to the table size for each sparse field it reads unhashed.
  virtual void LimitIds(std::vector<int64_t>* bound) const;

  // in[i]: [batch * size of input i] (empty for sparse inputs). Returns the output
  // [batch * size()], owned by the op and valid until the next Forward. Errors only when
  // params lack rows the batch uses.
  virtual Result<std::span<const float>> Forward(const OpContext& ctx,
                                                 std::span<const std::span<const float>> in) = 0;

  // After Forward with the same inputs. dout: d(loss)/d(output), scratch the op may
  // overwrite. Adds d(loss)/d(in[i]) into din[i] (empty: not needed). Writes the
  // gradients of its dense variables into ctx.grads (overwriting) and adds those of its
  // sparse variables.
  virtual void Backward(const OpContext& ctx, std::span<const std::span<const float>> in,
                        std::span<float> dout, std::span<const std::span<float>> din) = 0;

 protected:
  void SetShape(Shape s);
  Shape shape_;
  int64_t size_ = 0;
  bool has_variables_ = false;
};

// What an op factory gets: the layer's config (name, type and inputs already read; the
// factory reads the rest and calls Finish), its inputs' shapes (empty Shape for sparse
// inputs) and the variables built so far.
struct OpBuild {
  JsonReader* config = nullptr;
  std::string name;  // the layer's name (variable prefix)
  std::string path;  // "job.model.layers.<name>" for messages
  std::vector<Shape> in_shapes;
  std::vector<std::string> in_names;
  std::vector<SparseInput> sparse;  // [inputs]; meaningful where in_sparse[i]
  std::vector<bool> in_sparse;
  VarSet* vars = nullptr;
};

// Builds the op of `type`; InvalidArgument for unknown types, bad keys and shapes that do
// not fit (messages start with the layer's path).
Result<std::unique_ptr<Op>> MakeOp(const std::string& type, OpBuild& build);
// The layer types MakeOp knows, comma-separated, for messages.
const char* OpTypeList();

// Factories by family (ops_*.cc); MakeOp dispatches to them.
Result<std::unique_ptr<Op>> MakeDenseOp(OpBuild& b);
Result<std::unique_ptr<Op>> MakeActivationOp(OpBuild& b);
Result<std::unique_ptr<Op>> MakeDropoutOp(OpBuild& b);
Result<std::unique_ptr<Op>> MakeLayerNormOp(OpBuild& b);
Result<std::unique_ptr<Op>> MakeConcatOp(OpBuild& b);
Result<std::unique_ptr<Op>> MakeAddOp(OpBuild& b, bool multiply);
Result<std::unique_ptr<Op>> MakeReshapeOp(OpBuild& b, bool flatten);
Result<std::unique_ptr<Op>> MakeEmbeddingOp(OpBuild& b, bool linear);
Result<std::unique_ptr<Op>> MakeFmOp(OpBuild& b);
Result<std::unique_ptr<Op>> MakeCrossOp(OpBuild& b);
Result<std::unique_ptr<Op>> MakeDotInteractionOp(OpBuild& b);
Result<std::unique_ptr<Op>> MakeConv2dOp(OpBuild& b);
Result<std::unique_ptr<Op>> MakePool2dOp(OpBuild& b, bool max);

// Shared by the factories: errors and key readers that name "<layer path>.<key>".
Status RequireDenseInputs(const OpBuild& b, size_t min_inputs, size_t max_inputs);
Status ReadPositive(JsonReader& r, const char* key, int64_t* out, bool required, int64_t max);
Status ReadActivationKey(JsonReader& r, Activation* out);
// Reads an optional initializer at key into *out.
Status ReadInitKey(JsonReader& r, const char* key, InitSpec* out);

}  // namespace ps::model
