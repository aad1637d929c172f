// pstrain-serve's version bookkeeping: which versions to load and unload given the full
// checkpoints on disk, the policy and --keep-versions; labels applied and resolved.
#include <catch2/catch.hpp>

#include "libps/serving/versions.h"

using namespace ps;
using namespace ps::serving;
using Catch::Contains;

namespace {

VersionPolicy Latest(int n = 0) {
  VersionPolicy p;
  p.num_versions = n;
  return p;
}
VersionPolicy All() {
  VersionPolicy p;
  p.kind = VersionPolicy::Kind::kAll;
  return p;
}
VersionPolicy Specific(std::vector<int64_t> v) {
  VersionPolicy p;
  p.kind = VersionPolicy::Kind::kSpecific;
  p.versions = std::move(v);
  return p;
}

}  // namespace

TEST_CASE("versions: the last --keep-versions full checkpoints, newest loaded first") {
  CHECK(PlanVersions(Latest(), {100, 200, 300}, {}, {}, 2) ==
        VersionPlan{.load = {300, 200}, .unload = {}});
  CHECK(PlanVersions(Latest(), {300, 100, 200}, {}, {}, 1) ==
        VersionPlan{.load = {300}, .unload = {}});
  // A latest policy's num_versions overrides --keep-versions.
  CHECK(PlanVersions(Latest(3), {100, 200, 300, 400}, {}, {}, 1) ==
        VersionPlan{.load = {400, 300, 200}, .unload = {}});
  // Nothing on disk, nothing loaded: nothing to do.
  CHECK(PlanVersions(Latest(), {}, {}, {}, 2) == VersionPlan{});
}

TEST_CASE("versions: a new checkpoint replaces the oldest kept one; nothing new, nothing done") {
  CHECK(PlanVersions(Latest(), {100, 200}, {}, {100, 200}, 2) == VersionPlan{});
  CHECK(PlanVersions(Latest(), {100, 200, 300}, {}, {100, 200}, 2) ==
        VersionPlan{.load = {300}, .unload = {100}});
  // The trainer deleted ckpt-100 (max_to_keep): it is unloaded.
  CHECK(PlanVersions(Latest(), {200, 300}, {}, {100, 200, 300}, 2) ==
        VersionPlan{.load = {}, .unload = {100}});
  // --keep-versions lowered (a reload): the extra ones go.
  CHECK(PlanVersions(Latest(), {100, 200, 300}, {}, {100, 200, 300}, 1) ==
        VersionPlan{.load = {}, .unload = {100, 200}});
}

TEST_CASE("versions: a damaged checkpoint is skipped and the previous version keeps serving") {
  // 300 failed to load: skipped; 200 and 100 stay.
  CHECK(PlanVersions(Latest(), {100, 200, 300}, {300}, {100, 200}, 2) == VersionPlan{});
  // At start-up, 300 damaged: the two before it.
  CHECK(PlanVersions(Latest(), {100, 200, 300}, {300}, {}, 2) ==
        VersionPlan{.load = {200, 100}, .unload = {}});
  // Keep 1: first 300 is tried; it fails; planning again loads 200.
  CHECK(PlanVersions(Latest(), {100, 200, 300}, {}, {}, 1).load == std::vector<int64_t>{300});
  CHECK(PlanVersions(Latest(), {100, 200, 300}, {300}, {}, 1).load == std::vector<int64_t>{200});
}

TEST_CASE("versions: nothing is unloaded before a wanted version is loaded") {
  // 300 and 400 are wanted and not loaded yet: 100 and 200 serve until one of them is.
  CHECK(PlanVersions(Latest(), {100, 200, 300, 400}, {}, {100, 200}, 2) ==
        VersionPlan{.load = {400, 300}, .unload = {}});
  // Both failed: the old ones stay.
  CHECK(PlanVersions(Latest(), {100, 200, 300, 400}, {300, 400}, {100, 200}, 2) == VersionPlan{});
  // One loaded: the rest go.
  CHECK(PlanVersions(Latest(), {100, 200, 300, 400}, {300}, {100, 200, 400}, 2) ==
        VersionPlan{.load = {}, .unload = {100}});
  // The model dir emptied: the loaded versions serve on.
  CHECK(PlanVersions(Latest(), {}, {}, {100}, 2) == VersionPlan{});
}

