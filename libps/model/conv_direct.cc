// The direct conv2d kernels (conv_direct.h). Every function that uses AVX2 or FMA
// intrinsics carries [[gnu::target("avx2,fma")]]; nothing here runs on a CPU without them
// unless the caller skipped DirectConvCpuSupported().
//
// Register tiling (16 ymm registers, no AVX-512):
// - Forward: a tile of P output pixels x G groups of 8 filters stays in P*G accumulators
//   over all taps; per tap, G kernel loads and P broadcasts of an input value. Bias in
//   the initial value, the activation on the way out: each output is stored once. With
//   relu, one bit per output records z > 0, so that the backward pass reads 1/32 of what
//   reading y back would.
// - Kernel gradient: a block of T taps x G filter groups stays in T*G accumulators over a
//   chunk of pixels; per pixel, G loads of the masked output gradient and T broadcasts.
//   The masked gradient of the chunk is computed once into scratch (L1-sized) and the
//   accumulators go back to dw at the end of each chunk, so no store feeds the next load.
// The accumulators are arrays indexed by template-bounded loops; `#pragma GCC unroll`
// makes GCC 12 unroll those loops before its scalar replacement, which then keeps the
// arrays in registers (without it they stay on the stack: a store per FMA row, 2.5x slower).
#include "libps/model/conv_direct.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>

namespace ps::model {
namespace {

std::atomic<bool> g_allowed{true};

// Pixels per backward chunk: the masked gradient [chunk * padded_filters] stays within
// about 8 KiB.
int64_t ChunkPixels(int64_t padded_filters) { return std::max<int64_t>(4, 2048 / padded_filters); }

// The first n (1..8) lanes set.
[[gnu::target("avx2,fma")]] __m256i LaneMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Output pixels px[0..P) x filter groups [0, G) of a block: y rows are ldy apart; w rows
// ldw apart (w, bias and y point at the block's first filter). The last group stores only
// the lanes of `tail` when partial. relu: the tile's z > 0 bits go to mask, a byte per
// pixel and group, rows ldm apart.
template <int P, int G>
[[gnu::target("avx2,fma")]] void ForwardTile(const float* const* px, const int64_t* tap_off,
                                             int64_t taps, const float* w, int64_t ldw,
                                             const float* bias, bool relu, bool partial,
                                             __m256i tail, float* y, int64_t ldy, uint8_t* mask,
                                             int64_t ldm) {
  __m256 acc[P][G];
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
    const __m256 b = _mm256_loadu_ps(bias + std::ptrdiff_t{8} * g);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[p][g] = b;
  }
  for (int64_t t = 0; t < taps; ++t) {
    const int64_t o = tap_off[t];
    __m256 wv[G];
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) wv[g] = _mm256_loadu_ps(w + t * ldw + std::ptrdiff_t{8} * g);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      const __m256 x = _mm256_broadcast_ss(px[p] + o);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) acc[p][g] = _mm256_fmadd_ps(x, wv[g], acc[p][g]);
    }
  }
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      // max(z, 0) returns 0 for a NaN z, as the scalar z > 0 ? z : 0 does.
      const __m256 v = relu ? _mm256_max_ps(acc[p][g], zero) : acc[p][g];
      if (relu) {
        const int bits = _mm256_movemask_ps(_mm256_cmp_ps(acc[p][g], zero, _CMP_GT_OQ));
        mask[p * ldm + g] = static_cast<uint8_t>(bits);
      }
      float* out = y + p * ldy + std::ptrdiff_t{8} * g;
      if (g == G - 1 && partial) {
        _mm256_maskstore_ps(out, tail, v);
      } else {
        _mm256_storeu_ps(out, v);
      }
    }
  }
}

// All pixels of one image for filter groups [g0, g0 + G).
template <int G>
[[gnu::target("avx2,fma")]] void ForwardBlock(const DirectConvShape& s, const float* img,
                                              const float* w, const float* bias, bool relu,
                                              int64_t g0, float* y, uint8_t* mask) {
  constexpr int P = G >= 3 ? 2 : 4;  // P*G accumulators + G kernel rows + a broadcast <= 16
  const bool partial = g0 + G == s.padded_filters / 8 && s.filters < s.padded_filters;
  const __m256i tail = LaneMask(s.filters - (s.padded_filters - 8));
  const float* wb = w + 8 * g0;
  const float* bb = bias + 8 * g0;
  float* yb = y + 8 * g0;
  const int64_t groups = s.padded_filters / 8;
  uint8_t* mb = relu ? mask + g0 : nullptr;
  int64_t p0 = 0;
  for (; p0 + P <= s.pixels; p0 += P) {
    const float* px[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) px[p] = img + s.pixel_off[p0 + p];
    ForwardTile<P, G>(px, s.tap_off, s.taps, wb, s.padded_filters, bb, relu, partial, tail,
                      yb + p0 * s.filters, s.filters, relu ? mb + p0 * groups : nullptr, groups);
  }
  for (; p0 < s.pixels; ++p0) {
    const float* px[1] = {img + s.pixel_off[p0]};
    ForwardTile<1, G>(px, s.tap_off, s.taps, wb, s.padded_filters, bb, relu, partial, tail,
                      yb + p0 * s.filters, s.filters, relu ? mb + p0 * groups : nullptr, groups);
  }
}

