// Optimizer updates against numbers worked out independently (by hand for the short
// ones, by a float64 scalar script for the rest; the script's FTRL reproduces TF's test
// numbers below to 1e-8), and against TF's own ftrl_test.py numbers.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "libps/server/optimizer.h"

using namespace ps::server;

namespace {

struct Run {
  std::vector<float> var;
  std::vector<std::vector<float>> slots;
  OptimizerSpec spec;

  Run(OptimizerSpec s, std::vector<float> v) : var(std::move(v)), spec(s) {
    for (const SlotDef& d : SlotDefs(spec)) slots.emplace_back(var.size(), d.initial);
  }
  SlotRows Rows(size_t begin) {
    SlotRows r;
    for (size_t i = 0; i < slots.size(); ++i) r.data[i] = slots[i].data() + begin;
    return r;
  }
  // `steps` updates with the same gradient, at global steps first_step, first_step + 1, ...
  void Steps(const std::vector<float>& grad, int steps, int64_t first_step = 0) {
    for (int k = 0; k < steps; ++k) {
      int64_t step = first_step + k;
      float lr = static_cast<float>(LearningRate(spec, step));
      ApplyRows(spec, lr, step, var, Rows(0), grad);
    }
  }
};

OptimizerSpec Make(OptimizerKind kind, double lr) {
  OptimizerSpec s = DefaultOptimizer(kind);
  s.learning_rate = lr;
  return s;
}

void CheckVar(const std::vector<float>& got, const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(rel));
  }
}

}  // namespace

TEST_CASE("SGD without momentum: var -= lr * g") {
  Run r(Make(OptimizerKind::kSgd, 0.1), {1.0f, 2.0f});
  CHECK(SlotDefs(r.spec).empty());
  r.Steps({0.1f, 0.2f}, 3);
  CheckVar(r.var, {0.97, 1.94}, 1e-6);  // 1 - 3 * 0.01, 2 - 3 * 0.02
}

TEST_CASE("SGD with Keras momentum and Nesterov") {
  auto spec = Make(OptimizerKind::kSgd, 0.1);
  spec.momentum = 0.9;
  Run r(spec, {1.0f, 2.0f});
  REQUIRE(SlotDefs(spec).size() == 1);
  CHECK(SlotDefs(spec)[0].name == "momentum");
  // element 0: m = -0.01, -0.019, -0.0271; var = 0.99, 0.971, 0.9439
  r.Steps({0.1f, 0.2f}, 3);
  CheckVar(r.var, {0.9439, 1.8878}, 1e-6);
  CHECK(r.slots[0][0] == Approx(-0.0271).epsilon(1e-5));

  spec.nesterov = true;
  Run n(spec, {1.0f, 2.0f});
  // element 0: m = -0.01 → var += 0.9 * -0.01 - 0.01 = -0.019 → 0.981;
  //            m = -0.019 → var += -0.0271 → 0.9539; m = -0.0271 → var += -0.03439 → 0.91951
  n.Steps({0.1f, 0.2f}, 3);
  CheckVar(n.var, {0.91951, 1.83902}, 1e-6);
}

TEST_CASE("Adagrad (ApplyAdagradV2) with initial accumulator 0.1") {
  Run r(Make(OptimizerKind::kAdagrad, 0.1), {1.0f, 2.0f});
  CHECK(r.slots[0][0] == Approx(0.1));
  // step 1, element 0: acc = 0.11; var = 1 - 0.1 * 0.1 / (sqrt(0.11) + 1e-7) = 0.969849...
  r.Steps({0.1f, 0.2f}, 1);
  CHECK(r.var[0] == Approx(1.0 - 0.01 / (std::sqrt(0.11) + 1e-7)).epsilon(1e-6));
  r.Steps({0.1f, 0.2f}, 2);
  CheckVar(r.var, {0.9132463673880238, 1.8567671907550158}, 1e-6);
  CHECK(r.slots[0][0] == Approx(0.13).epsilon(1e-6));
  CHECK(r.slots[0][1] == Approx(0.22).epsilon(1e-6));
}

