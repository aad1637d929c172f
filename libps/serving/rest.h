// pstrain-serve's REST API, TensorFlow Serving's (its api_rest.md), without the transport:
// RestApi::Handle takes a request's method, path and body and returns the status, the JSON
// body and the headers to send. The daemon (daemons/serve) puts it behind libps/http.
//
//   GET  /v1/models/NAME[/versions/V | /labels/L]            model status
//   GET  /v1/models/NAME[/versions/V | /labels/L]/metadata   signature "serving_default"
//   POST /v1/models/NAME[/versions/V | /labels/L]:predict    {"instances": ...} or
//                                                            {"inputs": ...}
// Paths match case-insensitively, as TF Serving's. A model's one version is the step of
// its full checkpoint (the chain's base: delta refreshes keep the version). Inputs per
// data format: rest_inputs.h; outputs: the model's heads by name. Errors are
// {"error": "..."}: 400 invalid argument, 404 no such path, model, version or label,
// 405 a known path with another method, 413 a body over the limit, 503 the model is not
// loaded yet (TF Serving answers 404 "Servable not found" then; 503 tells a client to
// retry). Every response has the header X-Pstrain-Model-Step: "<base step>/<step>" of
// the state that answered, or "none" when no model did.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "libps/core/status.h"
#include "libps/serving/rest_inputs.h"
#include "libps/serving/serving.h"

namespace ps::serving {

// One loaded state of a model: its bundle, its inputs, and scorers kept for reuse.
class ServedVersion {
 public:
  static Result<std::shared_ptr<ServedVersion>> Make(std::shared_ptr<Bundle> bundle);
  const std::shared_ptr<Bundle>& bundle() const { return bundle_; }
  const InputSchema& schema() const { return *schema_; }
  int64_t version() const { return version_; }  // the base (full checkpoint) step
  // Scores on a scorer of the pool (one made when none is free).
  Result<Scores> Score(const model::Batch& batch) const;

 private:
  std::shared_ptr<Bundle> bundle_;
  std::shared_ptr<const InputSchema> schema_;
  int64_t version_ = 0;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Scorer>> free_;
};

// A served name; what it serves is swapped whole (Set) while requests go on: each
// request scores with the state it found.
class ServedModel {
 public:
  explicit ServedModel(std::string name, std::map<std::string, int64_t> labels = {})
      : name_(std::move(name)), labels_(std::move(labels)) {}
  const std::string& name() const { return name_; }
  const std::map<std::string, int64_t>& labels() const { return labels_; }
  std::shared_ptr<const ServedVersion> Get() const;
  void Set(std::shared_ptr<const ServedVersion> v);

 private:
  std::string name_;
  std::map<std::string, int64_t> labels_;
  mutable std::mutex mu_;
  std::shared_ptr<const ServedVersion> current_;
};

struct RestResponse {
  int status = 200;
  std::string body;  // JSON
  std::vector<std::pair<std::string, std::string>> headers;
  // For the metrics: the model named by the path ("" when none matched) and the
  // instances of a predict request.
  std::string model;
  int64_t instances = 0;
};

struct RestOptions {
  uint64_t body_limit = uint64_t{4} << 20;  // bytes; over: 413
};

class RestApi {
 public:
  RestApi(RestOptions options, std::vector<std::shared_ptr<ServedModel>> models);
  // Thread-safe.
  RestResponse Handle(const std::string& method, const std::string& path,
                      const std::string& body) const;
  // Whether `path` is one of the API's (a /v1/models path).
  static bool IsApiPath(const std::string& path);
  // The served model a path names, or "" (for the metrics' model label).
  std::string ServedModelOf(const std::string& path) const;

 private:
  RestOptions options_;
  std::map<std::string, std::shared_ptr<ServedModel>> models_;
};

// A float as the API prints it: 9 significant digits; NaN, Infinity, -Infinity.
void AppendFloat(std::string* out, float v);
// JSON text with the literals NaN, Infinity and -Infinity (outside strings) read as
// numbers: they become strings "\x01NaN", ... that rest_inputs.cc reads as those values.
Result<Json> ParseRequestJson(const std::string& body);

}  // namespace ps::serving
