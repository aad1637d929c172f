#include "daemons/serve/models.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/core/files.h"
#include "libps/core/json.h"
#include "libps/core/log.h"
#include "libps/serving/bundle.h"
#include "libps/serving/versions.h"

namespace ps::serve {

namespace fs = std::filesystem;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string MiB(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

bool IsBundle(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::path(path) / serving::kBundleManifest, ec);
}

}  // namespace

struct Models::Slot {
  serving::ModelSpec spec;
  bool model_dir = false;  // else a bundle
  std::shared_ptr<serving::ServedModel> served;
  std::set<int64_t> skipped;  // versions that failed to load: not tried again until Apply
  prom::Counter* load_failures = nullptr;
  prom::Counter* refreshes = nullptr;
  std::atomic<double> written{0};  // when the newest version's state was written (unix s)
  Status last_error;               // the last load that failed
  std::string last_problem;        // logged once while it repeats
  std::string last_warnings;
};

Result<uint64_t> MemAvailable() {
  if (const char* v = std::getenv("PSTRAIN_SERVE_MEM_AVAILABLE")) {
    return static_cast<uint64_t>(std::strtoull(v, nullptr, 10));
  }
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return NotFound("/proc/meminfo: no MemAvailable");
}

Result<uint64_t> ModelBytes(const std::string& path, bool model_dir, int64_t version) {
  uint64_t bytes = 0;
  if (!model_dir) {
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file(ec)) bytes += e.file_size(ec);
    }
    if (ec) return IoError(path + ": " + ec.message());
    return bytes;
  }
  PS_ASSIGN_OR_RETURN(auto manifest, ckpt::ReadManifest(ckpt::CheckpointPath(path, version)));
  for (const auto& s : manifest.shards) bytes += s.bytes;
  return bytes;
}

Models::Models(Options options, std::shared_ptr<prom::Registry> registry)
    : options_(options), registry_(std::move(registry)) {
  gauges_ = registry_->AddCollector([this](prom::Writer& w) {
    const double now = Now();
    std::lock_guard lock(mu_);
    for (const auto& s : slots_) {
      const prom::Labels l{{"model", s->spec.name}};
      const auto newest = s->served->Get();
      w.Gauge("pstrain_serving_model_versions", "Versions of the model loaded",
              static_cast<double>(s->served->Loaded().size()), l);
      if (!newest) continue;
      const serving::BundleInfo info = newest->bundle()->info();
      w.Gauge("pstrain_serving_model_version",
              "The newest loaded version: the step of its full checkpoint",
              static_cast<double>(info.source_base_step), l);
      w.Gauge("pstrain_serving_model_step",
              "The newest version's step (a delta's once deltas are applied)",
              static_cast<double>(info.source_step), l);
      const double written = s->written.load();
      if (written <= 0) continue;
      w.Gauge("pstrain_serving_model_age_seconds",
              "Seconds since the newest version's state was written (its checkpoint's or "
              "delta's commit; a bundle's export)",
              now - written, l);
    }
  });
}

Models::~Models() { gauges_.Reset(); }

Status Models::Check(const std::vector<serving::ModelSpec>& specs) {
  for (const auto& s : specs) {
    std::error_code ec;
    if (!fs::exists(fs::path(s.base_path) / serving::kBundleManifest, ec) &&
        !fs::exists(fs::path(s.base_path) / "job.json", ec)) {
      return NotFound("model " + s.name + ": " + s.base_path +
                      ": neither a bundle (no bundle.json) nor a model dir (no job.json)");
    }
  }
  return Status::Ok();
}

void Models::Problem(Slot& slot, const Status& st) {
  if (st.message() == slot.last_problem) return;
  slot.load_failures->Add();
  PS_LOG(Warning) << "model " << slot.spec.name << ": " << st.message();
  slot.last_problem = st.message();
}

