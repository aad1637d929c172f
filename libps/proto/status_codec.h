// Internal to libps/proto: the status messages' FlatBuffers tables (codec.cc's part for
// PsStatusReply and ChiefStatusReply). Includes the generated header: never include this
// outside libps/proto.
#pragma once

#include "libps/proto/messages.h"
#include "libps/proto/pstrain_generated.h"

namespace ps::proto::internal {

flatbuffers::Offset<wire::PsStatus> EncodePsStatus(flatbuffers::FlatBufferBuilder& fbb,
                                                   const PsStatus& s);
flatbuffers::Offset<wire::ChiefStatus> EncodeChiefStatus(flatbuffers::FlatBufferBuilder& fbb,
                                                         const ChiefStatus& s);
// A verified table (nullptr: every field at its default).
PsStatus DecodePsStatus(const wire::PsStatus* t);
ChiefStatus DecodeChiefStatus(const wire::ChiefStatus* t);

}  // namespace ps::proto::internal
