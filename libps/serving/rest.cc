#include "libps/serving/rest.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include "libps/serving/rest_fast.h"
#include "libps/serving/versions.h"

namespace ps::serving {

namespace {

using Instance = std::vector<std::pair<std::string, const Json*>>;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// What a /v1/models path asks for.
struct Route {
  enum class Kind { kStatus, kMetadata, kPredict, kOtherVerb } kind = Kind::kStatus;
  std::string name;
  std::string version;  // digits, or empty
  std::string label;    // or empty
  std::string verb;     // kOtherVerb: as written
};

bool Digits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool ParseRoute(const std::string& path, Route* r) {
  const std::string prefix = "/v1/models/";
  if (Lower(path.substr(0, prefix.size())) != prefix) return false;
  std::string rest = path.substr(prefix.size());
  const std::string lower = Lower(rest);
  if (const size_t colon = rest.find(':'); colon != std::string::npos) {
    const std::string verb = lower.substr(colon + 1);
    r->kind = verb == "predict" ? Route::Kind::kPredict : Route::Kind::kOtherVerb;
    r->verb = rest.substr(colon + 1);
    rest.resize(colon);
  } else if (EndsWith(lower, "/metadata")) {
    r->kind = Route::Kind::kMetadata;
    rest.resize(rest.size() - 9);
  }
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t slash = rest.find('/', at);
    parts.push_back(rest.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  if (parts[0].empty()) return false;
  r->name = parts[0];
  if (parts.size() == 1) return true;
  if (parts.size() != 3 || parts[2].empty()) return false;
  const std::string what = Lower(parts[1]);
  if (what == "versions" && Digits(parts[2])) {
    r->version = parts[2];
    return true;
  }
  if (what == "labels") {
    r->label = parts[2];
    return true;
  }
  return false;
}

RestResponse Error(int status, const std::string& message) {
  RestResponse r;
  r.status = status;
  r.body = Json{{"error", message}}.dump();
  return r;
}

RestResponse FromStatus(const Status& st) {
  switch (st.code()) {
    case Code::kInvalidArgument:
    case Code::kOutOfRange:
      return Error(400, st.message());
    case Code::kNotFound:
      return Error(404, st.message());
    case Code::kFailedPrecondition:
      return Error(412, st.message());
    case Code::kUnavailable:
      return Error(503, st.message());
    default:
      return Error(500, st.message());
  }
}

Json TensorInfo(const std::string& name, const char* dtype, const std::vector<int64_t>& shape) {
  Json dims = Json::array();
  for (int64_t d : shape) dims.push_back({{"size", std::to_string(d)}, {"name", ""}});
  return {
      {"dtype", dtype}, {"tensor_shape", {{"dim", dims}, {"unknown_rank", false}}}, {"name", name}};
}

// The instances of a predict body (row or columnar), each input by name.
Status ReadInstances(const Json& req, const InputSchema& schema, bool* row,
                     std::vector<Instance>* out) {
  const bool has_rows = req.contains("instances"), has_cols = req.contains("inputs");
  if (has_rows && has_cols) {
    return InvalidArgument("Request body must have either 'instances' or 'inputs', not both");
  }
  if (!has_rows && !has_cols) return InvalidArgument("Missing 'inputs' or 'instances' key");
  *row = has_rows;
  const InputSpec* single = nullptr;
  int required = 0;
  for (const auto& in : schema.inputs()) {
    if (in.required) {
      ++required;
      single = &in;
    }
  }
  if (required != 1) single = nullptr;
  auto check_name = [&](const std::string& name) -> Status {
    if (schema.Find(name) == nullptr) {
      std::string names;
      for (const auto& in : schema.inputs()) names += (names.empty() ? "" : ", ") + in.name;
      return InvalidArgument("unknown input '" + name + "' (the inputs: " + names + ")");
    }
    return Status::Ok();
  };
  auto bare = [&](const char* where) -> Status {
    if (single == nullptr) {
      return InvalidArgument(std::string(where) + ": the model has " +
                             std::to_string(schema.inputs().size()) +
                             " inputs: name them (an object per instance)");
    }
    return Status::Ok();
  };
  if (has_rows) {
    const Json& rows = req["instances"];
    if (!rows.is_array() || rows.empty()) {
      return InvalidArgument("'instances' must be a non-empty list");
    }
    for (const Json& inst : rows) {
      Instance in;
      if (inst.is_object()) {
        for (const auto& [k, v] : inst.items()) {
          PS_RETURN_IF_ERROR(check_name(k));
          in.emplace_back(k, &v);
        }
      } else {
        PS_RETURN_IF_ERROR(bare("instances"));
        in.emplace_back(single->name, &inst);
      }
      out->push_back(std::move(in));
    }
    return Status::Ok();
  }
  const Json& cols = req["inputs"];
  std::vector<std::pair<std::string, const Json*>> named;
  if (cols.is_object()) {
    for (const auto& [k, v] : cols.items()) {
      PS_RETURN_IF_ERROR(check_name(k));
      named.emplace_back(k, &v);
    }
  } else {
    PS_RETURN_IF_ERROR(bare("inputs"));
    named.emplace_back(single->name, &cols);
  }
  if (named.empty()) return InvalidArgument("'inputs' names no input");
  size_t n = 0;
  for (size_t j = 0; j < named.size(); ++j) {
    const Json& v = *named[j].second;
    if (!v.is_array() || v.empty()) {
      return InvalidArgument("input '" + named[j].first +
                             "': expected a list with one entry per instance");
    }
    if (j == 0) n = v.size();
    if (v.size() != n) {
      return InvalidArgument("input '" + named[j].first + "' has " + std::to_string(v.size()) +
                             " instances, input '" + named[0].first + "' has " + std::to_string(n));
    }
  }
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    for (const auto& [k, v] : named) (*out)[i].emplace_back(k, &(*v)[i]);
  }
  return Status::Ok();
}

// One head's value for instance i: a number (one output) or a list.
void AppendHead(std::string* out, const std::vector<float>& p, int64_t k, int64_t i) {
  if (k == 1) {
    AppendFloat(out, p[static_cast<size_t>(i)]);
    return;
  }
  *out += '[';
  for (int64_t j = 0; j < k; ++j) {
    if (j > 0) *out += ',';
    AppendFloat(out, p[static_cast<size_t>(i * k + j)]);
  }
  *out += ']';
}

void AppendTensor(std::string* out, const std::vector<float>& p, int64_t k, int64_t n) {
  *out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) *out += ',';
    AppendHead(out, p, k, i);
  }
  *out += ']';
}

}  // namespace

