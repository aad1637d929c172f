// Variable initializers: how a variable's initial value is drawn. The model names one
// per variable (VariableDef::init); the chief sends it to the ps as a proto::Initializer
// (libps/server/wire_specs.h); the ps store fills its shards with FillInitial. This is the
// only implementation.
//
// Determinism independent of partitioning: the initial value of element (global_row, col)
// of variable `var` depends only on (seed, var, global_row, col). `col` is the flat index
// inside one row (a row is the product of full_shape[1:]). So one variable split into
// 1 or 5 shards, on any ps tasks, holds bit-identical values.
//
// The generator is counter-based: a SplitMix64 hash of (seed, FNV-1a(var), global_row,
// col, draw) gives the draw-th 64-bit random word of an element; no state is carried
// from element to element. The values follow the same distributions as TF's/Keras's
// initializers but are not bit-identical to theirs (different generator).
//
// JSON form (every key optional except "type"; Keras defaults), read by ParseInit and
// written by InitToJson:
//   {"type": "zeros"}
//   {"type": "ones"}
//   {"type": "constant", "value": 0.0}
//   {"type": "uniform", "minval": -0.05, "maxval": 0.05}          values in [minval, maxval)
//   {"type": "normal", "mean": 0.0, "stddev": 0.05}
//   {"type": "truncated_normal", "mean": 0.0, "stddev": 0.05}     resampled beyond 2 stddev
//   {"type": "glorot_uniform"}     uniform in [-limit, limit), limit = sqrt(6/(fan_in+fan_out))
// Fans follow Keras `_compute_fans`: rank 0 → (1, 1); rank 1 → (shape[0], shape[0]);
// rank 2 → (shape[0], shape[1]); rank ≥ 3 → receptive = prod(shape[:-2]),
// (shape[-2]*receptive, shape[-1]*receptive).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "libps/core/json.h"
#include "libps/core/status.h"

namespace ps::model {

enum class InitKind {
  kZeros,
  kOnes,
  kConstant,
  kUniform,
  kNormal,
  kTruncatedNormal,
  kGlorotUniform
};

// a, b by kind: constant (value, -), uniform (minval, maxval), normal and
// truncated_normal (mean, stddev); unused for zeros, ones, glorot_uniform.
struct InitSpec {
  InitKind kind = InitKind::kZeros;
  double a = 0.0;
  double b = 0.0;
  bool operator==(const InitSpec&) const = default;
};

const char* InitKindName(InitKind kind);

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer. The
// initializers, dropout masks and id hashing draw from it.
constexpr uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Strict: unknown keys, wrong types, minval > maxval, stddev < 0 are InvalidArgument
// naming "<path>.<key>".
Result<InitSpec> ParseInit(const Json& json, const std::string& path);
// Checks the invariants ParseInit checks, for specs built in code.
Status ValidateInit(const InitSpec& spec, const std::string& path);
// The JSON form above with every parameter of the kind written out (unused a, b are
// not). ParseInit(InitToJson(s)) == s for every valid s whose unused parameters are 0,
// as ParseInit leaves them; doubles are kept exactly (also through dump() and parse).
Json InitToJson(const InitSpec& spec);

// (fan_in, fan_out) of a variable of `full_shape`, as Keras computes them.
std::pair<double, double> ComputeFans(std::span<const int64_t> full_shape);

// Fills `out` [rows * cols] with the initial values of global rows
// [row_begin, row_begin + rows) of variable `var` whose full shape is `full_shape`.
// Precondition: out.size() == rows * cols; `spec` valid.
void FillInitial(const InitSpec& spec, uint64_t seed, std::string_view var,
                 std::span<const int64_t> full_shape, int64_t row_begin, int64_t rows, int64_t cols,
                 std::span<float> out);

// The value of one element; FillInitial is this applied to every element.
float InitialValue(const InitSpec& spec, uint64_t seed, std::string_view var,
                   std::span<const int64_t> full_shape, int64_t global_row, int64_t col);

}  // namespace ps::model
