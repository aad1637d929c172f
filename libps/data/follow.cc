#include "libps/data/follow.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

namespace ps::data {
namespace {

Status Positive(const std::string& where, double v, double max) {
  if (!(v > 0) || v > max)
    return InvalidArgument(where + ": must be in (0, " + std::to_string(static_cast<int64_t>(max)) +
                           "], got " + std::to_string(v));
  return Status::Ok();
}

double ModifiedAt(const struct stat& st) {
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
}

}  // namespace

Result<FollowOptions> ParseFollow(const Json& value, const std::string& path) {
  FollowOptions o;
  if (value.is_boolean()) {
    if (!value.get<bool>()) return InvalidArgument(path + ": false is not a mode; leave it out");
    return o;
  }
  JsonReader r(value, path);
  if (!r.status().ok()) return InvalidArgument(path + ": must be true or an object");
  PS_RETURN_IF_ERROR(r.GetOr("poll_seconds", &o.poll_seconds));
  PS_RETURN_IF_ERROR(Positive(r.Path("poll_seconds"), o.poll_seconds, 86400));
  PS_RETURN_IF_ERROR(r.GetOr("done_marker", &o.done_marker));
  if (r.Has("done_marker") &&
      (o.done_marker.empty() || o.done_marker.find('/') != std::string::npos ||
       o.done_marker == "." || o.done_marker == ".."))
    return InvalidArgument(r.Path("done_marker") + ": must be a file name (no '/'), got '" +
                           o.done_marker + "'");
  if (r.Has("quiet_seconds") && !o.done_marker.empty())
    return InvalidArgument(r.Path("quiet_seconds") +
                           ": not with done_marker (a file is complete when its directory "
                           "holds the marker)");
  PS_RETURN_IF_ERROR(r.GetOr("quiet_seconds", &o.quiet_seconds));
  if (o.done_marker.empty())
    PS_RETURN_IF_ERROR(Positive(r.Path("quiet_seconds"), o.quiet_seconds, 86400));
  PS_RETURN_IF_ERROR(r.GetOr("max_age_seconds", &o.max_age_seconds));
  PS_RETURN_IF_ERROR(Positive(r.Path("max_age_seconds"), o.max_age_seconds, 31622400));
  PS_RETURN_IF_ERROR(r.Finish());
  return o;
}

FileFollower::FileFollower(std::vector<std::string> patterns, FollowOptions options)
    : patterns_(std::move(patterns)), options_(std::move(options)) {}

Result<std::vector<Arrival>> FileFollower::Scan(double now) {
  std::vector<std::string> files;
  for (const std::string& pattern : patterns_) {
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
    if (rc == 0) {
      for (size_t k = 0; k < g.gl_pathc; ++k) files.emplace_back(g.gl_pathv[k]);
    }
    ::globfree(&g);
    if (rc == GLOB_ABORTED)
      return InvalidArgument("'" + pattern + "': cannot read a directory on the way");
    if (rc == GLOB_NOSPACE) return Internal("glob: out of memory");
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  const bool by_marker = !options_.done_marker.empty();
  // Regular files only, the markers left out; by unit (directory or file).
  std::map<std::string, std::vector<std::string>> units;
  std::map<std::string, double> modified;  // quiet mode: file → mtime
  matched_ = 0;
  for (const std::string& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // gone meanwhile
    const std::filesystem::path p(f);
    if (by_marker && p.filename() == options_.done_marker) continue;
    ++matched_;
    if (by_marker) {
      units[p.parent_path().string()].push_back(f);
    } else {
      units[f].push_back(f);
      modified[f] = ModifiedAt(st);
    }
  }
  std::vector<Arrival> out;
  for (auto& [unit, unit_files] : units) {
    if (taken_.count(unit) > 0) continue;
    double arrival = 0;
    if (by_marker) {
      struct stat st {};
      const std::string marker = (std::filesystem::path(unit) / options_.done_marker).string();
      if (::stat(marker.c_str(), &st) != 0) continue;  // not complete yet
      arrival = ModifiedAt(st);
    } else {
      arrival = modified[unit];
      if (now - arrival < options_.quiet_seconds) continue;  // may still be written
    }
    if (arrival < watermark()) continue;  // taken before (or arrived too late)
    out.push_back(Arrival{unit, arrival, std::move(unit_files)});
  }
  std::sort(out.begin(), out.end(), [](const Arrival& a, const Arrival& b) {
    return a.arrival != b.arrival ? a.arrival < b.arrival : a.unit < b.unit;
  });
  for (const Arrival& a : out) Take(a);
  return out;
}

void FileFollower::Take(const Arrival& a) {
  taken_[a.unit] = a.arrival;
  newest_ = std::max(newest_, a.arrival);
  for (auto it = taken_.begin(); it != taken_.end();) {
    if (it->second < watermark())
      it = taken_.erase(it);
    else
      ++it;
  }
}

Json FileFollower::Save() const {
  Json taken = Json::array();
  for (const auto& [unit, arrival] : taken_) taken.push_back(Json::array({unit, arrival}));
  return Json{{"newest", taken_.empty() ? Json(nullptr) : Json(newest_)}, {"taken", taken}};
}

Status FileFollower::Restore(const Json& saved) {
  try {
    std::map<std::string, double> taken;
    for (const Json& t : saved.at("taken"))
      taken[t.at(0).get<std::string>()] = t.at(1).get<double>();
    const Json& newest = saved.at("newest");
    newest_ = newest.is_null() ? -1e300 : newest.get<double>();
    taken_ = std::move(taken);
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("the follow record does not parse: ") + e.what());
  }
  return Status::Ok();
}

void FileFollower::Reset() {
  taken_.clear();
  newest_ = -1e300;
}

}  // namespace ps::data