TEST_CASE("RMSprop: Keras plain path and the momentum kernels, centered or not") {
  const std::vector<float> g{0.1f, 0.2f};
  SECTION("plain") {
    auto spec = Make(OptimizerKind::kRmsprop, 0.01);
    REQUIRE(SlotDefs(spec).size() == 1);
    Run r(spec, {1.0f, 2.0f});
    // step 1, element 0: rms = 0.1 * 0.01 = 0.001; var = 1 - 0.01 * 0.1 / (sqrt(0.001) + 1e-7)
    r.Steps(g, 1);
    CHECK(r.var[0] == Approx(1.0 - 0.001 / (std::sqrt(0.001) + 1e-7)).epsilon(1e-6));
    r.Steps(g, 2, 1);
    CheckVar(r.var, {0.9262263707828177, 1.9262262760172246}, 1e-6);
  }
  SECTION("centered") {
    auto spec = Make(OptimizerKind::kRmsprop, 0.01);
    spec.centered = true;
    auto slots = SlotDefs(spec);
    REQUIRE(slots.size() == 2);
    CHECK(slots[1].name == "mg");
    Run r(spec, {1.0f, 2.0f});
    r.Steps(g, 3);
    CheckVar(r.var, {0.9186778585261585, 1.9186777451735664}, 2e-6);
  }
  SECTION("momentum 0.5") {
    auto spec = Make(OptimizerKind::kRmsprop, 0.01);
    spec.momentum = 0.5;
    REQUIRE(SlotDefs(spec).size() == 2);
    Run r(spec, {1.0f, 2.0f});
    r.Steps(g, 3);
    CheckVar(r.var, {0.8910423388531443, 1.891039318840674}, 1e-6);
  }
  SECTION("momentum 0.5, centered") {
    auto spec = Make(OptimizerKind::kRmsprop, 0.01);
    spec.momentum = 0.5;
    spec.centered = true;
    auto slots = SlotDefs(spec);
    REQUIRE(slots.size() == 3);
    CHECK(slots[0].name == "rms");
    CHECK(slots[1].name == "momentum");
    CHECK(slots[2].name == "mg");
    Run r(spec, {1.0f, 2.0f});
    r.Steps(g, 3);
    CheckVar(r.var, {0.8809373653042029, 1.8809335763462978}, 2e-6);
  }
}

TEST_CASE("Adam with bias correction from the global step") {
  auto spec = Make(OptimizerKind::kAdam, 0.001);
  Run r(spec, {1.0f, 2.0f});
  // step 0 (t = 1), element 0: m = 0.01, v = 1e-5, alpha = 0.001 * sqrt(0.001) / 0.1;
  // var -= 0.01 * alpha / (sqrt(1e-5) + 1e-7) ≈ 0.001 * 0.99997 → 0.99900003
  r.Steps({0.1f, -0.2f}, 1);
  double alpha = 0.001 * std::sqrt(1 - 0.999) / (1 - 0.9);
  CHECK(r.var[0] == Approx(1.0 - 0.01 * alpha / (std::sqrt(1e-5) + 1e-7)).epsilon(1e-6));
  r.Steps({0.1f, -0.2f}, 2, 1);
  CheckVar(r.var, {0.9970000722537659, 2.0029999638726586}, 1e-6);

  // The same three pushes arriving at global steps 100..102 use t = 101..103.
  Run late(spec, {1.0f, 2.0f});
  late.Steps({0.1f, -0.2f}, 3, 100);
  CheckVar(late.var, {0.9961469635232088, 2.003853080927346}, 1e-6);
}

TEST_CASE("FTRL matches TF's ftrl_test.py numbers") {
  auto spec = Make(OptimizerKind::kFtrl, 3.0);
  spec.initial_accumulator_value = 0.1;
  SECTION("testFtrlwithoutRegularization: 3 steps from zero") {
    Run v0(spec, {0.0f, 0.0f});
    Run v1(spec, {0.0f, 0.0f});
    v0.Steps({0.1f, 0.2f}, 3);
    v1.Steps({0.01f, 0.02f}, 3);
    CheckVar(v0.var, {-2.60260963, -4.29698515}, 1e-5);
    CheckVar(v1.var, {-0.28432083, -0.56694895}, 1e-5);
  }
  SECTION("testFtrlWithL1_L2: 10 steps") {
    spec.l1 = 0.001;
    spec.l2 = 2.0;
    Run v0(spec, {1.0f, 2.0f});
    Run v1(spec, {4.0f, 3.0f});
    v0.Steps({0.1f, 0.2f}, 10);
    v1.Steps({0.01f, 0.02f}, 10);
    CheckVar(v0.var, {-0.24059935, -0.46829352}, 1e-5);
    CheckVar(v1.var, {-0.02406147, -0.04830509}, 1e-5);
  }
  SECTION("testFtrlWithL1_L2_L2Shrinkage: 10 steps") {
    spec.l1 = 0.001;
    spec.l2 = 2.0;
    spec.l2_shrinkage = 0.1;
    Run v0(spec, {1.0f, 2.0f});
    Run v1(spec, {4.0f, 3.0f});
    v0.Steps({0.1f, 0.2f}, 10);
    v1.Steps({0.01f, 0.02f}, 10);
    CheckVar(v0.var, {-0.22578995, -0.44345796}, 1e-5);
    CheckVar(v1.var, {-0.14378493, -0.13229476}, 1e-5);
    // l2 shrinkage does not change the accumulator: 0.1 + 10 * 0.01
    CHECK(v0.slots[0][0] == Approx(0.2).epsilon(1e-6));
  }
}