Status Models::LoadVersion(Slot& slot, int64_t version) {
  const std::string& path = slot.spec.base_path;
  const std::string what = slot.model_dir ? "version " + std::to_string(version) + " (" +
                                                ckpt::CheckpointPath(path, version) + ")"
                                          : path;
  auto fail = [&](const Status& st) {
    return Status(st.code(), "model " + slot.spec.name + ": " + what + ": " + st.message());
  };
  auto bytes = ModelBytes(path, slot.model_dir, version);
  if (!bytes.ok()) return fail(bytes.status());
  if (auto avail = MemAvailable(); avail.ok() && *bytes > *avail) {
    return fail(FailedPrecondition("takes " + MiB(*bytes) + ", more than the " + MiB(*avail) +
                                   " this host has available (MemAvailable)"));
  }
  if (slot.model_dir) slot.served->SetLoading(version, true);
  std::vector<std::string> warnings;
  const auto before = slot.served->Get();
  Result<std::shared_ptr<serving::Bundle>> bundle = NotFound("not loaded");
  bool built_from_newest = false;
  if (slot.model_dir && before && version > before->version()) {
    // Built from the newest loaded version, sharing the rows that did not change, when
    // the newest full checkpoint that verifies is this version.
    serving::RefreshStats stats;
    auto newer = before->bundle()->LoadNewer(path, &stats);
    warnings = stats.warnings;
    if (newer.ok() && (*newer)->info().source_base_step == version) {
      bundle = std::move(newer);
      built_from_newest = true;
    }
  }
  if (!built_from_newest) {  // loaded whole (also when LoadNewer failed or found another)
    bundle = slot.model_dir ? serving::Bundle::LoadModelDir(path, version, &warnings)
                            : serving::Bundle::Load(path);
  }
  if (slot.model_dir) slot.served->SetLoading(version, false);
  for (const auto& w : warnings) PS_LOG(Warning) << "model " << slot.spec.name << ": " << w;
  if (!bundle.ok()) return fail(bundle.status());
  auto v = serving::ServedVersion::Make(*bundle);
  if (!v.ok()) return fail(v.status());
  const auto info = (*bundle)->info();
  const bool newest = !before || (*v)->version() > before->version();
  slot.served->Put(*v);
  if (newest && before) slot.refreshes->Add();
  PS_LOG(Info) << "model " << slot.spec.name << ": serving step " << info.source_base_step << "/"
               << info.source_step << " of " << path << " (version " << (*v)->version() << ", "
               << MiB(*bytes) << ")";
  return Status::Ok();
}

void Models::Refresh(Slot& slot) {
  const auto v = slot.served->Get();
  if (!v) return;
  auto r = v->bundle()->Refresh(slot.spec.base_path);
  if (!r.ok() && r.status().code() == Code::kFailedPrecondition) {
    // A full checkpoint committed since the listing: the next poll loads it as a version.
    auto all = ckpt::ListCheckpoints(slot.spec.base_path);
    if (all.ok() && std::any_of(all->begin(), all->end(), [&](const ckpt::CheckpointInfo& c) {
          return !c.manifest.base && c.global_step > v->version();
        })) {
      return;
    }
  }
  if (!r.ok()) {
    Problem(slot, Status(r.status().code(), "version " + std::to_string(v->version()) +
                                                ": deltas not applied: " + r.status().message() +
                                                " (serving on as it was)"));
    return;
  }
  std::string warnings;
  for (const auto& w : r->warnings) warnings += w + "\n";
  if (warnings != slot.last_warnings) {
    for (const auto& w : r->warnings) PS_LOG(Warning) << "model " << slot.spec.name << ": " << w;
    slot.last_warnings = warnings;
  }
  slot.last_problem.clear();
  if (r->applied.empty()) return;
  slot.refreshes->Add();
  PS_LOG(Info) << "model " << slot.spec.name << ": serving step " << r->base_step << "/"
               << r->to_step << " (" << r->applied.size() << " deltas applied; " << r->copied_bytes
               << " bytes copied, the rest shared; built in " << r->build_seconds
               << " s, no request paused)";
}

void Models::Sync(Slot& slot) {
  if (!slot.model_dir) {
    if (slot.served->Get() || slot.skipped.count(0) > 0) return;
    if (Status st = LoadVersion(slot, 0); !st.ok()) {
      slot.skipped.insert(0);
      slot.last_error = st;
      Problem(slot, st);
    }
  } else {
    auto all = ckpt::ListCheckpoints(slot.spec.base_path);
    if (!all.ok()) {
      slot.last_error =
          Status(all.status().code(), "model " + slot.spec.name + ": " + all.status().message());
      Problem(slot,
              Status(all.status().code(), all.status().message() + " (serving on as it was)"));
      return;
    }
    std::vector<int64_t> available;
    for (const auto& c : *all) {
      if (!c.manifest.base) available.push_back(c.global_step);
    }
    if (available.empty() && !slot.served->Get()) {
      slot.last_error = NotFound("model " + slot.spec.name + ": " + slot.spec.base_path +
                                 ": no committed checkpoint");
    }
    serving::VersionPlan plan;
    // Each failed load may make an older version wanted: plan again until nothing is left.
    for (size_t round = 0; round <= available.size(); ++round) {
      plan = serving::PlanVersions(slot.spec.policy, available, slot.skipped, slot.served->Loaded(),
                                   options_.keep_versions);
      bool failed = false;
      for (int64_t v : plan.load) {
        if (Status st = LoadVersion(slot, v); !st.ok()) {
          slot.skipped.insert(v);
          slot.last_error = st;
          failed = true;
          slot.load_failures->Add();
          PS_LOG(Warning) << st.message() << ": skipped (not tried again until the config is "
                          << "reloaded); "
                          << (slot.served->Get() ? "the versions loaded serve on"
                                                 : "nothing to serve yet");
        }
      }
      if (!failed) break;
    }
    plan = serving::PlanVersions(slot.spec.policy, available, slot.skipped, slot.served->Loaded(),
                                 options_.keep_versions);
    for (int64_t v : plan.unload) {
      slot.served->Remove(v);
      PS_LOG(Info) << "model " << slot.spec.name << ": version " << v
                   << " unloaded (requests under way finish on it)";
    }
    // Deltas are written against the newest full checkpoint only: while a newer one is
    // skipped (damaged), the newest loaded version has no deltas to follow.
    const auto newest = slot.served->Get();
    if (newest && std::all_of(available.begin(), available.end(),
                              [&](int64_t v) { return v <= newest->version(); })) {
      Refresh(slot);
    }
  }
  const auto v = slot.served->Get();
  if (!v) return;
  const serving::BundleInfo info = v->bundle()->info();
  double written = 0;
  if (slot.model_dir) {
    const std::string dir =
        info.source_step == info.source_base_step
            ? ckpt::CheckpointPath(slot.spec.base_path, info.source_step)
            : ckpt::DeltaPath(slot.spec.base_path, info.source_base_step, info.source_step);
    if (auto m = ckpt::ReadManifest(dir); m.ok()) written = m->unix_time;
  } else if (auto j =
                 ReadJsonFile((fs::path(slot.spec.base_path) / serving::kBundleManifest).string());
             j.ok()) {
    written = j->value("unix_time", 0.0);
  }
  slot.written.store(written);
}

