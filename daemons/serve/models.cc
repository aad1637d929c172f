#include "daemons/serve/models.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/core/files.h"
#include "libps/core/json.h"
#include "libps/core/log.h"
#include "libps/serving/bundle.h"

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

// The newest committed full checkpoint of a model dir, or nullopt.
Result<std::optional<ckpt::CheckpointInfo>> NewestFull(const std::string& model_dir) {
  PS_ASSIGN_OR_RETURN(auto all, ckpt::ListCheckpoints(model_dir));
  std::optional<ckpt::CheckpointInfo> newest;
  for (auto& c : all) {
    if (!c.manifest.base) newest = std::move(c);
  }
  return newest;
}

}  // namespace

struct Models::Slot {
  Entry entry;
  std::shared_ptr<serving::ServedModel> served;
  prom::Gauge* version = nullptr;
  prom::Gauge* step = nullptr;
  prom::Counter* load_failures = nullptr;
  prom::Counter* refreshes = nullptr;
  std::atomic<double> written{0};  // when the served state was written (unix seconds)
  std::string last_problem;        // logged once while it repeats
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

Result<uint64_t> ModelBytes(const std::string& path, bool model_dir) {
  uint64_t bytes = 0;
  if (!model_dir) {
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file(ec)) bytes += e.file_size(ec);
    }
    if (ec) return IoError(path + ": " + ec.message());
    return bytes;
  }
  PS_ASSIGN_OR_RETURN(auto newest, NewestFull(path));
  if (!newest) return NotFound(path + ": no committed checkpoint");
  for (const auto& s : newest->manifest.shards) bytes += s.bytes;
  return bytes;
}

Models::Models(std::vector<Entry> entries, std::shared_ptr<prom::Registry> registry)
    : registry_(std::move(registry)) {
  for (auto& e : entries) {
    auto slot = std::make_unique<Slot>();
    const prom::Labels l{{"model", e.name}};
    slot->served = std::make_shared<serving::ServedModel>(e.name);
    slot->version = &registry_->Gauge("pstrain_serving_model_version",
                                      "The served version: the step of its full checkpoint", l);
    slot->step = &registry_->Gauge("pstrain_serving_model_step",
                                   "The served step (a delta's once deltas are applied)", l);
    slot->load_failures = &registry_->Counter(
        "pstrain_serving_load_failures_total",
        "Loads and refreshes of the model that failed (it serves on as it was)", l);
    slot->refreshes = &registry_->Counter(
        "pstrain_serving_refreshes_total",
        "New states served: deltas applied, or a newer full checkpoint swapped in", l);
    slot->entry = std::move(e);
    served_.push_back(slot->served);
    slots_.push_back(std::move(slot));
  }
  ages_ = registry_->AddCollector([this](prom::Writer& w) {
    const double now = Now();
    for (const auto& s : slots_) {
      const double written = s->written.load();
      if (written <= 0) continue;
      w.Gauge("pstrain_serving_model_age_seconds",
              "Seconds since the served state was written (its checkpoint's or delta's "
              "commit; a bundle's export)",
              now - written, {{"model", s->entry.name}});
    }
  });
}

Models::~Models() { ages_.Reset(); }

Status Models::Check() const {
  for (const auto& s : slots_) {
    const std::string marker = s->entry.model_dir ? "job.json" : serving::kBundleManifest;
    std::error_code ec;
    if (!fs::exists(fs::path(s->entry.path) / marker, ec)) {
      return NotFound("--model " + s->entry.name + "=" + s->entry.path +
                      ": neither a bundle (no bundle.json) nor a model dir (no job.json)");
    }
  }
  return Status::Ok();
}

void Models::Publish(Slot& slot) {
  const auto v = slot.served->Get();
  const serving::BundleInfo info = v->bundle()->info();
  slot.version->Set(static_cast<double>(info.source_base_step));
  slot.step->Set(static_cast<double>(info.source_step));
  double written = 0;
  if (slot.entry.model_dir) {
    const std::string dir =
        info.source_step == info.source_base_step
            ? ckpt::CheckpointPath(slot.entry.path, info.source_step)
            : ckpt::DeltaPath(slot.entry.path, info.source_base_step, info.source_step);
    if (auto m = ckpt::ReadManifest(dir); m.ok()) written = m->unix_time;
  } else if (auto j = ReadJsonFile((fs::path(slot.entry.path) / serving::kBundleManifest).string());
             j.ok()) {
    written = j->value("unix_time", 0.0);
  }
  slot.written.store(written);
}

Status Models::Load(Slot& slot) {
  const Entry& e = slot.entry;
  auto fail = [&](const Status& st) {
    slot.load_failures->Add();
    return Status(st.code(), "model " + e.name + ": " + st.message());
  };
  auto bytes = ModelBytes(e.path, e.model_dir);
  if (!bytes.ok()) return fail(bytes.status());
  if (auto avail = MemAvailable(); avail.ok() && *bytes > *avail) {
    return fail(FailedPrecondition(e.path + " takes " + MiB(*bytes) + ", more than the " +
                                   MiB(*avail) + " this host has available (MemAvailable)"));
  }
  std::vector<std::string> warnings;
  auto bundle = e.model_dir ? serving::Bundle::LoadModelDir(e.path, &warnings)
                            : serving::Bundle::Load(e.path);
  for (const auto& w : warnings) PS_LOG(Warning) << "model " << e.name << ": " << w;
  if (!bundle.ok()) return fail(bundle.status());
  auto v = serving::ServedVersion::Make(*bundle);
  if (!v.ok()) return fail(v.status());
  const auto info = (*bundle)->info();
  slot.served->Set(*v);
  Publish(slot);
  PS_LOG(Info) << "model " << e.name << ": serving step " << info.source_base_step << "/"
               << info.source_step << " of " << e.path << " (" << MiB(*bytes) << ")";
  return Status::Ok();
}

Status Models::LoadAll() {
  for (auto& s : slots_) PS_RETURN_IF_ERROR(Load(*s));
  return Status::Ok();
}

void Models::Poll() {
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.entry.model_dir) continue;
    auto current = s.served->Get();
    if (!current) continue;
    auto problem = [&](const Status& st, bool counted = false) {
      if (!counted) s.load_failures->Add();
      if (st.message() != s.last_problem) {
        PS_LOG(Warning) << "model " << s.entry.name << ": " << st.message()
                        << " (serving on as it was)";
        s.last_problem = st.message();
      }
    };
    // New deltas, or a newer full checkpoint streamed in beside the served version
    // (only its changed rows copied); requests never wait (serving.h, "Versions").
    auto r = current->bundle()->Update(s.entry.path);
    if (!r.ok()) {
      problem(r.status());
      continue;
    }
    for (const auto& w : r->warnings) PS_LOG(Warning) << "model " << s.entry.name << ": " << w;
    if (r->applied.empty() && !r->new_base) continue;
    if (r->new_base) {
      // The same bundle at a new version number (the base step): a new ServedVersion.
      auto v = serving::ServedVersion::Make(current->bundle());
      if (!v.ok()) {
        problem(v.status());
        continue;
      }
      s.served->Set(*v);
    }
    s.refreshes->Add();
    s.last_problem.clear();
    Publish(s);
    PS_LOG(Info) << "model " << s.entry.name << ": serving step " << r->base_step << "/"
                 << r->to_step << " (" << (r->new_base ? "new full checkpoint, " : "")
                 << r->applied.size() << " deltas applied; " << r->copied_bytes
                 << " bytes copied, the rest shared; built in " << r->build_seconds
                 << " s, no request paused)";
  }
}

}  // namespace ps::serve
