#include "libps/proto/codec.h"

#include <type_traits>

#include "libps/proto/create_shards_codec.h"
#include "libps/proto/pstrain_generated.h"
#include "libps/proto/status_codec.h"

namespace ps::proto {

namespace w = ::ps::wire;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

const char* RoleName(Role role) {
  switch (role) {
    case Role::kUnknown:
      return "unknown";
    case Role::kChief:
      return "chief";
    case Role::kWorker:
      return "worker";
    case Role::kPs:
      return "ps";
    case Role::kEvaluator:
      return "evaluator";
    case Role::kClient:
      return "client";
  }
  return "unknown";
}

const char* BodyName(const Body& body) {
  return w::EnumNameBody(static_cast<w::Body>(body.index() + 1));
}

namespace {

// The variant's alternatives are declared in the union's order; keep them in step.
static_assert(std::variant_size_v<Body> == static_cast<size_t>(w::Body::MAX));

template <typename T>
const std::vector<T>* OrNull(const std::vector<T>& v) {
  return &v;
}

Offset<w::Slice> EncodeSlice(FlatBufferBuilder& fbb, const Slice& s) {
  return w::CreateSliceDirect(fbb, s.var.c_str(), s.shard, s.all_rows ? nullptr : &s.rows);
}

std::vector<Offset<w::Slice>> EncodeSlices(FlatBufferBuilder& fbb,
                                           const std::vector<Slice>& items) {
  std::vector<Offset<w::Slice>> out;
  out.reserve(items.size());
  for (const auto& s : items) out.push_back(EncodeSlice(fbb, s));
  return out;
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const Body& body) {
  return std::visit(
      [&](const auto& m) -> Offset<void> {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, Hello>) {
          return w::CreateHelloDirect(fbb, m.version, static_cast<w::Role>(m.role), m.task_index,
                                      m.cluster_id, &m.nonce)
              .Union();
        } else if constexpr (std::is_same_v<M, HelloReply>) {
          const Hello& id = m.identity;
          return w::CreateHelloReplyDirect(fbb, id.version, static_cast<w::Role>(id.role),
                                           id.task_index, id.cluster_id, &id.nonce, &m.proof,
                                           m.secret_required)
              .Union();
        } else if constexpr (std::is_same_v<M, HelloProof>) {
          return w::CreateHelloProofDirect(fbb, &m.proof).Union();
        } else if constexpr (std::is_same_v<M, Error>) {
          return w::CreateErrorDirect(fbb, m.code, m.message.c_str()).Union();
        } else if constexpr (std::is_same_v<M, Ack>) {
          return w::CreateAck(fbb).Union();
        } else if constexpr (std::is_same_v<M, Ping>) {
          return w::CreatePing(fbb).Union();
        } else if constexpr (std::is_same_v<M, Shutdown>) {
          return w::CreateShutdownDirect(fbb, m.reason.c_str(), m.retryable).Union();
        } else if constexpr (std::is_same_v<M, CreateShards>) {
          return EncodeCreateShards(fbb, m).Union();
        } else if constexpr (std::is_same_v<M, Pull>) {
          auto items = EncodeSlices(fbb, m.items);
          return w::CreatePullDirect(fbb, &items, m.worker, m.clock).Union();
        } else if constexpr (std::is_same_v<M, PullReply>) {
          return w::CreatePullReplyDirect(fbb, &m.item_floats, &m.versions).Union();
        } else if constexpr (std::is_same_v<M, Push>) {
          auto items = EncodeSlices(fbb, m.items);
          flatbuffers::Offset<w::Pull> pull = 0;
          if (m.pull) {
            auto pull_items = EncodeSlices(fbb, m.pull->items);
            pull = w::CreatePullDirect(fbb, &pull_items, m.pull->worker, m.pull->clock);
          }
          return w::CreatePushDirect(fbb, &items, m.global_step, m.step_id, m.worker, m.clock,
                                     m.idle, pull)
              .Union();
        } else if constexpr (std::is_same_v<M, PushReply>) {
          flatbuffers::Offset<w::PullReply> pull = 0;
          if (m.pull) pull = w::CreatePullReplyDirect(fbb, &m.pull->item_floats, &m.pull->versions);
          return w::CreatePushReply(fbb, m.global_step, m.skipped, m.stale, pull).Union();
        } else if constexpr (std::is_same_v<M, StartJob>) {
          return w::CreateStartJobDirect(fbb, m.job_json.c_str(), m.worker_index, m.num_workers)
              .Union();
        } else if constexpr (std::is_same_v<M, RunSteps>) {
          flatbuffers::Offset<w::DataLease> lease = 0;
          if (m.lease) {
            const DataLease& l = *m.lease;
            lease =
                w::CreateDataLeaseDirect(fbb, l.seq, l.file.c_str(), l.begin, l.end, l.lines,
                                         l.base_byte, l.base_record, l.start, l.take, l.generation);
          }
          return w::CreateRunSteps(fbb, m.first_step, m.count, lease).Union();
        } else if constexpr (std::is_same_v<M, RunStepsReply>) {
          return w::CreateRunStepsReply(fbb, m.steps, m.examples, m.loss_sum, m.correct,
                                        m.data_seconds, m.pull_seconds, m.compute_seconds,
                                        m.push_seconds, m.stale, m.skipped_records, m.data_records,
                                        m.data_end_byte, m.data_end, m.data_total)
              .Union();
        } else if constexpr (std::is_same_v<M, Stop>) {
          return w::CreateStopDirect(fbb, m.reason.c_str()).Union();
        } else if constexpr (std::is_same_v<M, GetStatus>) {
          return w::CreateGetStatus(fbb).Union();
        } else if constexpr (std::is_same_v<M, PsStatusReply>) {
          return w::CreatePsStatusReply(fbb, internal::EncodePsStatus(fbb, m.status)).Union();
        } else if constexpr (std::is_same_v<M, ChiefStatusReply>) {
          return w::CreateChiefStatusReply(fbb, internal::EncodeChiefStatus(fbb, m.status)).Union();
        } else if constexpr (std::is_same_v<M, Save>) {
          return w::CreateSaveDirect(fbb, m.model_dir.c_str(), m.global_step, m.delta_base,
                                     m.delta_parent)
              .Union();
        } else if constexpr (std::is_same_v<M, SaveReply>) {
          return w::CreateSaveReplyDirect(fbb, m.file.c_str(), m.bytes, m.digest).Union();
        } else if constexpr (std::is_same_v<M, Restore>) {
          return w::CreateRestoreDirect(fbb, m.model_dir.c_str(), m.global_step).Union();
        } else if constexpr (std::is_same_v<M, EvaluateShard>) {
          return w::CreateEvaluateShard(fbb, m.step, m.shard, m.num_shards).Union();
        } else if constexpr (std::is_same_v<M, EvaluateShardReply>) {
          std::vector<Offset<w::HeadSums>> offsets;
          for (const HeadSums& h : m.heads) {
            offsets.push_back(w::CreateHeadSums(fbb, h.examples, h.loss_sum, h.correct, h.scores));
          }
          return w::CreateEvaluateShardReplyDirect(fbb, &offsets).Union();
        } else if constexpr (std::is_same_v<M, ReleasePulls>) {
          return w::CreateReleasePullsDirect(fbb, m.reason.c_str()).Union();
        } else {
          static_assert(!sizeof(M*), "message without an encoder");
        }
      },
      body);
}

template <typename T>
std::vector<T> Vec(const flatbuffers::Vector<T>* v) {
  return CopyVector(v);
}

Result<std::vector<Slice>> DecodeSlices(const flatbuffers::Vector<Offset<w::Slice>>* items) {
  std::vector<Slice> out;
  if (items == nullptr) return out;
  out.reserve(items->size());
  for (const w::Slice* s : *items) {
    if (s->var() == nullptr) return ProtocolError("Slice without a variable name");
    Slice slice;
    slice.var = s->var()->str();
    slice.shard = s->shard();
    slice.all_rows = s->rows() == nullptr;
    slice.rows = Vec(s->rows());
    out.push_back(std::move(slice));
  }
  return out;
}

Role DecodeRole(w::Role r) {
  auto v = static_cast<int8_t>(r);
  if (v < 0 || v > static_cast<int8_t>(Role::kClient)) return Role::kUnknown;
  return static_cast<Role>(v);
}

// The fields Hello and HelloReply share: a peer's identity.
template <typename Table>
Hello IdentityOf(const Table* m) {
  return Hello{.version = m->version(),
               .role = DecodeRole(m->role()),
               .task_index = m->task_index(),
               .cluster_id = m->cluster_id(),
               .nonce = Vec(m->nonce())};
}

Result<Body> DecodeBody(const w::Envelope* env) {
  // A union type with no table (the verifier lets that pass): every case below reads it.
  if (env->body_type() != w::Body::NONE && env->body() == nullptr) {
    return ProtocolError(std::string("envelope: a ") + w::EnumNameBody(env->body_type()) +
                         " body without its table");
  }
  switch (env->body_type()) {
    case w::Body::NONE:
      return ProtocolError("envelope has no body");
    case w::Body::Hello: {
      return Body(IdentityOf(env->body_as_Hello()));
    }
    case w::Body::HelloReply: {
      auto* m = env->body_as_HelloReply();
      return Body(HelloReply{.identity = IdentityOf(m),
                             .proof = Vec(m->proof()),
                             .secret_required = m->secret_required()});
    }
    case w::Body::HelloProof:
      return Body(HelloProof{Vec(env->body_as_HelloProof()->proof())});
    case w::Body::Error: {
      auto* m = env->body_as_Error();
      return Body(Error{m->code(), Str(m->message())});
    }
    case w::Body::Ack:
      return Body(Ack{});
    case w::Body::Ping:
      return Body(Ping{});
    case w::Body::Shutdown: {
      const auto* m = env->body_as_Shutdown();
      return Body(Shutdown{Str(m->reason()), m->retryable()});
    }
    case w::Body::CreateShards: {
      PS_ASSIGN_OR_RETURN(CreateShards m, DecodeCreateShards(*env->body_as_CreateShards()));
      return Body(std::move(m));
    }
    case w::Body::Pull: {
      auto* m = env->body_as_Pull();
      PS_ASSIGN_OR_RETURN(auto items, DecodeSlices(m->items()));
      return Body(Pull{std::move(items), m->worker(), m->clock()});
    }
    case w::Body::PullReply:
      return Body(PullReply{Vec(env->body_as_PullReply()->item_floats()),
                            Vec(env->body_as_PullReply()->versions())});
    case w::Body::Push: {
      auto* m = env->body_as_Push();
      PS_ASSIGN_OR_RETURN(auto items, DecodeSlices(m->items()));
      std::optional<Pull> pull;
      if (const auto* p = m->pull()) {
        PS_ASSIGN_OR_RETURN(auto pull_items, DecodeSlices(p->items()));
        pull = Pull{std::move(pull_items), p->worker(), p->clock()};
      }
      return Body(Push{std::move(items), m->global_step(), m->step_id(), m->worker(), m->clock(),
                       m->idle(), std::move(pull)});
    }
    case w::Body::PushReply: {
      auto* m = env->body_as_PushReply();
      std::optional<PullReply> pull;
      if (const auto* p = m->pull()) pull = PullReply{Vec(p->item_floats()), Vec(p->versions())};
      return Body(PushReply{m->global_step(), m->skipped(), m->stale(), std::move(pull)});
    }
    case w::Body::StartJob: {
      auto* m = env->body_as_StartJob();
      return Body(StartJob{Str(m->job_json()), m->worker_index(), m->num_workers()});
    }
    case w::Body::RunSteps: {
      auto* m = env->body_as_RunSteps();
      RunSteps out{m->first_step(), m->count()};
      if (const auto* l = m->lease()) {
        out.lease =
            DataLease{l->seq(),       Str(l->file()),   l->begin(), l->end(),  l->lines(),
                      l->base_byte(), l->base_record(), l->start(), l->take(), l->generation()};
      }
      return Body(std::move(out));
    }
    case w::Body::RunStepsReply: {
      auto* m = env->body_as_RunStepsReply();
      return Body(RunStepsReply{.steps = m->steps(),
                                .examples = m->examples(),
                                .loss_sum = m->loss_sum(),
                                .correct = m->correct(),
                                .data_seconds = m->data_seconds(),
                                .pull_seconds = m->pull_seconds(),
                                .compute_seconds = m->compute_seconds(),
                                .push_seconds = m->push_seconds(),
                                .stale = m->stale(),
                                .skipped_records = m->skipped_records(),
                                .data_records = m->data_records(),
                                .data_end_byte = m->data_end_byte(),
                                .data_end = m->data_end(),
                                .data_total = m->data_total()});
    }
    case w::Body::Stop:
      return Body(Stop{Str(env->body_as_Stop()->reason())});
    case w::Body::GetStatus:
      return Body(GetStatus{});
    case w::Body::PsStatusReply:
      return Body(PsStatusReply{internal::DecodePsStatus(env->body_as_PsStatusReply()->status())});
    case w::Body::ChiefStatusReply:
      return Body(
          ChiefStatusReply{internal::DecodeChiefStatus(env->body_as_ChiefStatusReply()->status())});
    case w::Body::Save: {
      auto* m = env->body_as_Save();
      return Body(Save{Str(m->model_dir()), m->global_step(), m->delta_base(), m->delta_parent()});
    }
    case w::Body::SaveReply: {
      auto* m = env->body_as_SaveReply();
      return Body(SaveReply{Str(m->file()), m->bytes(), m->digest()});
    }
    case w::Body::Restore: {
      auto* m = env->body_as_Restore();
      return Body(Restore{Str(m->model_dir()), m->global_step()});
    }
    case w::Body::EvaluateShard: {
      auto* m = env->body_as_EvaluateShard();
      if (m->num_shards() < 1 || m->shard() < 0 || m->shard() >= m->num_shards()) {
        return ProtocolError("EvaluateShard: shard " + std::to_string(m->shard()) + " of " +
                             std::to_string(m->num_shards()));
      }
      return Body(
          EvaluateShard{.step = m->step(), .shard = m->shard(), .num_shards = m->num_shards()});
    }
    case w::Body::EvaluateShardReply: {
      EvaluateShardReply r;
      if (const auto* heads = env->body_as_EvaluateShardReply()->heads()) {
        for (const w::HeadSums* h : *heads) {
          if (h->examples() < 0 || h->scores() < 0)
            return ProtocolError("EvaluateShardReply: negative count");
          r.heads.push_back({.examples = h->examples(),
                             .loss_sum = h->loss_sum(),
                             .correct = h->correct(),
                             .scores = h->scores()});
        }
      }
      return Body(std::move(r));
    }
    case w::Body::ReleasePulls:
      return Body(ReleasePulls{Str(env->body_as_ReleasePulls()->reason())});
  }
  return ProtocolError("unknown message type " +
                       std::to_string(static_cast<int>(env->body_type())));
}

}  // namespace

std::vector<uint8_t> Encode(const Envelope& env) {
  FlatBufferBuilder fbb(256);
  auto body = EncodeBody(fbb, env.body);
  auto type = static_cast<w::Body>(env.body.index() + 1);
  fbb.Finish(w::CreateEnvelope(fbb, env.request_id, env.reply, env.generation, type, body));
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

Result<Envelope> Decode(std::span<const uint8_t> bytes, const DecodeLimits& limits,
                        uint64_t* request_id) {
  if (bytes.size() < sizeof(flatbuffers::uoffset_t) * 2)
    return ProtocolError("envelope of " + std::to_string(bytes.size()) + " bytes is too short");
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), limits.max_depth, limits.max_tables);
  if (!w::VerifyEnvelopeBuffer(verifier)) return ProtocolError("envelope failed verification");
  const w::Envelope* env = w::GetEnvelope(bytes.data());
  Result<Body> body = DecodeBody(env);
  if (!body.ok()) {
    if (request_id != nullptr) *request_id = env->request_id();
    return body.status();
  }
  return Envelope{env->request_id(), env->reply(), env->generation(), std::move(*body)};
}

}  // namespace ps::proto
