#include "libps/model/row_policy.h"

namespace ps::model {

namespace {
constexpr int64_t kMaxSteps = int64_t{1} << 31;
constexpr int64_t kMaxPolicyRows = int64_t{1} << 40;

Status Range(const std::string& path, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return InvalidArgument(path + ": must be in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " + std::to_string(v));
  }
  return Status::Ok();
}
}  // namespace

Status ValidateRowPolicy(const RowPolicy& p, const std::string& path) {
  PS_RETURN_IF_ERROR(Range(path + ".admit.min_count", p.admit_min_count, 1, kMaxAdmitCount));
  if (p.ttl_steps != 0)
    PS_RETURN_IF_ERROR(Range(path + ".evict.ttl_steps", p.ttl_steps, 1, kMaxSteps));
  if (p.max_rows != 0)
    PS_RETURN_IF_ERROR(Range(path + ".evict.max_rows", p.max_rows, 1, kMaxPolicyRows));
  return Status::Ok();
}

Status ReadRowPolicy(JsonReader& r, bool lazy, RowPolicy* out, bool* given) {
  RowPolicy p = *out;
  bool any = false;
  for (const char* key : {"admit", "evict"}) {
    if (!r.Has(key)) continue;
    any = true;
    if (!lazy) {
      return InvalidArgument(r.Path(key) +
                             ": applies to lazy tables only (set \"lazy\": true on this table)");
    }
  }
  if (r.Has("admit")) {
    JsonReader a = r.Child("admit");
    PS_RETURN_IF_ERROR(a.status());
    PS_RETURN_IF_ERROR(a.Get("min_count", &p.admit_min_count));
    PS_RETURN_IF_ERROR(Range(a.Path("min_count"), p.admit_min_count, 1, kMaxAdmitCount));
    PS_RETURN_IF_ERROR(a.Finish());
  }
  if (r.Has("evict")) {
    JsonReader e = r.Child("evict");
    PS_RETURN_IF_ERROR(e.status());
    if (!e.Has("ttl_steps") && !e.Has("max_rows")) {
      return InvalidArgument(r.Path("evict") + ": give ttl_steps, max_rows or both");
    }
    if (e.Has("ttl_steps")) {
      PS_RETURN_IF_ERROR(e.Get("ttl_steps", &p.ttl_steps));
      PS_RETURN_IF_ERROR(Range(e.Path("ttl_steps"), p.ttl_steps, 1, kMaxSteps));
    }
    if (e.Has("max_rows")) {
      PS_RETURN_IF_ERROR(e.Get("max_rows", &p.max_rows));
      PS_RETURN_IF_ERROR(Range(e.Path("max_rows"), p.max_rows, 1, kMaxPolicyRows));
    }
    PS_RETURN_IF_ERROR(e.Finish());
  }
  *out = p;
  if (given != nullptr) *given = any;
  return Status::Ok();
}

Json RowPolicyToJson(const RowPolicy& p) {
  Json j = Json::object();
  if (p.admits()) j["admit"] = {{"min_count", p.admit_min_count}};
  if (p.evicts()) {
    Json e = Json::object();
    if (p.ttl_steps > 0) e["ttl_steps"] = p.ttl_steps;
    if (p.max_rows > 0) e["max_rows"] = p.max_rows;
    j["evict"] = std::move(e);
  }
  return j;
}

}  // namespace ps::model
