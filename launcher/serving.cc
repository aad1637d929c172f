#include "launcher/serving.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "launcher/local_plan.h"

#include "libps/core/files.h"
#include "libps/daemon/daemon.h"
#include "libps/model/blas.h"
#include "libps/serving/bundle.h"

namespace ps::launcher {

namespace fs = std::filesystem;
using daemon::kExitFailure;
using daemon::kExitOk;
using daemon::kExitUsage;

namespace {

std::string Figures(const scoring::EvalMetrics& m) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "accuracy %.4f  loss %.4f", m.accuracy, m.loss);
  std::string s = buf;
  if (m.auc >= 0) {
    std::snprintf(buf, sizeof buf, "  auc %.4f", m.auc);
    s += buf;
  }
  return s;
}

// Scores go to `path` + ".tmp", renamed to `path` when complete (a failed run leaves no
// partial score file behind under the final name); or to stdout.
class ScoreSink {
 public:
  static Result<std::unique_ptr<ScoreSink>> Open(const std::string& path) {
    auto s = std::unique_ptr<ScoreSink>(new ScoreSink());
    s->path_ = path;
    if (path.empty()) {
      s->f_ = stdout;
      return s;
    }
    s->tmp_ = path + ".tmp";
    s->f_ = std::fopen(s->tmp_.c_str(), "w");
    if (s->f_ == nullptr) return ErrnoStatus(s->tmp_, "open", errno);
    return s;
  }
  ~ScoreSink() {
    if (f_ != nullptr && f_ != stdout) {
      std::fclose(f_);
      std::remove(tmp_.c_str());
    }
  }
  Status Write(const std::string& line) {
    if (std::fputs(line.c_str(), f_) < 0 || std::fputc('\n', f_) < 0) {
      return IoError((path_.empty() ? std::string("stdout") : tmp_) + ": write failed");
    }
    return Status::Ok();
  }
  Status Commit() {
    if (f_ == stdout) {
      if (std::fflush(stdout) != 0) return IoError("stdout: write failed");
      return Status::Ok();
    }
    const bool ok = std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0;
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!ok || !closed) {
      std::remove(tmp_.c_str());
      return IoError(tmp_ + ": write failed");
    }
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) return ErrnoStatus(path_, "rename", errno);
    return Status::Ok();
  }

 private:
  ScoreSink() = default;
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

}  // namespace

std::string FormatScoreLine(const model::EvalOutput& out, int64_t i) {
  std::string line;
  char buf[32];
  for (size_t h = 0; h < out.heads.size(); ++h) {
    const auto& p = out.heads[h].predictions;
    const size_t k = out.examples > 0 ? p.size() / static_cast<size_t>(out.examples) : 0;
    for (size_t j = 0; j < k; ++j) {
      std::snprintf(buf, sizeof buf, "%.9g",
                    static_cast<double>(p[static_cast<size_t>(i) * k + j]));
      if (!line.empty()) line += (j == 0 ? '\t' : ' ');
      line += buf;
    }
  }
  return line;
}

Result<std::pair<Json, std::string>> ReadDataArg(const std::string& arg) {
  std::error_code ec;
  if (!arg.empty() && arg.front() == '{') {
    PS_ASSIGN_OR_RETURN(Json data, ParseJson(arg, "--data"));
    return std::make_pair(std::move(data), fs::current_path(ec).string());
  }
  PS_ASSIGN_OR_RETURN(Json data, ReadJsonFile(arg));
  return std::make_pair(std::move(data), fs::absolute(fs::path(arg), ec).parent_path().string());
}

int RunExport(const ExportCommand& command) {
  serving::ExportOptions options{
      .model_dir = command.model_dir, .step = command.step, .out_dir = command.out_dir};
  auto r = serving::ExportBundle(options);
  if (!r.ok()) {
    PrintErr("pstrain export: " + r.status().message());
    return kExitFailure;
  }
  for (const auto& w : r->warnings) PrintErr("pstrain export: warning: " + w);
  int64_t rows = 0;
  for (const auto& v : r->info.variables) rows += v.lazy ? v.stored_rows : 0;
  std::printf(
      "exported step %lld%s of %s to %s: %zu variables (%lld live rows of lazy tables), %.1f MiB\n",
      static_cast<long long>(r->info.source_step), r->info.source_final ? " (final)" : "",
      r->info.source_model_dir.c_str(), r->info.dir.c_str(), r->info.variables.size(),
      static_cast<long long>(rows), static_cast<double>(r->bytes) / (1 << 20));
  return kExitOk;
}

