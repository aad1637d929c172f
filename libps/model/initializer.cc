#include "libps/model/initializer.h"
#include "libps/core/text.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ps::model {
namespace {

constexpr uint64_t Mix(uint64_t z) { return SplitMix64(z); }

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ULL;
  }
  return h;
}

// The random words of one element: Word(k) is its k-th draw.
struct ElementStream {
  uint64_t key;
  uint64_t Word(uint64_t k) const { return Mix(key + k * 0xD1B54A32D192ED03ULL); }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform(uint64_t k) const { return static_cast<double>(Word(k) >> 11) * 0x1.0p-53; }
  // Standard normal by Box-Muller from draws k and k+1.
  double Normal(uint64_t k) const {
    double u1 = 1.0 - Uniform(k);  // (0, 1]
    double u2 = Uniform(k + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
};

struct Context {
  InitSpec spec;
  uint64_t var_key;  // Mix(seed ^ Mix(FNV-1a(var)))
  double glorot_limit = 0.0;

  Context(const InitSpec& s, uint64_t seed, std::string_view var,
          std::span<const int64_t> full_shape)
      : spec(s), var_key(Mix(seed ^ Mix(Fnv1a(var)))) {
    if (spec.kind == InitKind::kGlorotUniform) {
      auto [fan_in, fan_out] = ComputeFans(full_shape);
      glorot_limit = std::sqrt(6.0 / std::max(1.0, fan_in + fan_out));
    }
  }

  float Value(int64_t global_row, int64_t col) const {
    ElementStream s{
        Mix(Mix(var_key ^ static_cast<uint64_t>(global_row)) ^ static_cast<uint64_t>(col))};
    switch (spec.kind) {
      case InitKind::kZeros:
        return 0.0f;
      case InitKind::kOnes:
        return 1.0f;
      case InitKind::kConstant:
        return static_cast<float>(spec.a);
      case InitKind::kUniform:
        return static_cast<float>(spec.a + (spec.b - spec.a) * s.Uniform(0));
      case InitKind::kNormal:
        return static_cast<float>(spec.a + spec.b * s.Normal(0));
      case InitKind::kTruncatedNormal: {
        // Resample beyond 2 stddev, as tf.random.truncated_normal does. P(reject) ≈ 0.0455,
        // so 64 attempts fail with probability ~1e-86; then the mean is used.
        for (uint64_t k = 0; k < 128; k += 2) {
          double z = s.Normal(k);
          if (std::fabs(z) <= 2.0) return static_cast<float>(spec.a + spec.b * z);
        }
        return static_cast<float>(spec.a);
      }
      case InitKind::kGlorotUniform:
        return static_cast<float>(glorot_limit * (2.0 * s.Uniform(0) - 1.0));
    }
    return 0.0f;
  }
};

}  // namespace

const char* InitKindName(InitKind kind) {
  switch (kind) {
    case InitKind::kZeros:
      return "zeros";
    case InitKind::kOnes:
      return "ones";
    case InitKind::kConstant:
      return "constant";
    case InitKind::kUniform:
      return "uniform";
    case InitKind::kNormal:
      return "normal";
    case InitKind::kTruncatedNormal:
      return "truncated_normal";
    case InitKind::kGlorotUniform:
      return "glorot_uniform";
  }
  return "?";
}

Status ValidateInit(const InitSpec& spec, const std::string& path) {
  auto finite = [](double x) { return std::isfinite(x); };
  switch (spec.kind) {
    case InitKind::kConstant:
      if (!finite(spec.a)) return InvalidArgument(path + ".value: must be finite");
      break;
    case InitKind::kUniform:
      if (!finite(spec.a) || !finite(spec.b))
        return InvalidArgument(path + ".minval: minval and maxval must be finite");
      if (spec.a > spec.b)
        return InvalidArgument(path + ".maxval: must be >= minval (" + std::to_string(spec.a) +
                               "), got " + std::to_string(spec.b));
      break;
    case InitKind::kNormal:
    case InitKind::kTruncatedNormal:
      if (!finite(spec.a)) return InvalidArgument(path + ".mean: must be finite");
      if (!finite(spec.b) || spec.b < 0)
        return InvalidArgument(path + ".stddev: must be finite and >= 0, got " +
                               std::to_string(spec.b));
      break;
    default:
      break;
  }
  return Status::Ok();
}

Result<InitSpec> ParseInit(const Json& json, const std::string& path) {
  JsonReader r(json, path);
  PS_RETURN_IF_ERROR(r.status());
  std::string type;
  PS_RETURN_IF_ERROR(r.Get("type", &type));
  InitSpec spec;
  if (type == "zeros") {
    spec.kind = InitKind::kZeros;
  } else if (type == "ones") {
    spec.kind = InitKind::kOnes;
  } else if (type == "constant") {
    spec.kind = InitKind::kConstant;
    PS_RETURN_IF_ERROR(r.GetOr("value", &spec.a));
  } else if (type == "uniform") {
    spec = {InitKind::kUniform, -0.05, 0.05};
    PS_RETURN_IF_ERROR(r.GetOr("minval", &spec.a));
    PS_RETURN_IF_ERROR(r.GetOr("maxval", &spec.b));
  } else if (type == "normal" || type == "truncated_normal") {
    spec = {type == "normal" ? InitKind::kNormal : InitKind::kTruncatedNormal, 0.0, 0.05};
    PS_RETURN_IF_ERROR(r.GetOr("mean", &spec.a));
    PS_RETURN_IF_ERROR(r.GetOr("stddev", &spec.b));
  } else if (type == "glorot_uniform") {
    spec.kind = InitKind::kGlorotUniform;
  } else {
    return InvalidArgument(r.Path("type") + ": unknown initializer " + QuoteInput(type, '"') +
                           " (expected zeros, ones, constant, uniform, normal, "
                           "truncated_normal or glorot_uniform)");
  }
  PS_RETURN_IF_ERROR(r.Finish());
  PS_RETURN_IF_ERROR(ValidateInit(spec, path));
  return spec;
}

Json InitToJson(const InitSpec& spec) {
  Json j = Json::object();
  j["type"] = InitKindName(spec.kind);
  switch (spec.kind) {
    case InitKind::kZeros:
    case InitKind::kOnes:
    case InitKind::kGlorotUniform:
      break;
    case InitKind::kConstant:
      j["value"] = spec.a;
      break;
    case InitKind::kUniform:
      j["minval"] = spec.a;
      j["maxval"] = spec.b;
      break;
    case InitKind::kNormal:
    case InitKind::kTruncatedNormal:
      j["mean"] = spec.a;
      j["stddev"] = spec.b;
      break;
  }
  return j;
}

std::pair<double, double> ComputeFans(std::span<const int64_t> shape) {
  if (shape.empty()) return {1.0, 1.0};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  if (shape.size() == 2) return {double(shape[0]), double(shape[1])};
  double receptive = 1.0;
  for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= double(shape[i]);
  return {double(shape[shape.size() - 2]) * receptive, double(shape.back()) * receptive};
}

void FillInitial(const InitSpec& spec, uint64_t seed, std::string_view var,
                 std::span<const int64_t> full_shape, int64_t row_begin, int64_t rows, int64_t cols,
                 std::span<float> out) {
  PS_ASSERT(out.size() == static_cast<size_t>(rows * cols));
  if (spec.kind == InitKind::kZeros || spec.kind == InitKind::kOnes ||
      spec.kind == InitKind::kConstant) {
    float v = spec.kind == InitKind::kZeros  ? 0.0f
              : spec.kind == InitKind::kOnes ? 1.0f
                                             : static_cast<float>(spec.a);
    std::fill(out.begin(), out.end(), v);
    return;
  }
  Context ctx(spec, seed, var, full_shape);
  float* p = out.data();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) *p++ = ctx.Value(row_begin + r, c);
  }
}

float InitialValue(const InitSpec& spec, uint64_t seed, std::string_view var,
                   std::span<const int64_t> full_shape, int64_t global_row, int64_t col) {
  return Context(spec, seed, var, full_shape).Value(global_row, col);
}

}  // namespace ps::model
