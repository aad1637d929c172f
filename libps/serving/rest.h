// pstrain-serve's REST API, TensorFlow Serving's (its api_rest.md), without the transport:
// RestApi::Handle takes a request's method, path and body and returns the status, the JSON
// body and the headers to send. The daemon (daemons/serve) puts it behind libps/http.
//
//   GET  /v1/models/NAME[/versions/V | /labels/L]            model status
//   GET  /v1/models/NAME[/versions/V | /labels/L]/metadata   signature "serving_default"
//   POST /v1/models/NAME[/versions/V | /labels/L]:predict    {"instances": ...} or
//                                                            {"inputs": ...}
// Paths match case-insensitively, as TF Serving's. A version is the step of a full
// checkpoint (the chain's base: delta refreshes keep the version); without /versions or
// /labels a request goes to the newest loaded version, and the status lists every loaded
// version (AVAILABLE, newest first) and those being loaded (LOADING). Inputs per
// data format: rest_inputs.h; outputs: the model's heads by name. Errors are
// {"error": "..."}: 400 invalid argument, 404 no such path, model, version or label
// (a label naming a version that is not loaded: "Servable not found ..."),
// 405 a known path with another method, 413 a body over the limit, 503 the model is not
// loaded yet (TF Serving answers 404 "Servable not found" then; 503 tells a client to
// retry). Every response has the header X-Pstrain-Model-Step: "<base step>/<step>" of
// the state that answered, or "none" when no model did.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
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

// A served name and its loaded versions (each a ServedVersion, keyed by its version);
// versions are added and removed while requests go on: each request scores with the
// version it found, which stays alive until the request is answered. Thread-safe.
class ServedModel {
 public:
  explicit ServedModel(std::string name, std::map<std::string, int64_t> labels = {})
      : name_(std::move(name)), labels_(std::move(labels)) {}
  const std::string& name() const { return name_; }
  std::map<std::string, int64_t> labels() const;
  void SetLabels(std::map<std::string, int64_t> labels);
  // The newest loaded version, or null.
  std::shared_ptr<const ServedVersion> Get() const;
  // That version, or null when it is not loaded.
  std::shared_ptr<const ServedVersion> Find(int64_t version) const;
  std::set<int64_t> Loaded() const;
  // Serves v alone (every other version dropped).
  void Set(std::shared_ptr<const ServedVersion> v);
  // Adds v, or replaces the state of its version (a refresh).
  void Put(std::shared_ptr<const ServedVersion> v);
  void Remove(int64_t version);
  // Versions being loaded, listed by the status as LOADING.
  void SetLoading(int64_t version, bool loading);
  std::set<int64_t> Loading() const;

 private:
  std::string name_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> labels_;
  std::map<int64_t, std::shared_ptr<const ServedVersion>> versions_;
  std::set<int64_t> loading_;
};

// The served names; models are added and removed while requests go on. Thread-safe.
class ServedModels {
 public:
  std::shared_ptr<ServedModel> Find(const std::string& name) const;
  std::vector<std::shared_ptr<ServedModel>> All() const;
  void Put(std::shared_ptr<ServedModel> model);
  void Remove(const std::string& name);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<ServedModel>> models_;
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
  RestApi(RestOptions options, std::shared_ptr<ServedModels> models);
  RestApi(RestOptions options, const std::vector<std::shared_ptr<ServedModel>>& models);
  // Thread-safe.
  RestResponse Handle(const std::string& method, const std::string& path,
                      const std::string& body) const;
  // Whether `path` is one of the API's (a /v1/models path).
  static bool IsApiPath(const std::string& path);
  // The served model a path names, or "" (for the metrics' model label).
  std::string ServedModelOf(const std::string& path) const;

 private:
  RestOptions options_;
  std::shared_ptr<ServedModels> models_;
};

// A float as the API prints it: 9 significant digits; NaN, Infinity, -Infinity.
void AppendFloat(std::string* out, float v);
// JSON text with the literals NaN, Infinity and -Infinity (outside strings) read as
// numbers: they become strings "\x01NaN", ... that rest_inputs.cc reads as those values.
Result<Json> ParseRequestJson(const std::string& body);

}  // namespace ps::serving
