// conv2d's direct kernels (conv_direct.h) against the im2col + sgemm path and a naive
// reference loop in double: forward values, kernel, bias and input gradients, for shapes
// around the kernels' edges (batch 1, 1..3 channels, filters not a multiple of 8 or over
// 32, same and valid padding, stride 2 and stride > kernel, 1 and 32 taps), with relu
// and without activation, with and without the input gradient. On a CPU without AVX2 +
// FMA only the im2col path runs (and a warning says so).
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "libps/model/conv_direct.h"
#include "test/unit/model/op_check.h"

using namespace ps::model;
using model_test::CompareArrays;
using model_test::OpHarness;

namespace {

struct Case {
  int64_t h, w, c, filters;
  int64_t kh, kw, sh, sw;
  bool same;
  int64_t batch;
};

std::string Describe(const Case& k) {
  return "in " + std::to_string(k.h) + "x" + std::to_string(k.w) + "x" + std::to_string(k.c) +
         " filters " + std::to_string(k.filters) + " k " + std::to_string(k.kh) + "x" +
         std::to_string(k.kw) + " s " + std::to_string(k.sh) + "x" + std::to_string(k.sw) +
         (k.same ? " same" : " valid") + " batch " + std::to_string(k.batch);
}

const std::vector<Case> kCases = {
    {28, 28, 1, 32, 3, 3, 1, 1, false, 2},  // the Fashion-MNIST CNN's first layer
    {9, 9, 1, 5, 3, 3, 1, 1, true, 1},      // batch 1, filters < 8, same
    {8, 7, 2, 12, 3, 3, 2, 2, true, 2},     // 2 channels, a partial filter group, stride 2
    {10, 10, 3, 12, 3, 3, 2, 2, false, 3},  // RGB, stride 2 leaving a row and column unread
    {11, 11, 3, 37, 2, 2, 3, 3, false,
     2},                                 // stride > kernel; a block of 32 filters + a partial one
    {7, 9, 2, 16, 4, 4, 1, 1, true, 2},  // 32 taps (the limit); same with an even kernel
    {6, 6, 1, 7, 1, 1, 1, 1, false, 2},  // 1 tap
    {9, 8, 1, 20, 3, 3, 1, 1, true, 2},  // 3 filter groups, the last partial
    {30, 30, 1, 64, 3, 3, 1, 1, false,
     1},                                 // two full blocks of 32 filters; several gradient chunks
    {5, 6, 3, 9, 3, 2, 3, 2, true, 1},   // non-square kernel and strides, same
    {6, 6, 4, 8, 3, 3, 1, 1, false, 2},  // 36 taps: the im2col path either way
};

// TensorFlow: out size and the padding before the first element.
void Out(int64_t in, int64_t k, int64_t s, bool same, int64_t* out, int64_t* pad) {
  if (same) {
    *out = (in + s - 1) / s;
    *pad = std::max<int64_t>((*out - 1) * s + k - in, 0) / 2;
  } else {
    *out = (in - k) / s + 1;
    *pad = 0;
  }
}

struct Results {
  std::vector<float> y, dkernel, dbias, dx;
};

// Builds the op (the direct path allowed or not), runs Forward and Backward with output
// gradient r; dx empty when not requested.
Results Run(const Case& k, const char* act, bool direct, bool input_grad,
            const std::vector<float>& r) {
  SetDirectConvAllowed(direct);
  const std::string cfg = R"({"filters":)" + std::to_string(k.filters) + R"(,"kernel_size":[)" +
                          std::to_string(k.kh) + "," + std::to_string(k.kw) + R"(],"strides":[)" +
                          std::to_string(k.sh) + "," + std::to_string(k.sw) + R"(],"padding":")" +
                          (k.same ? "same" : "valid") + R"(","activation":")" + act + "\"}";
  auto h = OpHarness::Make("conv2d", cfg, {{k.h, k.w, k.c}}, k.batch, 70);
  SetDirectConvAllowed(true);
  h->Pull();
  Results out;
  out.y = h->Forward();
  REQUIRE(out.y.size() == r.size());
  h->grads.values.assign(h->defs.size(), {});
  for (size_t v = 0; v < h->defs.size(); ++v) h->grads.values[v].assign(h->values[v].size(), 7.0f);
  std::vector<float> dout = r;
  std::vector<std::span<float>> din(1);
  if (input_grad) {
    out.dx.assign(h->inputs[0].size(), 0.0f);
    din[0] = out.dx;
  }
  h->op->Backward(h->Context(true), h->Ins(), dout, din);
  out.dkernel = h->grads.values[0];
  out.dbias = h->grads.values[1];
  return out;
}

