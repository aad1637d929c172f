// The concrete models behind BuildModel (model.h documents their configs), for callers
// that build a spec in code. Specs must be valid: BuildModel checks configs and names the
// offending key; these factories assert on invalid specs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libps/model/initializer.h"
#include "libps/model/layers.h"
#include "libps/model/model.h"

namespace ps::model {

struct EmbeddingTableSpec {
  std::string name;  // variable "<name>/embeddings"
  int64_t vocab = 0;
  int64_t dim = 0;
  InitSpec init{InitKind::kUniform, -0.05, 0.05};  // Keras Embedding
  bool lazy = false;  // VariableDef::lazy
};

struct EmbeddingFieldSpec {
  int table = 0;  // index into EmbeddingMlpSpec::tables
  Combiner combiner = Combiner::kMean;
};

// Also the plain MLP: no tables, no fields, dense_dim = input_dim.
struct EmbeddingMlpSpec {
  std::vector<EmbeddingTableSpec> tables;
  std::vector<EmbeddingFieldSpec> fields;  // field i reads batch.sparse[i]
  int64_t dense_dim = 0;
  std::vector<int64_t> hidden;
  Activation activation = Activation::kRelu;
  int64_t classes = 1;  // 1: sigmoid BCE; >= 2: softmax CE
};

struct LogisticRegressionSpec {
  int64_t num_features = 0;
  int64_t num_fields = 1;
  bool lazy = false;  // VariableDef::lazy of "linear/weights"
};

std::unique_ptr<Model> MakeEmbeddingMlp(EmbeddingMlpSpec spec);
std::unique_ptr<Model> MakeLogisticRegression(LogisticRegressionSpec spec);

}  // namespace ps::model
