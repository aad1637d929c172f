#include "libps/proto/status_codec.h"

#include <optional>

namespace ps::proto::internal {

namespace w = ::ps::wire;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

namespace {

std::string Str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

std::optional<double> Opt(flatbuffers::Optional<double> v) {
  if (!v.has_value()) return std::nullopt;
  return *v;
}

Offset<w::PsUpdateFigures> EncodeUpdate(FlatBufferBuilder& fbb, const PsUpdateFigures& u) {
  return w::CreatePsUpdateFiguresDirect(fbb, u.mode.c_str(), u.stale_dropped, u.waited_pulls,
                                        u.max_lead, u.min_version, u.max_version,
                                        u.applied_on_arrival);
}

PsUpdateFigures DecodeUpdate(const w::PsUpdateFigures* t) {
  if (t == nullptr) return {};
  return PsUpdateFigures{.mode = Str(t->mode()),
                         .stale_dropped = t->stale_dropped(),
                         .waited_pulls = t->waited_pulls(),
                         .max_lead = t->max_lead(),
                         .min_version = t->min_version(),
                         .max_version = t->max_version(),
                         .applied_on_arrival = t->applied_on_arrival()};
}

Offset<w::PsRowFigures> EncodeRows(FlatBufferBuilder& fbb, const PsRowFigures& r) {
  return w::CreatePsRowFigures(fbb, r.lazy_shards, r.live_rows, r.admitted, r.not_admitted,
                               r.evicted_ttl, r.evicted_max_rows);
}

PsRowFigures DecodeRows(const w::PsRowFigures* t) {
  if (t == nullptr) return {};
  return PsRowFigures{.lazy_shards = t->lazy_shards(),
                      .live_rows = t->live_rows(),
                      .admitted = t->admitted(),
                      .not_admitted = t->not_admitted(),
                      .evicted_ttl = t->evicted_ttl(),
                      .evicted_max_rows = t->evicted_max_rows()};
}

Offset<w::WorkerLoad> EncodeWorker(FlatBufferBuilder& fbb, const WorkerLoad& l) {
  auto task = fbb.CreateString(l.task);
  auto state = fbb.CreateString(l.state);
  w::WorkerLoadBuilder b(fbb);
  b.add_task(task);
  b.add_state(state);
  b.add_steps(l.steps);
  b.add_examples_per_s(l.examples_per_s);
  if (l.step_ms) b.add_step_ms(*l.step_ms);
  b.add_data_s(l.data_s);
  b.add_pull_s(l.pull_s);
  b.add_compute_s(l.compute_s);
  b.add_push_s(l.push_s);
  if (l.data_frac) b.add_data_frac(*l.data_frac);
  if (l.pull_frac) b.add_pull_frac(*l.pull_frac);
  if (l.compute_frac) b.add_compute_frac(*l.compute_frac);
  if (l.push_frac) b.add_push_frac(*l.push_frac);
  return b.Finish();
}

WorkerLoad DecodeWorker(const w::WorkerLoad* t) {
  return WorkerLoad{.task = Str(t->task()),
                    .state = Str(t->state()),
                    .steps = t->steps(),
                    .examples_per_s = t->examples_per_s(),
                    .step_ms = Opt(t->step_ms()),
                    .data_s = t->data_s(),
                    .pull_s = t->pull_s(),
                    .compute_s = t->compute_s(),
                    .push_s = t->push_s(),
                    .data_frac = Opt(t->data_frac()),
                    .pull_frac = Opt(t->pull_frac()),
                    .compute_frac = Opt(t->compute_frac()),
                    .push_frac = Opt(t->push_frac())};
}

Offset<w::PsLoad> EncodePsLoad(FlatBufferBuilder& fbb, const PsLoad& l) {
  auto update = l.update ? EncodeUpdate(fbb, *l.update) : Offset<w::PsUpdateFigures>();
  auto rows = l.rows ? EncodeRows(fbb, *l.rows) : Offset<w::PsRowFigures>();
  return w::CreatePsLoadDirect(
      fbb, l.task.c_str(), l.address.c_str(), l.state.c_str(), l.error.c_str(), l.requests,
      l.bytes_in, l.bytes_out, l.requests_per_s, l.bytes_in_per_s, l.bytes_out_per_s, l.rows_per_s,
      l.queue_depth, l.max_queue_depth, l.bytes_held, l.shards, l.window_sec, update, rows);
}

PsLoad DecodePsLoad(const w::PsLoad* t) {
  return PsLoad{
      .task = Str(t->task()),
      .address = Str(t->address()),
      .state = Str(t->state()),
      .error = Str(t->error()),
      .requests = t->requests(),
      .bytes_in = t->bytes_in(),
      .bytes_out = t->bytes_out(),
      .requests_per_s = t->requests_per_s(),
      .bytes_in_per_s = t->bytes_in_per_s(),
      .bytes_out_per_s = t->bytes_out_per_s(),
      .rows_per_s = t->rows_per_s(),
      .queue_depth = t->queue_depth(),
      .max_queue_depth = t->max_queue_depth(),
      .bytes_held = t->bytes_held(),
      .shards = t->shards(),
      .window_sec = t->window_sec(),
      .update = t->update() != nullptr ? std::optional(DecodeUpdate(t->update())) : std::nullopt,
      .rows = t->rows() != nullptr ? std::optional(DecodeRows(t->rows())) : std::nullopt};
}

}  // namespace

Offset<w::PsStatus> EncodePsStatus(FlatBufferBuilder& fbb, const PsStatus& s) {
  auto update = EncodeUpdate(fbb, s.update);
  auto rows = EncodeRows(fbb, s.rows);
  return w::CreatePsStatus(fbb, s.generation, s.global_step, s.uptime_sec, s.shards, s.bytes_held,
                           s.pull_requests, s.push_requests, s.failed_requests, s.bytes_pulled,
                           s.bytes_pushed, s.rows_pulled, s.rows_pushed, s.requests, s.queue_depth,
                           s.max_queue_depth, s.bytes_received, s.bytes_sent, update, rows);
}

PsStatus DecodePsStatus(const w::PsStatus* t) {
  if (t == nullptr) return {};
  return PsStatus{.generation = t->generation(),
                  .global_step = t->global_step(),
                  .uptime_sec = t->uptime_sec(),
                  .shards = t->shards(),
                  .bytes_held = t->bytes_held(),
                  .pull_requests = t->pull_requests(),
                  .push_requests = t->push_requests(),
                  .failed_requests = t->failed_requests(),
                  .bytes_pulled = t->bytes_pulled(),
                  .bytes_pushed = t->bytes_pushed(),
                  .rows_pulled = t->rows_pulled(),
                  .rows_pushed = t->rows_pushed(),
                  .requests = t->requests(),
                  .queue_depth = t->queue_depth(),
                  .max_queue_depth = t->max_queue_depth(),
                  .bytes_received = t->bytes_received(),
                  .bytes_sent = t->bytes_sent(),
                  .update = DecodeUpdate(t->update()),
                  .rows = DecodeRows(t->rows())};
}

Offset<w::ChiefStatus> EncodeChiefStatus(FlatBufferBuilder& fbb, const ChiefStatus& s) {
  std::vector<Offset<w::TaskState>> tasks;
  for (const auto& t : s.tasks) {
    tasks.push_back(
        w::CreateTaskStateDirect(fbb, t.task.c_str(), t.state.c_str(), t.last_error.c_str()));
  }
  std::vector<Offset<w::WorkerLoad>> workers;
  for (const auto& l : s.workers) workers.push_back(EncodeWorker(fbb, l));
  std::vector<Offset<w::PsLoad>> ps;
  for (const auto& l : s.ps) ps.push_back(EncodePsLoad(fbb, l));
  return w::CreateChiefStatusDirect(fbb, s.state.c_str(), s.global_step, s.total_steps,
                                    s.examples_per_sec, s.elapsed_sec, s.stop_reason.c_str(),
                                    &tasks, s.load_window_sec, &workers, &ps, s.epoch, s.epochs,
                                    s.files_done, s.files_waiting, s.data_lag_sec);
}

ChiefStatus DecodeChiefStatus(const w::ChiefStatus* t) {
  if (t == nullptr) return {};
  ChiefStatus s{.state = Str(t->state()),
                .global_step = t->global_step(),
                .total_steps = t->total_steps(),
                .examples_per_sec = t->examples_per_sec(),
                .elapsed_sec = t->elapsed_sec(),
                .stop_reason = Str(t->stop_reason()),
                .tasks = {},
                .load_window_sec = t->load_window_sec(),
                .workers = {},
                .ps = {},
                .epoch = t->epoch(),
                .epochs = t->epochs(),
                .files_done = t->files_done(),
                .files_waiting = t->files_waiting(),
                .data_lag_sec = t->data_lag_sec()};
  if (t->tasks() != nullptr) {
    for (const auto* x : *t->tasks()) {
      s.tasks.push_back(
          {.task = Str(x->task()), .state = Str(x->state()), .last_error = Str(x->last_error())});
    }
  }
  if (t->workers() != nullptr) {
    for (const auto* x : *t->workers()) s.workers.push_back(DecodeWorker(x));
  }
  if (t->ps() != nullptr) {
    for (const auto* x : *t->ps()) s.ps.push_back(DecodePsLoad(x));
  }
  return s;
}

}  // namespace ps::proto::internal