// dw[t][g] += Σ_p x_p[tap_off[t]] * d[p][g] for taps [0, T) x groups [0, G) over n pixels;
// d rows ldd apart, dw rows ldw apart (tap_off, d and dw point at the block's first tap
// and filter).
template <int T, int G>
[[gnu::target("avx2,fma")]] void GradTile(const float* const* px, int64_t n, const int64_t* tap_off,
                                          const float* d, int64_t ldd, float* dw, int64_t ldw) {
  __m256 acc[T][G];
  int64_t off[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    off[t] = tap_off[t];
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) acc[t][g] = _mm256_loadu_ps(dw + t * ldw + std::ptrdiff_t{8} * g);
  }
  for (int64_t p = 0; p < n; ++p) {
    __m256 dv[G];
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) dv[g] = _mm256_loadu_ps(d + p * ldd + std::ptrdiff_t{8} * g);
    const float* x = px[p];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_broadcast_ss(x + off[t]);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) acc[t][g] = _mm256_fmadd_ps(xv, dv[g], acc[t][g]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(dw + t * ldw + std::ptrdiff_t{8} * g, acc[t][g]);
  }
}

// The taps of n pixels for filter groups [0, G), T of them at a time where T is at most
// 6 with G = 2 (12 accumulators + 2 gradient rows + a broadcast) or 12 with G = 1; a
// smaller last block from T = 1 up.
template <int G, int T = 1>
[[gnu::target("avx2,fma")]] void GradBlock(const float* const* px, int64_t n,
                                           const int64_t* tap_off, int64_t taps, const float* d,
                                           int64_t ldd, float* dw, int64_t ldw) {
  constexpr int kMaxT = G == 2 ? 6 : 12;
  if constexpr (T < kMaxT) {
    if (taps > T) {
      GradBlock<G, T + 1>(px, n, tap_off, taps, d, ldd, dw, ldw);
      return;
    }
    GradTile<T, G>(px, n, tap_off, d, ldd, dw, ldw);
  } else {
    for (int64_t t0 = 0; t0 < taps; t0 += kMaxT) {
      if (taps - t0 < kMaxT) {
        GradBlock<G>(px, n, tap_off + t0, taps - t0, d, ldd, dw + t0 * ldw, ldw);
      } else {
        GradTile<kMaxT, G>(px, n, tap_off + t0, d, ldd, dw + t0 * ldw, ldw);
      }
    }
  }
}

}  // namespace

bool DirectConvCpuSupported() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}

void SetDirectConvAllowed(bool allowed) { g_allowed.store(allowed, std::memory_order_relaxed); }
bool DirectConvAllowed() { return g_allowed.load(std::memory_order_relaxed); }

int64_t DirectConvScratch(const DirectConvShape& s) {
  return ChunkPixels(s.padded_filters) * s.padded_filters;
}

[[gnu::target("avx2,fma")]] void DirectConvForward(const DirectConvShape& s, const float* img,
                                                   const float* w, const float* bias, bool relu,
                                                   float* y, uint8_t* mask) {
  const int64_t groups = s.padded_filters / 8;
  for (int64_t g0 = 0; g0 < groups; g0 += 4) {
    switch (std::min<int64_t>(4, groups - g0)) {
      case 1:
        ForwardBlock<1>(s, img, w, bias, relu, g0, y, mask);
        break;
      case 2:
        ForwardBlock<2>(s, img, w, bias, relu, g0, y, mask);
        break;
      case 3:
        ForwardBlock<3>(s, img, w, bias, relu, g0, y, mask);
        break;
      default:
        ForwardBlock<4>(s, img, w, bias, relu, g0, y, mask);
        break;
    }
  }
}

[[gnu::target("avx2,fma")]] void DirectConvBackward(const DirectConvShape& s, const float* img,
                                                    const uint8_t* mask, float* dy, bool write_d,
                                                    float* dw, float* db, float* scratch) {
  const int64_t f = s.filters, ldd = s.padded_filters, groups = ldd / 8;
  const int64_t chunk = ChunkPixels(ldd);
  const __m256i tail = LaneMask(f - (ldd - 8));
  const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  constexpr int64_t kMaxChunk = 2048 / 8;
  const float* px[kMaxChunk];
  for (int64_t p0 = 0; p0 < s.pixels; p0 += chunk) {
    const int64_t n = std::min(chunk, s.pixels - p0);
    // The chunk's masked gradient into scratch [n * ldd] (zeros past f), its column sums
    // into db.
    for (int64_t g = 0; g < groups; ++g) {
      const bool partial = g == groups - 1 && f < ldd;
      __m256 sum = _mm256_loadu_ps(db + 8 * g);
      for (int64_t p = 0; p < n; ++p) {
        const int64_t at = (p0 + p) * f + 8 * g;
        // vmaskmov only for a partial last group: its stores are slow on some CPUs.
        __m256 d = partial ? _mm256_maskload_ps(dy + at, tail) : _mm256_loadu_ps(dy + at);
        if (mask != nullptr) {
          const __m256i m = _mm256_and_si256(_mm256_set1_epi32(mask[(p0 + p) * groups + g]), bits);
          d = _mm256_and_ps(d, _mm256_castsi256_ps(_mm256_cmpeq_epi32(m, bits)));
        }
        if (write_d) {
          if (partial) {
            _mm256_maskstore_ps(dy + at, tail, d);
          } else {
            _mm256_storeu_ps(dy + at, d);
          }
        }
        _mm256_storeu_ps(scratch + p * ldd + 8 * g, d);
        sum = _mm256_add_ps(sum, d);
      }
      _mm256_storeu_ps(db + 8 * g, sum);
    }
    for (int64_t p = 0; p < n; ++p) px[p] = img + s.pixel_off[p0 + p];
    int64_t g0 = 0;
    for (; g0 + 2 <= groups; g0 += 2)
      GradBlock<2>(px, n, s.tap_off, s.taps, scratch + 8 * g0, ldd, dw + 8 * g0, ldd);
    if (g0 < groups)
      GradBlock<1>(px, n, s.tap_off, s.taps, scratch + 8 * g0, ldd, dw + 8 * g0, ldd);
  }
}

}  // namespace ps::model