// The naive reference in double, from the same inputs and variables as Run.
struct Reference {
  std::vector<double> y, dkernel, dbias, dx;
};

Reference Naive(const Case& k, bool relu, const std::vector<float>& r) {
  const std::string cfg = R"({"filters":)" + std::to_string(k.filters) + R"(,"kernel_size":[)" +
                          std::to_string(k.kh) + "," + std::to_string(k.kw) + R"(],"strides":[)" +
                          std::to_string(k.sh) + "," + std::to_string(k.sw) + R"(],"padding":")" +
                          (k.same ? "same" : "valid") + "\"}";
  auto h =
      OpHarness::Make("conv2d", cfg, {{k.h, k.w, k.c}}, k.batch, 70);  // the same values as Run's
  const std::vector<float>& x = h->inputs[0];
  const std::vector<float>& w = h->full[0];
  const std::vector<float>& b = h->full[1];
  const int64_t f = k.filters;
  int64_t oh, ow, ph, pw;
  Out(k.h, k.kh, k.sh, k.same, &oh, &ph);
  Out(k.w, k.kw, k.sw, k.same, &ow, &pw);
  Reference ref;
  ref.y.assign(static_cast<size_t>(k.batch * oh * ow * f), 0.0);
  ref.dkernel.assign(w.size(), 0.0);
  ref.dbias.assign(b.size(), 0.0);
  ref.dx.assign(x.size(), 0.0);
  // Calls fn(input index, kernel index without the filter) for each tap of a window inside the image.
  auto taps = [&](int64_t e, int64_t oy, int64_t ox, auto&& fn) {
    for (int64_t i = 0; i < k.kh; ++i) {
      for (int64_t j = 0; j < k.kw; ++j) {
        const int64_t iy = oy * k.sh - ph + i, ix = ox * k.sw - pw + j;
        if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
        for (int64_t c = 0; c < k.c; ++c)
          fn(((e * k.h + iy) * k.w + ix) * k.c + c, ((i * k.kw + j) * k.c + c) * f);
      }
    }
  };
  for (int64_t e = 0; e < k.batch; ++e) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        for (int64_t o = 0; o < f; ++o) {
          const size_t at = static_cast<size_t>(((e * oh + oy) * ow + ox) * f + o);
          double z = b[o];
          taps(e, oy, ox, [&](int64_t xi, int64_t wi) { z += double{x[xi]} * w[wi + o]; });
          ref.y[at] = relu ? std::max(z, 0.0) : z;
          const double d = relu && !(z > 0.0) ? 0.0 : r[at];
          ref.dbias[o] += d;
          taps(e, oy, ox, [&](int64_t xi, int64_t wi) {
            ref.dkernel[wi + o] += x[xi] * d;
            ref.dx[xi] += w[wi + o] * d;
          });
        }
      }
    }
  }
  return ref;
}

}  // namespace

TEST_CASE("conv2d direct kernels: forward and gradients against im2col + sgemm and a naive loop") {
  if (!DirectConvCpuSupported()) WARN("this CPU lacks AVX2 or FMA: only the im2col path is tested");
  for (const Case& k : kCases) {
    for (const char* act : {"relu", "linear"}) {
      for (bool input_grad : {false, true}) {
        INFO(Describe(k) << " " << act << (input_grad ? " with dx" : " without dx"));
        const bool relu = std::string(act) == "relu";
        int64_t oh, ow, ph, pw;
        Out(k.h, k.kh, k.sh, k.same, &oh, &ph);
        Out(k.w, k.kw, k.sw, k.same, &ow, &pw);
        std::vector<float> r(static_cast<size_t>(k.batch * oh * ow * k.filters));
        std::mt19937 rng(71);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : r) v = u(rng);
        const Reference ref = Naive(k, relu, r);
        for (bool direct : {false, true}) {
          INFO((direct ? "direct path allowed" : "im2col path"));
          const Results got = Run(k, act, direct, input_grad, r);
          CHECK(CompareArrays(got.y, ref.y, 1e-4) == 0);
          CHECK(CompareArrays(got.dkernel, ref.dkernel, 1e-4) == 0);
          CHECK(CompareArrays(got.dbias, ref.dbias, 1e-4) == 0);
          if (input_grad) CHECK(CompareArrays(got.dx, ref.dx, 1e-4) == 0);
        }
      }
    }
  }
}