TEST_CASE("FTRL with Keras beta and a non-default learning_rate_power") {
  auto spec = Make(OptimizerKind::kFtrl, 0.5);
  spec.l1 = 0.01;
  spec.l2 = 0.1;
  spec.beta = 0.2;  // l2 becomes 0.1 + 0.2 / (2 * 0.5) = 0.3
  Run b(spec, {1.0f, 2.0f});
  b.Steps({0.1f, 0.2f}, 3);
  CheckVar(b.var, {-0.1998496925838778, -0.23816359986570262}, 1e-5);

  auto p = Make(OptimizerKind::kFtrl, 0.5);
  p.learning_rate_power = -0.25;
  Run r(p, {1.0f, 2.0f});
  r.Steps({0.1f, 0.2f}, 3);
  CheckVar(r.var, {-0.23149586871634625, -0.30166661769455005}, 1e-5);
}

TEST_CASE("ApplyRows over row ranges equals one dense apply") {
  for (auto kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRmsprop,
                    OptimizerKind::kAdam, OptimizerKind::kFtrl}) {
    auto spec = Make(kind, 0.05);
    spec.momentum = kind == OptimizerKind::kSgd ? 0.9 : 0.0;
    std::vector<float> init(12), grad(12);
    for (int i = 0; i < 12; ++i) {
      init[i] = 0.1f * static_cast<float>(i) - 0.5f;
      grad[i] = 0.03f * static_cast<float>(i % 5) - 0.05f;
    }
    Run whole(spec, init), split(spec, init);
    for (int64_t step = 0; step < 3; ++step) {
      float lr = static_cast<float>(LearningRate(spec, step));
      ApplyRows(spec, lr, step, whole.var, whole.Rows(0), grad);
      // rows of 4: [0, 4) then [4, 12)
      ApplyRows(spec, lr, step, std::span(split.var).subspan(0, 4), split.Rows(0),
                std::span<const float>(grad).subspan(0, 4));
      ApplyRows(spec, lr, step, std::span(split.var).subspan(4), split.Rows(4),
                std::span<const float>(grad).subspan(4));
    }
    INFO(OptimizerKindName(kind));
    CHECK(whole.var == split.var);
    CHECK(whole.slots == split.slots);
  }
}

