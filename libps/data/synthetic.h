// Synthetic data: the string-feature example of TensorFlow's parameter-server training
// tutorial (tutorials/distribute/parameter_server_training, feature_and_label_gen).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "libps/core/status.h"
#include "libps/data/examples.h"

namespace ps::data {

// The tutorial's vocabularies. Feature ids follow StringLookup(vocabulary=...): 0 = OOV,
// "avenger" = 1 ... "wonder_woman" = 7 (8 ids). Label ids follow
// StringLookup(num_oov_indices=0): "yes" = 0, "no" = 1.
inline const std::vector<std::string>& StringFeatureVocabulary() {
  static const std::vector<std::string> v = {"avenger",   "ironman",  "batman",      "hulk",
                                             "spiderman", "kingkong", "wonder_woman"};
  return v;
}
inline const std::vector<std::string>& StringLabelVocabulary() {
  static const std::vector<std::string> v = {"yes", "no"};
  return v;
}
// Strings outside the feature vocabulary that the generator mixes in when oov_rate > 0.
inline const std::vector<std::string>& StringFeatureOovWords() {
  static const std::vector<std::string> v = {"superman", "thor", "flash", "godzilla"};
  return v;
}

constexpr int kStringFeaturesPerExample = 3;

struct StringExample {
  std::array<std::string, kStringFeaturesPerExample> features;
  std::string label;  // "yes" or "no"
};

// Like the tutorial's feature_and_label_gen: each example draws 3 distinct words of the
// feature vocabulary (random.sample(feature_vocab, 3)); then, with probability oov_rate,
// each position is independently replaced by a word of StringFeatureOovWords(). The
// label is "yes" iff "avenger" is among the final 3 strings, else "no" — a deterministic
// function of the features. Same (examples, seed, oov_rate) → same examples.
std::vector<StringExample> GenerateStringExamples(int64_t examples, uint64_t seed,
                                                  double oov_rate = 0.0);

// The examples run through the vocabularies: one sparse field "features" with exactly 3
// ids per example (values empty = all 1.0; vocab size 8), no dense features, labels 0/1
// with "yes" = 0, "no" = 1 (classes = 2, label_names = {"yes", "no"}).
Result<ExampleTable> StringExamplesToTable(const std::vector<StringExample>& examples);

}  // namespace ps::data
