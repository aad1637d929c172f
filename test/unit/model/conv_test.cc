// conv2d, max_pool2d and avg_pool2d alone: forward against direct loops (TensorFlow's
// padding rules), gradients against central differences, for several geometries
// including batch 1, stride > kernel, same padding and non-square windows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test/unit/model/op_check.h"

using namespace ps::model;
using model_test::CompareArrays;
using model_test::OpHarness;

namespace {

struct Geometry {
  int64_t h, w, c;  // input
  int64_t kh, kw, sh, sw;
  bool same;
  int64_t batch;
};

std::string Describe(const Geometry& g) {
  return "in " + std::to_string(g.h) + "x" + std::to_string(g.w) + "x" + std::to_string(g.c) +
         " k " + std::to_string(g.kh) + "x" + std::to_string(g.kw) + " s " + std::to_string(g.sh) +
         "x" + std::to_string(g.sw) + (g.same ? " same" : " valid") + " batch " +
         std::to_string(g.batch);
}

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

std::string Pair(int64_t a, int64_t b) {
  return "[" + std::to_string(a) + "," + std::to_string(b) + "]";
}

const std::vector<Geometry> kGeometries = {
    {5, 5, 2, 3, 3, 1, 1, false, 2},  // plain
    {5, 6, 2, 3, 3, 2, 2, true, 2},   // same, stride 2, odd sizes
    {7, 7, 1, 2, 2, 3, 3, false, 1},  // stride > kernel, batch 1
    {4, 4, 3, 2, 3, 1, 2, true, 2},   // non-square window and strides, same
    {3, 3, 2, 1, 1, 1, 1, false, 3},  // 1x1
    {6, 5, 1, 4, 4, 3, 2, true, 1},   // padding on both sides
};

}  // namespace

TEST_CASE("conv2d: forward against a direct convolution; gradients of input, kernel and bias") {
  for (const Geometry& g : kGeometries) {
    for (const char* act : {"linear", "relu"}) {
      INFO(Describe(g) << " " << act);
      const int64_t f = 3;
      const std::string cfg = R"({"filters":3,"kernel_size":)" + Pair(g.kh, g.kw) +
                              R"(,"strides":)" + Pair(g.sh, g.sw) + R"(,"padding":")" +
                              (g.same ? "same" : "valid") + R"(","activation":")" + act + "\"}";
      auto h = OpHarness::Make("conv2d", cfg, {{g.h, g.w, g.c}}, g.batch, 50);
      int64_t oh, ow, ph, pw;
      Out(g.h, g.kh, g.sh, g.same, &oh, &ph);
      Out(g.w, g.kw, g.sw, g.same, &ow, &pw);
      REQUIRE(h->op->shape() == Shape{oh, ow, f});
      REQUIRE(h->defs[0].shape == std::vector<int64_t>{g.kh, g.kw, g.c, f});
      h->Pull();
      std::vector<double> want;
      for (int64_t e = 0; e < g.batch; ++e) {
        for (int64_t y = 0; y < oh; ++y) {
          for (int64_t x = 0; x < ow; ++x) {
            for (int64_t o = 0; o < f; ++o) {
              double s = h->full[1][o];
              for (int64_t i = 0; i < g.kh; ++i) {
                for (int64_t j = 0; j < g.kw; ++j) {
                  const int64_t iy = y * g.sh - ph + i, ix = x * g.sw - pw + j;
                  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                  for (int64_t c = 0; c < g.c; ++c) {
                    s += double{h->inputs[0][((e * g.h + iy) * g.w + ix) * g.c + c]} *
                         h->full[0][((i * g.kw + j) * g.c + c) * f + o];
                  }
                }
              }
              want.push_back(std::string(act) == "relu" ? std::max(s, 0.0) : s);
            }
          }
        }
      }
      CHECK(CompareArrays(h->Forward(), want) == 0);
      CHECK(h->CheckGradients(51) == 0);
    }
  }
}

TEST_CASE(
    "max_pool2d and avg_pool2d: forward against direct loops (padding excluded from averages); gradients") {
  for (const Geometry& g : kGeometries) {
    for (bool max : {true, false}) {
      INFO(Describe(g) << (max ? " max" : " avg"));
      const std::string cfg = R"({"pool_size":)" + Pair(g.kh, g.kw) + R"(,"strides":)" +
                              Pair(g.sh, g.sw) + R"(,"padding":")" + (g.same ? "same" : "valid") +
                              "\"}";
      auto h =
          OpHarness::Make(max ? "max_pool2d" : "avg_pool2d", cfg, {{g.h, g.w, g.c}}, g.batch, 60);
      // Distinct values 0.01 apart: a perturbation of 1e-3 never changes which is largest.
      std::vector<float>& in = h->inputs[0];
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.01f - 1.0f;
      std::shuffle(in.begin(), in.end(), std::mt19937(61));
      int64_t oh, ow, ph, pw;
      Out(g.h, g.kh, g.sh, g.same, &oh, &ph);
      Out(g.w, g.kw, g.sw, g.same, &ow, &pw);
      REQUIRE(h->op->shape() == Shape{oh, ow, g.c});
      std::vector<double> want;
      for (int64_t e = 0; e < g.batch; ++e) {
        for (int64_t y = 0; y < oh; ++y) {
          for (int64_t x = 0; x < ow; ++x) {
            for (int64_t c = 0; c < g.c; ++c) {
              double best = -std::numeric_limits<double>::infinity(), sum = 0;
              int count = 0;
              for (int64_t i = 0; i < g.kh; ++i) {
                for (int64_t j = 0; j < g.kw; ++j) {
                  const int64_t iy = y * g.sh - ph + i, ix = x * g.sw - pw + j;
                  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                  const double v = in[((e * g.h + iy) * g.w + ix) * g.c + c];
                  best = std::max(best, v);
                  sum += v;
                  ++count;
                }
              }
              want.push_back(max ? best : sum / count);
            }
          }
        }
      }
      CHECK(CompareArrays(h->Forward(), want) == 0);
      CHECK(h->CheckGradients(62) == 0);
    }
  }
  SECTION("pool strides default to the pool size") {
    auto h = OpHarness::Make("max_pool2d", "{}", {{6, 4, 1}}, 1, 63);
    CHECK(h->op->shape() == Shape{3, 2, 1});
  }
}
