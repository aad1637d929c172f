// CreateShards and its tables (ShardLayout, Initializer, Optimizer, Update) to and from
// FlatBuffers. Private to libps/proto: codec.cc calls it; it includes the generated header.
#pragma once

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "libps/core/status.h"
#include "libps/proto/messages.h"
#include "libps/proto/pstrain_generated.h"

namespace ps::proto {

flatbuffers::Offset<wire::CreateShards> EncodeCreateShards(flatbuffers::FlatBufferBuilder& fbb,
                                                           const CreateShards& msg);

// A verified vector of scalars, copied out. FlatBuffers 2.0's verifier checks a vector's
// alignment to 4 bytes only, so an 8-byte vector of a hostile buffer may be misaligned:
// copy its bytes (FlatBuffers is little-endian, as every host pstrain builds for).
template <typename T>
std::vector<T> CopyVector(const flatbuffers::Vector<T>* v) {
  static_assert(std::is_arithmetic_v<T> && FLATBUFFERS_LITTLEENDIAN, "scalars, little-endian host");
  if (v == nullptr) return {};
  std::vector<T> out(v->size());
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
  return out;
}

// A verified string, copied out; absent is empty.
inline std::string Str(const flatbuffers::String* s) {
  return s == nullptr ? std::string() : s->str();
}

// `msg` has passed the verifier. A missing required table, an unknown enum value or union
// type, or a layout that cluster::ValidateShardLayout rejects is ProtocolError naming the
// field ("CreateShards.shards[2]: w/part_2: shard 2 is outside [0, num_shards 2)").
Result<CreateShards> DecodeCreateShards(const wire::CreateShards& msg);

}  // namespace ps::proto
