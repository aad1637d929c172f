// The one file that includes simdjson (libps/meson.build's only-includer table).
#include "libps/serving/rest_fast.h"

#include <simdjson.h>

#include <vector>

namespace ps::serving {

namespace {

namespace dom = simdjson::dom;

struct ThreadScratch {
  dom::parser parser;
  model::Batch batch;
  std::vector<int64_t> ids;
  std::vector<double> values;
};

// A list of integers (or one integer) into out; false for anything else.
bool Ids(dom::element v, std::vector<int64_t>* out) {
  out->clear();
  if (v.type() == dom::element_type::INT64) {
    out->push_back(int64_t(v));
    return true;
  }
  dom::array list;
  if (v.get_array().get(list) != simdjson::SUCCESS) return false;
  for (dom::element e : list) {
    if (e.type() != dom::element_type::INT64) return false;
    out->push_back(int64_t(e));
  }
  return true;
}

// A number as the general path reads it (nlohmann's number as a double).
bool Number(dom::element e, double* out) {
  switch (e.type()) {
    case dom::element_type::INT64:
      *out = static_cast<double>(int64_t(e));
      return true;
    case dom::element_type::UINT64:
      *out = static_cast<double>(uint64_t(e));
      return true;
    case dom::element_type::DOUBLE:
      *out = double(e);
      return true;
    default:
      return false;
  }
}

// A list of numbers (or one number) into out; false for anything else.
bool Values(dom::element v, std::vector<double>* out) {
  out->clear();
  double d;
  if (Number(v, &d)) {
    out->push_back(d);
    return true;
  }
  dom::array list;
  if (v.get_array().get(list) != simdjson::SUCCESS) return false;
  for (dom::element e : list) {
    if (!Number(e, &d)) return false;
    out->push_back(d);
  }
  return true;
}

}  // namespace

const model::Batch* FastPredictBatch(std::string_view body, const InputSchema& schema) {
  if (!schema.is_libsvm()) return nullptr;
  thread_local ThreadScratch s;
  dom::object top;
  if (s.parser.parse(body.data(), body.size()).get_object().get(top) != simdjson::SUCCESS) {
    return nullptr;
  }
  dom::element instances;
  bool has_instances = false, has_signature = false;
  for (dom::key_value_pair kv : top) {
    if (kv.key == "inputs") return nullptr;
    if (kv.key == "instances") {
      if (has_instances) return nullptr;
      has_instances = true;
      instances = kv.value;
    } else if (kv.key == "signature_name") {
      std::string_view name;
      if (has_signature || kv.value.get_string().get(name) != simdjson::SUCCESS ||
          (name != "serving_default" && !name.empty())) {
        return nullptr;
      }
      has_signature = true;
    }
  }
  dom::array list;
  if (!has_instances || instances.get_array().get(list) != simdjson::SUCCESS || list.size() == 0) {
    return nullptr;
  }
  schema.StartBatch(&s.batch);
  size_t i = 0;
  for (dom::element inst : list) {
    dom::object fields;
    if (inst.get_object().get(fields) == simdjson::SUCCESS) {
      bool has_features = false, has_values = false, values_given = false;
      for (dom::key_value_pair kv : fields) {
        if (kv.key == "features") {
          if (has_features || !Ids(kv.value, &s.ids)) return nullptr;
          has_features = true;
        } else if (kv.key == "values") {
          if (has_values) return nullptr;
          has_values = true;
          if (!kv.value.is_null()) {
            if (!Values(kv.value, &s.values)) return nullptr;
            values_given = true;
          }
        } else {
          return nullptr;
        }
      }
      if (!has_features) return nullptr;
      if (!schema.AppendLibSvm(i, s.ids, values_given ? &s.values : nullptr, &s.batch).ok()) {
        return nullptr;
      }
    } else {
      // A bare instance is the one required input: "features".
      if (!Ids(inst, &s.ids) || !schema.AppendLibSvm(i, s.ids, nullptr, &s.batch).ok())
        return nullptr;
    }
    ++i;
  }
  return &s.batch;
}

}  // namespace ps::serving
