#include "libps/data/synthetic.h"

#include <algorithm>

#include "libps/core/text.h"
#include "libps/data/random.h"
#include "libps/data/vocabulary.h"

namespace ps::data {

std::vector<StringExample> GenerateStringExamples(int64_t examples, uint64_t seed,
                                                  double oov_rate) {
  const auto& vocab = StringFeatureVocabulary();
  const auto& oov = StringFeatureOovWords();
  Rng rng(Mix64(seed ^ 0x5354524645415453ULL));
  std::vector<StringExample> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(examples, 0)));
  std::vector<size_t> pool(vocab.size());
  for (int64_t e = 0; e < examples; ++e) {
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = i;
    StringExample ex;
    // Partial Fisher-Yates: the first 3 positions become a uniform sample without
    // replacement.
    for (size_t k = 0; k < kStringFeaturesPerExample; ++k) {
      size_t j = k + static_cast<size_t>(rng.Below(pool.size() - k));
      std::swap(pool[k], pool[j]);
      ex.features[k] = vocab[pool[k]];
    }
    if (oov_rate > 0) {
      for (auto& f : ex.features) {
        if (rng.Uniform() < oov_rate) f = oov[rng.Below(oov.size())];
      }
    }
    bool yes = std::find(ex.features.begin(), ex.features.end(), "avenger") != ex.features.end();
    ex.label = yes ? "yes" : "no";
    out.push_back(std::move(ex));
  }
  return out;
}

Result<ExampleTable> StringExamplesToTable(const std::vector<StringExample>& examples) {
  PS_ASSIGN_OR_RETURN(Vocabulary features, Vocabulary::Create(StringFeatureVocabulary(), 1));
  PS_ASSIGN_OR_RETURN(Vocabulary labels, Vocabulary::Create(StringLabelVocabulary(), 0));
  ExampleTable t;
  t.info.examples = static_cast<int64_t>(examples.size());
  t.info.classes = 2;
  t.info.label_names = labels.tokens();
  t.info.field_names = {"features"};
  t.info.field_vocab_sizes = {features.size()};
  SparseColumn col;
  col.offsets.push_back(0);
  for (size_t i = 0; i < examples.size(); ++i) {
    for (const auto& f : examples[i].features) col.ids.push_back(features.Lookup(f));
    col.offsets.push_back(static_cast<int64_t>(col.ids.size()));
    int64_t label = labels.Lookup(examples[i].label);
    if (label == Vocabulary::kUnknown) {
      return InvalidArgument("example " + std::to_string(i) + ": unknown label " +
                             QuoteInput(examples[i].label));
    }
    t.labels.push_back(static_cast<float>(label));
  }
  t.sparse.push_back(std::move(col));
  PS_RETURN_IF_ERROR(t.Validate());
  return t;
}

}  // namespace ps::data
