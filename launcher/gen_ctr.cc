#include "launcher/gen_ctr.h"

#include <cstdio>
#include <string>
#include <utility>

#include "libps/core/json.h"
#include "libps/daemon/daemon.h"
#include "libps/data/ctr_gen.h"

namespace ps::launcher {

using daemon::kExitFailure;
using daemon::kExitOk;
using daemon::kExitUsage;

int RunGenCtr(const GenCtrCommand& command) {
  data::CtrSpec spec = data::DefaultCtrSpec();
  if (command.spec_file) {
    auto json = ReadJsonFile(*command.spec_file);
    if (!json.ok()) {
      PrintErr("pstrain gen-ctr: --spec: " + json.status().message());
      return kExitUsage;
    }
    auto parsed = data::ParseCtrSpec(*json, *command.spec_file);
    if (!parsed.ok()) {
      PrintErr("pstrain gen-ctr: " + parsed.status().message());
      return kExitUsage;
    }
    spec = std::move(*parsed);
  }
  if (command.seed) spec.seed = *command.seed;
  if (command.train_examples) spec.train_examples = *command.train_examples;
  if (command.eval_examples) spec.eval_examples = *command.eval_examples;
  if (command.gzip) spec.gzip = true;
  if (Status st = data::ValidateCtrSpec(spec); !st.ok()) {
    PrintErr("pstrain gen-ctr: " + st.message());
    return kExitUsage;
  }
  auto report = data::GenerateCtr(spec, command.out_dir, command.output);
  if (!report.ok()) {
    PrintErr("pstrain gen-ctr: " + report.status().message());
    return kExitFailure;
  }
  const data::CtrReport& r = *report;
  const int64_t examples = spec.train_examples + spec.eval_examples;
  std::string offsets;
  for (size_t i = 0; i + 1 < r.field_offsets.size(); ++i) {
    offsets += (i ? ", " : "") + std::to_string(r.field_offsets[i]);
  }
  std::printf("wrote %lld train and %lld eval examples in %.1f s (%.0f examples/s)\n",
              static_cast<long long>(spec.train_examples),
              static_cast<long long>(spec.eval_examples), r.seconds,
              r.seconds > 0 ? static_cast<double>(examples) / r.seconds : 0.0);
  for (const data::CtrFiles& f : r.outputs) {
    const std::string more =
        f.train.size() > 1 ? " (+" + std::to_string(f.train.size() - 1) + " more)" : "";
    std::printf("  train: %s%s\n  eval:  %s%s\n", f.train[0].c_str(), more.c_str(),
                f.eval[0].c_str(), more.c_str());
  }
  std::printf("  spec:  %s\n", r.json_path.c_str());
  std::printf("num_features: %lld  field_offsets: [%s]\n", static_cast<long long>(r.num_features),
              offsets.c_str());
  std::printf("click rate: train %.4f, eval %.4f\n", r.train_click_rate, r.eval_click_rate);
  std::printf("ground truth on eval: auc %.4f logloss %.4f\n", r.truth_eval_auc,
              r.truth_eval_logloss);
  return kExitOk;
}

}  // namespace ps::launcher
