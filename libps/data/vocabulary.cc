#include "libps/data/vocabulary.h"
#include "libps/core/text.h"

#include <algorithm>
#include <unordered_map>

namespace ps::data {

Result<Vocabulary> Vocabulary::Create(std::vector<std::string> tokens, int num_oov_indices) {
  if (num_oov_indices != 0 && num_oov_indices != 1) {
    return InvalidArgument("num_oov_indices must be 0 or 1, got " +
                           std::to_string(num_oov_indices));
  }
  Vocabulary v;
  v.num_oov_ = num_oov_indices;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto [it, inserted] = v.index_.emplace(tokens[i], static_cast<int64_t>(i) + num_oov_indices);
    if (!inserted) return InvalidArgument("duplicate vocabulary token " + QuoteInput(tokens[i]));
  }
  v.tokens_ = std::move(tokens);
  return v;
}

int64_t Vocabulary::Lookup(std::string_view token) const {
  auto it = index_.find(token);
  if (it != index_.end()) return it->second;
  return num_oov_ == 1 ? 0 : kUnknown;
}

bool Vocabulary::Contains(std::string_view token) const {
  return index_.find(token) != index_.end();
}

const std::string& Vocabulary::Token(int64_t id) const {
  static const std::string kOov = "[UNK]";
  if (id < num_oov_ || id >= size()) return kOov;
  return tokens_[static_cast<size_t>(id - num_oov_)];
}

std::vector<std::string> AdaptVocabulary(const std::vector<std::string>& tokens) {
  std::unordered_map<std::string, int64_t> counts;
  for (const auto& t : tokens) {
    if (!t.empty()) ++counts[t];
  }
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::vector<std::string> out;
  out.reserve(sorted.size());
  for (auto& [token, count] : sorted) out.push_back(std::move(token));
  return out;
}

}  // namespace ps::data