void AppendFloat(std::string* out, float v) {
  if (std::isnan(v)) {
    *out += "NaN";
  } else if (std::isinf(v)) {
    *out += v > 0 ? "Infinity" : "-Infinity";
  } else {
    // As printf's "%.9g" (to_chars with a precision is specified so), without its cost.
    char buf[32];
    const auto r =
        std::to_chars(buf, buf + sizeof buf, static_cast<double>(v), std::chars_format::general, 9);
    out->append(buf, r.ptr);
  }
}

Result<Json> ParseRequestJson(const std::string& body) {
  std::string text;
  text.reserve(body.size());
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      text += c;
      if (c == '\\' && i + 1 < body.size()) {
        text += body[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* lit : {"NaN", "Infinity", "-Infinity"}) {
      const size_t len = std::char_traits<char>::length(lit);
      if (body.compare(i, len, lit) == 0) {
        text += "\"\\u0001";
        text += lit;
        text += '"';
        i += len - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) text += c;
  }
  auto j = ParseJson(text, "request body");
  if (!j.ok()) return InvalidArgument("JSON Parse error: " + j.status().message());
  return std::move(*j);
}

Result<std::shared_ptr<ServedVersion>> ServedVersion::Make(std::shared_ptr<Bundle> bundle) {
  auto v = std::make_shared<ServedVersion>();
  PS_ASSIGN_OR_RETURN(Json job, ParseJson(bundle->job_json(), "job"));
  PS_ASSIGN_OR_RETURN(v->schema_, InputSchema::Make(job));
  v->version_ = bundle->info().source_base_step;
  PS_ASSIGN_OR_RETURN(auto scorer, bundle->NewScorer());
  v->free_.push_back(std::move(scorer));
  v->bundle_ = std::move(bundle);
  return v;
}

Result<Scores> ServedVersion::Score(const model::Batch& batch) const {
  std::unique_ptr<Scorer> s;
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      s = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (!s) {
    PS_ASSIGN_OR_RETURN(s, bundle_->NewScorer());
  }
  auto scores = s->Score(batch);
  std::lock_guard lock(mu_);
  free_.push_back(std::move(s));
  return scores;
}

std::map<std::string, int64_t> ServedModel::labels() const {
  std::lock_guard lock(mu_);
  return labels_;
}

void ServedModel::SetLabels(std::map<std::string, int64_t> labels) {
  std::lock_guard lock(mu_);
  labels_ = std::move(labels);
}

std::shared_ptr<const ServedVersion> ServedModel::Get() const {
  std::lock_guard lock(mu_);
  return versions_.empty() ? nullptr : versions_.rbegin()->second;
}

std::shared_ptr<const ServedVersion> ServedModel::Find(int64_t version) const {
  std::lock_guard lock(mu_);
  auto it = versions_.find(version);
  return it == versions_.end() ? nullptr : it->second;
}

std::set<int64_t> ServedModel::Loaded() const {
  std::lock_guard lock(mu_);
  std::set<int64_t> out;
  for (const auto& [v, _] : versions_) out.insert(v);
  return out;
}

void ServedModel::Set(std::shared_ptr<const ServedVersion> v) {
  std::lock_guard lock(mu_);
  versions_.clear();
  if (v) versions_[v->version()] = std::move(v);
}

void ServedModel::Put(std::shared_ptr<const ServedVersion> v) {
  std::lock_guard lock(mu_);
  versions_[v->version()] = std::move(v);
}

void ServedModel::Remove(int64_t version) {
  std::lock_guard lock(mu_);
  versions_.erase(version);
}

void ServedModel::SetLoading(int64_t version, bool loading) {
  std::lock_guard lock(mu_);
  if (loading) {
    loading_.insert(version);
  } else {
    loading_.erase(version);
  }
}

std::set<int64_t> ServedModel::Loading() const {
  std::lock_guard lock(mu_);
  return loading_;
}

std::shared_ptr<ServedModel> ServedModels::Find(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<ServedModel>> ServedModels::All() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<ServedModel>> out;
  for (const auto& [_, m] : models_) out.push_back(m);
  return out;
}

void ServedModels::Put(std::shared_ptr<ServedModel> model) {
  std::lock_guard lock(mu_);
  models_[model->name()] = std::move(model);
}

void ServedModels::Remove(const std::string& name) {
  std::lock_guard lock(mu_);
  models_.erase(name);
}

RestApi::RestApi(RestOptions options, std::shared_ptr<ServedModels> models)
    : options_(options), models_(std::move(models)) {}

RestApi::RestApi(RestOptions options, const std::vector<std::shared_ptr<ServedModel>>& models)
    : options_(options), models_(std::make_shared<ServedModels>()) {
  for (const auto& m : models) models_->Put(m);
}

bool RestApi::IsApiPath(const std::string& path) {
  return Lower(path.substr(0, 11)) == "/v1/models/";
}

std::string RestApi::ServedModelOf(const std::string& path) const {
  Route route;
  if (ParseRoute(path, &route) && models_->Find(route.name) != nullptr) return route.name;
  return "";
}

RestResponse RestApi::Handle(const std::string& method, const std::string& path,
                             const std::string& body) const {
  std::string step = "none";
  RestResponse r = [&]() -> RestResponse {
    Route route;
    if (!ParseRoute(path, &route)) return Error(404, "Malformed request: " + method + " " + path);
    const bool post = route.kind == Route::Kind::kPredict || route.kind == Route::Kind::kOtherVerb;
    if (method != (post ? "POST" : "GET") && !(method == "HEAD" && !post)) {
      RestResponse e = Error(405, "Malformed request: " + method + " " + path);
      e.headers.emplace_back("Allow", post ? "POST" : "GET, HEAD");
      return e;
    }
    const auto model = models_->Find(route.name);
    if (model == nullptr) {
      return Error(404, "Servable not found for request: Latest(" + route.name + ")");
    }
    const std::string& name = route.name;
    const std::set<int64_t> loaded = model->Loaded();
    if (loaded.empty()) return Error(503, "model " + name + " is not loaded yet: try again");
    bool unknown_label = false;
    const auto labels = model->labels();
    const auto want = ResolveVersion(route.version, route.label, labels, loaded, &unknown_label);
    if (unknown_label) return Error(404, "Unrecognized servable version label: " + route.label);
    const auto served = want ? model->Find(*want) : nullptr;
    if (served == nullptr) {
      const std::string v =
          route.version.empty() ? std::to_string(labels.at(route.label)) : route.version;
      return Error(404, "Servable not found for request: Specific(" + name + ", " + v + ")");
    }
    const BundleInfo info = served->bundle()->info();
    step = std::to_string(info.source_base_step) + "/" + std::to_string(info.source_step);
    const std::string version = std::to_string(served->version());
    RestResponse ok;
    ok.model = name;
    if (route.kind == Route::Kind::kStatus) {
      auto entry = [](int64_t v, const char* state) {
        return Json{{"version", std::to_string(v)},
                    {"state", state},
                    {"status", {{"error_code", "OK"}, {"error_message", ""}}}};
      };
      Json list = Json::array();
      if (!route.version.empty() || !route.label.empty()) {
        list.push_back(entry(served->version(), "AVAILABLE"));
      } else {
        std::set<int64_t> all = loaded;
        const std::set<int64_t> loading = model->Loading();
        all.insert(loading.begin(), loading.end());
        for (auto it = all.rbegin(); it != all.rend(); ++it) {
          list.push_back(entry(*it, loaded.count(*it) > 0 ? "AVAILABLE" : "LOADING"));
        }
      }
      ok.body = Json{{"model_version_status", list}}.dump();
      return ok;
    }
    if (route.kind == Route::Kind::kMetadata) {
      Json inputs = Json::object(), outputs = Json::object();
      for (const auto& in : served->schema().inputs()) {
        inputs[in.name] = TensorInfo(in.name, DtypeName(in.type), in.shape);
      }
      for (const auto& h : info.heads) {
        outputs[h.name] = TensorInfo(h.name, "DT_FLOAT", {-1, h.outputs});
      }
      Json sig = {
          {"inputs", inputs}, {"outputs", outputs}, {"method_name", "tensorflow/serving/predict"}};
      ok.body =
          Json{{"model_spec", {{"name", name}, {"signature_name", ""}, {"version", version}}},
               {"metadata", {{"signature_def", {{"signature_def", {{"serving_default", sig}}}}}}}}
              .dump();
      return ok;
    }
    if (route.kind == Route::Kind::kOtherVerb) {
      return Error(400, "'" + route.verb + "' is not served: pstrain-serve answers :predict");
    }
    if (body.size() > options_.body_limit) {
      return Error(413, "request body of " + std::to_string(body.size()) + " bytes is over " +
                            std::to_string(options_.body_limit));
    }
    bool row = true;
    model::Batch general;
    const model::Batch* batch = FastPredictBatch(body, served->schema());
    if (batch == nullptr) {  // the general path, with TF Serving's errors
      auto req = ParseRequestJson(body);
      if (!req.ok()) return FromStatus(req.status());
      if (!req->is_object()) return Error(400, "the request body must be a JSON object");
      if (req->contains("signature_name")) {
        const Json& s = (*req)["signature_name"];
        if (!s.is_string() ||
            (s.get<std::string>() != "serving_default" && !s.get<std::string>().empty())) {
          return Error(400, "Serving signature name: \"" +
                                (s.is_string() ? s.get<std::string>() : s.dump()) +
                                "\" not found in signature def");
        }
      }
      std::vector<Instance> instances;
      if (Status st = ReadInstances(*req, served->schema(), &row, &instances); !st.ok()) {
        return FromStatus(st);
      }
      auto b = served->schema().ToBatch(instances);
      if (!b.ok()) return FromStatus(b.status());
      general = std::move(*b);
      batch = &general;
    }
    auto scores = served->Score(*batch);
    if (!scores.ok()) {
      return FromStatus(scores.status().code() == Code::kInvalidArgument
                            ? scores.status()
                            : Internal(scores.status().message()));
    }
    step = std::to_string(scores->base_step) + "/" + std::to_string(scores->step);
    const int64_t n = scores->examples;
    ok.instances = n;
    const size_t heads = scores->heads.size();
    auto k = [&](size_t h) { return h < info.heads.size() ? info.heads[h].outputs : 1; };
    std::string& out = ok.body;
    size_t outputs = 0;
    for (size_t h = 0; h < heads; ++h) outputs += static_cast<size_t>(k(h));
    out.reserve(32 + static_cast<size_t>(n) * (outputs * 16 + heads * 24 + 4));
    if (row) {
      out = "{\"predictions\":[";
      for (int64_t i = 0; i < n; ++i) {
        if (i > 0) out += ',';
        if (heads == 1) {
          AppendHead(&out, scores->heads[0], k(0), i);
          continue;
        }
        out += '{';
        for (size_t h = 0; h < heads; ++h) {
          if (h > 0) out += ',';
          out += Json(info.heads[h].name).dump() + ':';
          AppendHead(&out, scores->heads[h], k(h), i);
        }
        out += '}';
      }
      out += "]}";
    } else if (heads == 1) {
      out = "{\"outputs\":";
      AppendTensor(&out, scores->heads[0], k(0), n);
      out += '}';
    } else {
      out = "{\"outputs\":{";
      for (size_t h = 0; h < heads; ++h) {
        if (h > 0) out += ',';
        out += Json(info.heads[h].name).dump() + ':';
        AppendTensor(&out, scores->heads[h], k(h), n);
      }
      out += "}}";
    }
    return ok;
  }();
  if (r.model.empty()) r.model = ServedModelOf(path);
  r.headers.emplace_back("X-Pstrain-Model-Step", step);
  return r;
}

}  // namespace ps::serving
