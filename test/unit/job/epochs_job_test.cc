// The job's "epochs" key: with or instead of "steps", in-memory train_data only.
#include <catch2/catch.hpp>

#include <string>

#include "libps/core/json.h"
#include "libps/job/job.h"

using ps::Json;

namespace {

Json Job() {
  return Json::parse(R"({"model":{"type":"logistic_regression","num_features":100},
    "train_data":{"format":"libsvm","path":"train.libsvm","num_features":100,"classes":2},
    "optimizer":{"type":"sgd","learning_rate":0.05},"batch_size":8})");
}

}  // namespace

TEST_CASE("job: epochs without steps leaves the steps to the chief") {
  Json j = Job();
  j["epochs"] = 3;
  auto job = ps::job::ParseJob(j, "/tmp");
  REQUIRE(job.ok());
  CHECK(job->epochs == 3);
  CHECK(job->steps == 0);
  j["steps"] = 500;
  job = ps::job::ParseJob(j, "/tmp");
  REQUIRE(job.ok());
  CHECK(job->epochs == 3);
  CHECK(job->steps == 500);
}

TEST_CASE("job: neither epochs nor steps, bad epochs, epochs with streamed sync data are errors") {
  auto none = ps::job::ParseJob(Job(), "/tmp");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::Contains("job.steps"));
  for (int bad : {0, -1}) {
    Json j = Job();
    j["epochs"] = bad;
    auto job = ps::job::ParseJob(j, "/tmp");
    REQUIRE_FALSE(job.ok());
    CHECK_THAT(job.status().message(), Catch::Contains("job.epochs"));
  }
  Json j = Job();
  j["epochs"] = 2;
  j["train_data"] = Json::parse(R"({"format":"libsvm","files":"*.libsvm","num_features":100})");
  auto streamed = ps::job::ParseJob(j, "/tmp");
  INFO(streamed.status().message());
  REQUIRE(streamed.ok());  // async: the chief's shard queue counts the epochs
  CHECK(streamed->epochs == 2);
  CHECK(streamed->steps == 0);  // until the data ends the job
  j["update"] = Json::parse(R"({"mode":"sync"})");
  auto sync = ps::job::ParseJob(j, "/tmp");
  REQUIRE_FALSE(sync.ok());
  CHECK_THAT(sync.status().message(), Catch::Contains("streamed"));
}

TEST_CASE(
    "job: train_data.follow needs no steps; with epochs, sync mode or on eval_data an error") {
  Json j = Job();
  j["train_data"] =
      Json::parse(R"({"format":"libsvm","files":"in/*.libsvm","num_features":100,"follow":true})");
  auto follow = ps::job::ParseJob(j, "/tmp");
  INFO(follow.status().message());
  REQUIRE(follow.ok());
  CHECK(follow->steps == 0);  // until stopped
  j["steps"] = 700;
  follow = ps::job::ParseJob(j, "/tmp");
  REQUIRE(follow.ok());
  CHECK(follow->steps == 700);
  j["epochs"] = 2;
  auto epochs = ps::job::ParseJob(j, "/tmp");
  REQUIRE_FALSE(epochs.ok());
  CHECK_THAT(epochs.status().message(), Catch::Contains("job.epochs: job.train_data.follow"));
  j.erase("epochs");
  j["update"] = Json::parse(R"({"mode":"sync"})");
  auto sync = ps::job::ParseJob(j, "/tmp");
  REQUIRE_FALSE(sync.ok());
  CHECK_THAT(sync.status().message(), Catch::Contains("job.train_data.follow: data that keeps"));
  j.erase("update");
  j["eval_data"] = j["train_data"];
  auto eval = ps::job::ParseJob(j, "/tmp");
  REQUIRE_FALSE(eval.ok());
  CHECK_THAT(eval.status().message(), Catch::Contains("job.eval_data.follow"));
}