TEST_CASE("learning-rate schedules") {
  auto spec = Make(OptimizerKind::kSgd, 0.1);
  CHECK(LearningRate(spec, 0) == Approx(0.1));
  CHECK(LearningRate(spec, 123456) == Approx(0.1));

  spec.schedule = {ScheduleKind::kExponential, 1000, 0.5, false, 0.0};
  CHECK(LearningRate(spec, 0) == Approx(0.1));
  CHECK(LearningRate(spec, 500) == Approx(0.1 / std::sqrt(2.0)));
  CHECK(LearningRate(spec, 1000) == Approx(0.05));
  CHECK(LearningRate(spec, 2500) == Approx(0.1 * std::pow(0.5, 2.5)));
  spec.schedule.staircase = true;
  CHECK(LearningRate(spec, 999) == Approx(0.1));
  CHECK(LearningRate(spec, 1000) == Approx(0.05));
  CHECK(LearningRate(spec, 2500) == Approx(0.025));

  spec.schedule = {ScheduleKind::kCosine, 1000, 0.0, false, 0.0};
  CHECK(LearningRate(spec, 0) == Approx(0.1));
  CHECK(LearningRate(spec, 250) == Approx(0.1 * 0.5 * (1 + std::cos(std::numbers::pi / 4))));
  CHECK(LearningRate(spec, 500) == Approx(0.05));
  CHECK(LearningRate(spec, 1000) == Approx(0.0).margin(1e-12));
  CHECK(LearningRate(spec, 5000) == Approx(0.0).margin(1e-12));
  spec.schedule.alpha = 0.1;
  CHECK(LearningRate(spec, 500) == Approx(0.1 * (0.9 * 0.5 + 0.1)));
  CHECK(LearningRate(spec, 5000) == Approx(0.01));

  // Warm-up of 100 steps, then the cosine decay starts from step 100.
  spec.schedule.alpha = 0.0;
  spec.warmup_steps = 100;
  CHECK(LearningRate(spec, 0) == Approx(0.001));
  CHECK(LearningRate(spec, 49) == Approx(0.05));
  CHECK(LearningRate(spec, 99) == Approx(0.1));
  CHECK(LearningRate(spec, 100) == Approx(0.1));
  CHECK(LearningRate(spec, 600) == Approx(0.05));
  CHECK(LearningRate(spec, 1100) == Approx(0.0).margin(1e-12));
  CHECK(LearningRate(spec, -5) == Approx(0.001));

  // Warm-up in front of a constant rate.
  auto w = Make(OptimizerKind::kAdam, 0.01);
  w.warmup_steps = 4;
  CHECK(LearningRate(w, 0) == Approx(0.0025));
  CHECK(LearningRate(w, 2) == Approx(0.0075));
  CHECK(LearningRate(w, 4) == Approx(0.01));
}

TEST_CASE("ParseOptimizer reads the documented JSON strictly") {
  auto j = ps::ParseJson(R"({"type":"adam","learning_rate":0.002,"beta_1":0.8,
      "schedule":{"type":"cosine","decay_steps":1000},"warmup_steps":100})",
                         "t");
  REQUIRE(j.ok());
  auto s = ParseOptimizer(*j, "job.optimizer");
  REQUIRE(s.ok());
  CHECK(s->kind == OptimizerKind::kAdam);
  CHECK(s->learning_rate == 0.002);
  CHECK(s->beta_1 == 0.8);
  CHECK(s->beta_2 == 0.999);
  CHECK(s->epsilon == 1e-7);
  CHECK(s->schedule.kind == ScheduleKind::kCosine);
  CHECK(s->schedule.decay_steps == 1000);
  CHECK(s->warmup_steps == 100);

  auto defaults = ParseOptimizer(*ps::ParseJson(R"({"type":"sgd"})", "t"), "o");
  REQUIRE(defaults.ok());
  CHECK(*defaults == DefaultOptimizer(OptimizerKind::kSgd));
  CHECK(defaults->learning_rate == 0.01);

  auto ftrl = ParseOptimizer(*ps::ParseJson(R"({"type":"ftrl","l1_regularization_strength":0.5,
      "l2_shrinkage_regularization_strength":0.1,"beta":1,
      "schedule":{"type":"exponential_decay","decay_steps":10,"decay_rate":0.9,"staircase":true}})",
                                            "t"),
                             "o");
  REQUIRE(ftrl.ok());
  CHECK(ftrl->l1 == 0.5);
  CHECK(ftrl->l2_shrinkage == 0.1);
  CHECK(ftrl->beta == 1.0);
  CHECK(ftrl->initial_accumulator_value == 0.1);
  CHECK(ftrl->schedule.staircase);

  auto err = [](const char* text) {
    auto json = ps::ParseJson(text, "t");
    REQUIRE(json.ok());
    auto r = ParseOptimizer(*json, "job.optimizer");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ps::Code::kInvalidArgument);
    return r.status().message();
  };
  CHECK(err(R"({"type":"adam","momentum":0.9})") == "job.optimizer.momentum: unknown key");
  CHECK(err(R"({"type":"nadam"})").starts_with("job.optimizer.type: unknown optimizer \"nadam\""));
  CHECK(err(R"({"learning_rate":1})") == "job.optimizer.type: required key is missing");
  CHECK(err(R"({"type":"sgd","momentum":1.5})").starts_with("job.optimizer.momentum: must be in"));
  CHECK(err(R"({"type":"adam","beta_2":1.0})").starts_with("job.optimizer.beta_2: must be in"));
  CHECK(err(R"({"type":"sgd","learning_rate":-1})").starts_with("job.optimizer.learning_rate:"));
  CHECK(err(R"({"type":"ftrl","learning_rate_power":0.5})")
            .starts_with("job.optimizer.learning_rate_power: must be <= 0"));
  CHECK(err(R"({"type":"sgd","schedule":{"type":"cosine"}})") ==
        "job.optimizer.schedule.decay_steps: required key is missing");
  CHECK(err(R"({"type":"sgd","schedule":{"type":"cosine","decay_steps":0}})")
            .starts_with("job.optimizer.schedule.decay_steps: must be > 0"));
  CHECK(err(R"({"type":"sgd","schedule":{"type":"constant","alpha":0}})") ==
        "job.optimizer.schedule.alpha: unknown key");
  CHECK(err(R"({"type":"sgd","warmup_steps":-1})")
            .starts_with("job.optimizer.warmup_steps: must be >= 0"));
  CHECK(err(R"({"type":"sgd","nesterov":1})") ==
        "job.optimizer.nesterov: expected true or false, got number");
}

