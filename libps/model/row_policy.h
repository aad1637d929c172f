// The row life cycle of a lazy embedding table: admission and
// eviction, set per table in the model config next to "lazy" and enforced by the ps
// (libps/server/store.h, "Admission and eviction").
//
//   "admit": {"min_count": N}   int in [1, 255]: a row is created by the N-th push that
//                               names its id (pushes counted in a per-shard sketch);
//                               until then it pulls as its initial value and its
//                               gradients are dropped (and counted). 1 (the default): on the first push.
//   "evict": {"ttl_steps": T,   int >= 1: a row not pushed for more than T global steps
//             "max_rows": M}    is evicted; int >= 1: at most M rows of the table (split
//                               evenly over its shards, rounded up) are kept, the least
//                               recently pushed evicted first. At least one of the two.
// Both need "lazy": true; an evicted row pulls as its initial value again and is
// re-admitted like a new id.
#pragma once

#include <cstdint>
#include <string>

#include "libps/core/json.h"
#include "libps/core/status.h"

namespace ps::model {

inline constexpr int64_t kMaxAdmitCount = 255;  // the sketch's counters are 8 bits

struct RowPolicy {
  int64_t admit_min_count = 1;  // 1: a row is created on its first push
  int64_t ttl_steps = 0;        // 0: no ttl eviction
  int64_t max_rows = 0;         // 0: no bound; of the whole table
  bool admits() const { return admit_min_count > 1; }
  bool evicts() const { return ttl_steps > 0 || max_rows > 0; }
  bool any() const { return admits() || evicts(); }
  bool operator==(const RowPolicy&) const = default;
};

// Reads the optional keys "admit" and "evict" of `r` into *out (untouched when absent)
// and sets *given when either is there. `lazy`: the table's lazy flag; either key on a
// non-lazy table is InvalidArgument naming the key. Errors name the key's path.
Status ReadRowPolicy(JsonReader& r, bool lazy, RowPolicy* out, bool* given = nullptr);
// The range rules above; errors name `path` ("<path>.admit.min_count: ...").
Status ValidateRowPolicy(const RowPolicy& p, const std::string& path);
// {"admit": ..., "evict": ...} with only the keys in use ({} for the default).
Json RowPolicyToJson(const RowPolicy& p);

}  // namespace ps::model