TEST_CASE("conv2d direct kernels alone: one image, padding columns of the gradients untouched") {
  if (!DirectConvCpuSupported()) {
    WARN("this CPU lacks AVX2 or FMA: the direct kernels are not tested");
    return;
  }
  // 5x6x2 image, 2x3 kernel, stride 1 valid: 4x4 pixels, 12 taps; 11 filters (16 padded).
  const int64_t in_w = 6, c = 2, kh = 2, kw = 3, oh = 4, ow = 4, f = 11,
                fp = DirectConvPaddedFilters(f);
  REQUIRE(fp == 16);
  std::vector<int64_t> tap_off, pixel_off;
  for (int64_t i = 0; i < kh; ++i) {
    for (int64_t j = 0; j < kw; ++j) {
      for (int64_t ch = 0; ch < c; ++ch) tap_off.push_back((i * in_w + j) * c + ch);
    }
  }
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t x = 0; x < ow; ++x) pixel_off.push_back((y * in_w + x) * c);
  }
  const int64_t taps = kh * kw * c;
  const DirectConvShape s{taps, tap_off.data(), oh * ow, pixel_off.data(), f, fp};
  std::mt19937 rng(72);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> img(5 * 6 * 2), w(static_cast<size_t>(taps * fp), 0.0f),
      bias(static_cast<size_t>(fp), 0.0f);
  for (float& v : img) v = u(rng);
  for (int64_t t = 0; t < taps; ++t) {
    for (int64_t o = 0; o < f; ++o) w[t * fp + o] = u(rng);
  }
  for (int64_t o = 0; o < f; ++o) bias[o] = u(rng);
  std::vector<float> y(static_cast<size_t>(oh * ow * f) + 8,
                       99.0f);  // 8 guard floats past the output
  std::vector<uint8_t> mask(static_cast<size_t>(oh * ow * fp / 8));
  DirectConvForward(s, img.data(), w.data(), bias.data(), true, y.data(), mask.data());
  std::vector<float> dy(static_cast<size_t>(oh * ow * f)), d = dy;
  for (float& v : dy) v = u(rng);
  std::vector<double> want_y, want_dw(w.size(), 0.0), want_db(bias.size(), 0.0);
  for (int64_t p = 0; p < oh * ow; ++p) {
    for (int64_t o = 0; o < f; ++o) {
      double z = bias[o];
      for (int64_t t = 0; t < taps; ++t)
        z += double{img[pixel_off[p] + tap_off[t]]} * w[t * fp + o];
      want_y.push_back(std::max(z, 0.0));
      const double g = z > 0.0 ? dy[p * f + o] : 0.0;
      d[p * f + o] = static_cast<float>(g);
      want_db[o] += g;
      for (int64_t t = 0; t < taps; ++t) want_dw[t * fp + o] += img[pixel_off[p] + tap_off[t]] * g;
    }
  }
  for (int i = 0; i < 8; ++i) want_y.push_back(99.0);  // the guard is untouched
  CHECK(CompareArrays(y, want_y) == 0);
  // Gradients are added: start from 1, and the padding columns must stay 1.
  std::vector<float> dw(w.size(), 1.0f), db(bias.size(), 1.0f);
  for (double& v : want_dw) v += 1.0;
  for (double& v : want_db) v += 1.0;
  std::vector<float> scratch(static_cast<size_t>(DirectConvScratch(s)));
  std::vector<float> dy_kept = dy;
  DirectConvBackward(s, img.data(), mask.data(), dy_kept.data(), false, dw.data(), db.data(),
                     scratch.data());
  CHECK(dy_kept == dy);
  CHECK(CompareArrays(dw, want_dw, 1e-5) == 0);
  CHECK(CompareArrays(db, want_db, 1e-5) == 0);
  std::fill(dw.begin(), dw.end(), 1.0f);
  std::fill(db.begin(), db.end(), 1.0f);
  DirectConvBackward(s, img.data(), mask.data(), dy.data(), true, dw.data(), db.data(),
                     scratch.data());
  CHECK(dy == d);  // the masked gradient written back
  CHECK(CompareArrays(dw, want_dw, 1e-5) == 0);
}