// ApplyRows runs vectorised loops (and on x86-64 an AVX2 copy of them, picked at load
// time). Every kernel is element-wise IEEE arithmetic, so any vector width must give the
// scalar result bit for bit; an FMA contraction or reassociation would not (the project
// builds with -ffp-contract=off). The references below follow the kernels' formulas
// operation by operation; lengths cover whole vectors and every tail of 4 and 8 floats.
// This runs the copy this CPU picks (AVX2 on the build machines).
namespace {

float Sign(float x) { return x == 0.0f ? 0.0f : (x < 0.0f ? -1.0f : 1.0f); }

// One update of element i, as ApplyRows's kernels compute it.
void Reference(const OptimizerSpec& spec, float lr, int64_t step, float& var, std::vector<float*> s,
               float g) {
  const auto eps = static_cast<float>(spec.epsilon);
  switch (spec.kind) {
    case OptimizerKind::kSgd: {
      if (spec.momentum == 0) {
        var -= g * lr;
        return;
      }
      const auto momentum = static_cast<float>(spec.momentum);
      *s[0] = *s[0] * momentum - g * lr;
      var += spec.nesterov ? *s[0] * momentum - g * lr : *s[0];
      return;
    }
    case OptimizerKind::kAdagrad:
      *s[0] += g * g;
      var -= g * lr / (std::sqrt(*s[0]) + eps);
      return;
    case OptimizerKind::kAdam: {
      const float t = static_cast<float>(step + 1);
      const auto b1 = static_cast<float>(spec.beta_1), b2 = static_cast<float>(spec.beta_2);
      const float alpha = lr * std::sqrt(1.0f - std::pow(b2, t)) / (1.0f - std::pow(b1, t));
      *s[0] += (g - *s[0]) * (1.0f - b1);
      *s[1] += (g * g - *s[1]) * (1.0f - b2);
      var -= (*s[0] * alpha) / (std::sqrt(*s[1]) + eps);
      return;
    }
    case OptimizerKind::kRmsprop: {
      const auto rho = static_cast<float>(spec.rho);
      if (spec.momentum > 0) {
        float* ms = s[0];
        float* mom = s[1];
        *ms += (g * g - *ms) * (1.0f - rho);
        float denom = *ms + eps;
        if (spec.centered) {
          float* mg = s[2];
          *mg += (g - *mg) * (1.0f - rho);
          denom = (*ms - *mg * *mg) + eps;
        }
        *mom = *mom * static_cast<float>(spec.momentum) + (g * lr) / std::sqrt(denom);
        var -= *mom;
        return;
      }
      float* rms = s[0];
      *rms = rho * *rms + (1.0f - rho) * (g * g);
      float root = *rms;
      if (spec.centered) {
        float* mg = s[1];
        *mg = rho * *mg + (1.0f - rho) * g;
        root = *rms - *mg * *mg;
      }
      var -= lr * g / (std::sqrt(root) + eps);
      return;
    }
    case OptimizerKind::kFtrl: {
      const float l1 = static_cast<float>(spec.l1);
      const float two_l2 = 2.0f * static_cast<float>(spec.l2 + spec.beta / (2.0 * lr));
      const float two_shrink = 2.0f * static_cast<float>(spec.l2_shrinkage);
      const auto power = static_cast<float>(spec.learning_rate_power);
      float* accum = s[0];
      float* linear = s[1];
      const float gs = g + two_shrink * var;
      const float new_accum = *accum + g * g;
      const float new_root = power == -0.5f ? std::sqrt(new_accum) : std::pow(new_accum, -power);
      const float old_root = power == -0.5f ? std::sqrt(*accum) : std::pow(*accum, -power);
      *linear += gs - (new_root - old_root) / lr * var;
      const float x = l1 * Sign(*linear) - *linear;
      const float y = new_root / lr + two_l2;
      var = std::fabs(*linear) > l1 ? x / y : 0.0f;
      *accum = new_accum;
      return;
    }
  }
}

}  // namespace