Status Models::Apply(const std::vector<serving::ModelSpec>& specs, bool startup) {
  std::vector<std::unique_ptr<Slot>> next;
  std::vector<std::unique_ptr<Slot>> old;
  {
    std::lock_guard lock(mu_);
    old = std::move(slots_);
    slots_.clear();
  }
  for (const auto& spec : specs) {
    std::unique_ptr<Slot> slot;
    for (auto& o : old) {
      if (o && o->spec.name == spec.name && o->spec.base_path == spec.base_path) {
        slot = std::move(o);
        break;
      }
    }
    if (slot) {
      if (!(slot->spec.policy == spec.policy)) {
        PS_LOG(Info) << "model " << spec.name << ": version policy changed";
      }
      slot->spec.policy = spec.policy;
      slot->skipped.clear();
      slot->last_problem.clear();
    } else {
      slot = std::make_unique<Slot>();
      slot->spec = spec;
      slot->spec.labels.clear();  // applied below, once its versions are loaded
      slot->model_dir = !IsBundle(spec.base_path);
      slot->served = std::make_shared<serving::ServedModel>(spec.name);
      const prom::Labels l{{"model", spec.name}};
      slot->load_failures = &registry_->Counter(
          "pstrain_serving_load_failures_total",
          "Loads of a version and refreshes of the model that failed (counted once while "
          "the same problem repeats; the model serves on as it was)",
          l);
      slot->refreshes = &registry_->Counter(
          "pstrain_serving_refreshes_total",
          "New states served: deltas applied, or a newer full checkpoint loaded", l);
      served_->Put(slot->served);
      if (!startup) {
        PS_LOG(Info) << "model " << spec.name << ": added (" << spec.base_path << ")";
      }
    }
    next.push_back(std::move(slot));
  }
  for (auto& o : old) {
    if (!o) continue;
    bool renamed = false;
    for (const auto& n : next) renamed = renamed || n->spec.name == o->spec.name;
    if (!renamed) served_->Remove(o->spec.name);
    PS_LOG(Info) << "model " << o->spec.name << ": " << (renamed ? "base_path changed: " : "")
                 << "removed " << o->spec.base_path << " (requests under way finish on it)";
  }
  old.clear();
  {
    std::lock_guard lock(mu_);
    slots_ = std::move(next);
  }
  Status first = Status::Ok();
  for (size_t i = 0; i < specs.size(); ++i) {
    Slot& s = *slots_[i];
    Sync(s);
    if (startup && !s.served->Get())
      return s.last_error.ok() ? NotFound("model " + s.spec.name + ": nothing to serve")
                               : s.last_error;
    const auto& labels = specs[i].labels;
    if (labels == s.spec.labels) continue;
    Status st = serving::CheckLabels(s.spec.name, labels, s.served->labels(), s.served->Loaded(),
                                     options_.allow_labels_for_unavailable);
    if (!st.ok()) {
      PS_LOG(Warning) << st.message() << ": the labels of model " << s.spec.name
                      << " stay as they were";
      if (first.ok()) first = st;
      continue;
    }
    s.spec.labels = labels;
    s.served->SetLabels(labels);
    std::string said;
    for (const auto& [l, v] : labels)
      said += (said.empty() ? "" : ", ") + l + "=" + std::to_string(v);
    PS_LOG(Info) << "model " << s.spec.name << ": labels " << (said.empty() ? "none" : said);
  }
  return first;
}

void Models::Poll() {
  for (auto& s : slots_) {
    if (s->model_dir) Sync(*s);
  }
}

}  // namespace ps::serve