TEST_CASE("versions: all and specific policies") {
  CHECK(PlanVersions(All(), {100, 200, 300}, {}, {300}, 1) ==
        VersionPlan{.load = {200, 100}, .unload = {}});
  CHECK(PlanVersions(Specific({100, 300, 999}), {100, 200, 300}, {}, {200, 300}, 2) ==
        VersionPlan{.load = {100}, .unload = {200}});
  // A specific version not on disk (yet): loaded when it appears.
  CHECK(PlanVersions(Specific({400}), {100, 200, 300}, {}, {300}, 2) == VersionPlan{});
  CHECK(PlanVersions(Specific({400}), {100, 200, 300, 400}, {}, {300}, 2) ==
        VersionPlan{.load = {400}, .unload = {}});
  CHECK(PlanVersions(Specific({400}), {100, 200, 300, 400}, {}, {300, 400}, 2) ==
        VersionPlan{.load = {}, .unload = {300}});
}

TEST_CASE("labels: only loaded versions, unless allowed and the label is new or unmoved") {
  const std::set<int64_t> loaded{100, 200};
  CHECK(CheckLabels("m", {{"stable", 100}, {"canary", 200}}, {}, loaded, false).ok());
  Status st = CheckLabels("m", {{"stable", 100}, {"canary", 300}}, {}, loaded, false);
  CHECK(st.code() == Code::kFailedPrecondition);
  CHECK_THAT(st.message(),
             Contains("Request to assign label canary to version 300 of model m, which is not "
                      "currently available for inference"));
  // Allowed: a new label may name a version not loaded yet.
  CHECK(CheckLabels("m", {{"canary", 300}}, {}, loaded, true).ok());
  CHECK(CheckLabels("m", {{"canary", 300}}, {{"canary", 300}}, loaded, true).ok());
  // A label in use moves only to a loaded version, allowed or not.
  st = CheckLabels("m", {{"stable", 300}}, {{"stable", 100}}, loaded, true);
  CHECK(st.code() == Code::kFailedPrecondition);
  CHECK_THAT(st.message(), Contains("a label in use moves only to a loaded version"));
  CHECK(CheckLabels("m", {{"stable", 200}}, {{"stable", 100}}, loaded, false).ok());
  CHECK(CheckLabels("m", {}, {{"stable", 100}}, loaded, false).ok());
}

TEST_CASE("labels: a request's version, label or the newest") {
  const std::map<std::string, int64_t> labels{{"stable", 100}, {"gone", 50}};
  const std::set<int64_t> loaded{100, 200};
  bool unknown = true;
  CHECK(ResolveVersion("", "", labels, loaded, &unknown) == std::optional<int64_t>(200));
  CHECK_FALSE(unknown);
  CHECK(ResolveVersion("100", "", labels, loaded, &unknown) == std::optional<int64_t>(100));
  CHECK(ResolveVersion("150", "", labels, loaded, &unknown) == std::nullopt);
  CHECK_FALSE(unknown);
  CHECK(ResolveVersion("", "stable", labels, loaded, &unknown) == std::optional<int64_t>(100));
  // A label whose version has been unloaded names nothing loaded.
  CHECK(ResolveVersion("", "gone", labels, loaded, &unknown) == std::nullopt);
  CHECK_FALSE(unknown);
  CHECK(ResolveVersion("", "nope", labels, loaded, &unknown) == std::nullopt);
  CHECK(unknown);
  CHECK(ResolveVersion("", "", labels, {}, &unknown) == std::nullopt);
}