TEST_CASE("ApplyRows equals the scalar formulas bit for bit at every length") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::pair<std::string, OptimizerSpec>> specs;
  auto add = [&](const std::string& name, OptimizerKind kind, auto&& tweak) {
    OptimizerSpec spec = Make(kind, 0.01);
    tweak(spec);
    specs.emplace_back(name, spec);
  };
  add("sgd", OptimizerKind::kSgd, [](OptimizerSpec&) {});
  add("sgd momentum", OptimizerKind::kSgd, [](OptimizerSpec& s) { s.momentum = 0.9; });
  add("sgd nesterov", OptimizerKind::kSgd,
      [](OptimizerSpec& s) { s.momentum = 0.9, s.nesterov = true; });
  add("adagrad", OptimizerKind::kAdagrad, [](OptimizerSpec&) {});
  add("adam", OptimizerKind::kAdam, [](OptimizerSpec&) {});
  add("rmsprop", OptimizerKind::kRmsprop, [](OptimizerSpec&) {});
  add("rmsprop centered", OptimizerKind::kRmsprop, [](OptimizerSpec& s) { s.centered = true; });
  add("rmsprop momentum", OptimizerKind::kRmsprop, [](OptimizerSpec& s) { s.momentum = 0.5; });
  add("rmsprop momentum centered", OptimizerKind::kRmsprop,
      [](OptimizerSpec& s) { s.momentum = 0.5, s.centered = true; });
  add("ftrl", OptimizerKind::kFtrl,
      [](OptimizerSpec& s) { s.l1 = 0.01, s.l2 = 0.001, s.l2_shrinkage = 0.001, s.beta = 0.1; });
  add("ftrl power -0.3", OptimizerKind::kFtrl,
      [](OptimizerSpec& s) { s.learning_rate_power = -0.3, s.l1 = 0.01; });
  for (const auto& [name, spec] : specs) {
    REQUIRE(ValidateOptimizer(spec, "spec").ok());
    for (size_t n = 1; n <= 40; ++n) {
      INFO(name << ", " << n << " elements");
      Run r(spec, std::vector<float>(n));
      std::vector<float> grad(n);
      for (size_t i = 0; i < n; ++i) {
        r.var[i] = u(rng);
        grad[i] = u(rng);
        // Accumulators in [0.5, 1), so a centered RMSprop's ms - mg^2 stays positive (mg,
        // its last slot, in [-0.5, 0.5)).
        for (auto& slot : r.slots) slot[i] = 0.75f + 0.25f * u(rng);
        if (spec.kind == OptimizerKind::kRmsprop && spec.centered)
          r.slots.back()[i] = 0.5f * u(rng);
      }
      std::vector<float> var = r.var;
      std::vector<std::vector<float>> slots = r.slots;
      const int64_t step = 41;
      const float lr = static_cast<float>(LearningRate(spec, step));
      r.Steps(grad, 1, step);
      for (size_t i = 0; i < n; ++i) {
        std::vector<float*> at;
        for (auto& slot : slots) at.push_back(&slot[i]);
        Reference(spec, lr, step, var[i], at, grad[i]);
      }
      CHECK(std::memcmp(var.data(), r.var.data(), n * sizeof(float)) == 0);
      for (size_t k = 0; k < slots.size(); ++k) {
        CHECK(std::memcmp(slots[k].data(), r.slots[k].data(), n * sizeof(float)) == 0);
      }
    }
  }
}