Result<std::string> WriteMetricsFile(const std::string& path, int64_t step,
                                     const std::optional<scoring::EvalMetrics>& metrics) {
  if (metrics) {
    Json j = {{"step", step}};
    j.update(scoring::EvalMetricsToJson(*metrics));
    PS_RETURN_IF_ERROR(WriteFileAtomic(path, j.dump() + "\n"));
    return std::string();
  }
  // An old FILE left in place would pass for this run's metrics.
  std::error_code ec;
  const bool removed = fs::remove(path, ec);
  if (ec) return IoError(path + ": cannot remove the old metrics: " + ec.message());
  return "--metrics " + path + ": not written: the data has no labels" +
         (removed ? " (the old file was removed)" : "");
}

int RunPredict(const PredictCommand& command) {
  auto fail = [](const Status& st) {
    PrintErr("pstrain predict: " + st.message());
    return kExitFailure;
  };
  auto usage = [](const std::string& message) {
    PrintErr("pstrain predict: " + message);
    return kExitUsage;
  };
  // The evaluator's setting: scores must not depend on a thread count.
  model::SetBlasThreads(1);
  auto data = ReadDataArg(command.data);
  if (!data.ok()) {
    // Text that is not JSON is a usage error; a file that cannot be read is not.
    if (data.status().code() == Code::kInvalidArgument) return usage(data.status().message());
    return fail(data.status());
  }
  std::error_code ec;
  const bool is_bundle = fs::exists(fs::path(command.model) / serving::kBundleManifest, ec);
  if (is_bundle && command.step) {
    return usage("--step: " + command.model +
                 " is a bundle (of one checkpoint); --step is for a model dir");
  }
  if (!is_bundle && !fs::exists(fs::path(command.model) / "job.json", ec)) {
    return fail(NotFound(command.model + ": neither a bundle (no " + serving::kBundleManifest +
                         ") nor a model dir (no job.json)"));
  }
  std::vector<std::string> warnings;
  auto loaded = is_bundle ? serving::LoadBundle(command.model)
                          : serving::LoadModelDir(command.model, command.step, &warnings);
  if (!loaded.ok()) return fail(loaded.status());
  for (const auto& w : warnings) PrintErr("pstrain predict: warning: " + w);
  auto sink = ScoreSink::Open(command.out);
  if (!sink.ok()) return fail(sink.status());
  auto pass =
      scoring::ScoreData(loaded->loaded, *loaded->model, data->first, data->second, "--data",
                         [&](const model::Batch&, const model::EvalOutput& out) -> Status {
                           for (int64_t i = 0; i < out.examples; ++i) {
                             PS_RETURN_IF_ERROR((*sink)->Write(FormatScoreLine(out, i)));
                           }
                           return Status::Ok();
                         });
  if (!pass.ok()) return fail(pass.status());
  if (Status st = (*sink)->Commit(); !st.ok()) return fail(st);
  const std::string what = is_bundle ? "bundle " + command.model
                                     : "checkpoint " + command.model + "/" +
                                           ckpt::CheckpointRelPath(loaded->info.source_base_step,
                                                                   loaded->info.source_step);
  if (pass->metrics) {
    PrintErr("pstrain predict: " + std::to_string(pass->examples) + " examples scored with " +
             what + " (step " + std::to_string(loaded->info.source_step) +
             "): " + Figures(*pass->metrics));
  } else {
    PrintErr("pstrain predict: " + std::to_string(pass->examples) + " examples scored with " +
             what + " (the data has no labels: no metrics)");
  }
  if (!command.metrics_out.empty()) {
    auto note = WriteMetricsFile(command.metrics_out, loaded->info.source_step, pass->metrics);
    if (!note.ok()) return fail(note.status());
    if (!note->empty()) PrintErr("pstrain predict: " + *note);
  }
  return kExitOk;
}

int RunServe(const ServeCommand& command) {
  std::error_code ec;
  const std::string self_dir = fs::read_symlink("/proc/self/exe", ec).parent_path().string();
  const char* path_env = std::getenv("PATH");
  auto exe =
      FindDaemonNamed("serve", std::nullopt, self_dir, path_env ? path_env : "", IsExecutableFile);
  if (!exe.ok()) {
    PrintErr("pstrain serve: " + exe.status().message());
    return 127;
  }
  std::vector<std::string> args{*exe};
  args.insert(args.end(), command.args.begin(), command.args.end());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  PrintErr("pstrain serve: cannot run " + *exe + ": " + std::strerror(errno));
  return 127;
}

}  // namespace ps::launcher
