// conv2d forward+backward throughput against single-thread sgemm of the same shape, in
// one run. Not a test: run by scripts/bench-conv.sh.
//
//   bench_conv [--batch 128] [--seconds 2] [--im2col] [--layer HxWxC:FxK[:same|valid][:sS]]...
//
// A conv2d layer over a batch is three GEMMs of M = batch * out_h * out_w, K = k_h * k_w
// * c, N = filters (forward; kernel gradient; input gradient) plus im2col, col2im, bias
// and activation. Its useful work is 3 * 2*M*K*N flops (2*M*K*N without the input
// gradient, which a first layer does not need). The reference is cblas_sgemm (through
// libps/model/blas) on [M x K] · [K x N] with one BLAS thread: the ratio conv / sgemm says
// how much the layer's extra passes cost. The two are timed alternately over --seconds
// and each figure is its best call (a burst of load from other processes hits the worst
// calls, and both sides alike).
// The default layers are the Fashion-MNIST CNN's (configs/job-fmnist-cnn.json).
// --im2col keeps every layer on im2col + sgemm (no direct kernels, see conv_direct.h).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "libps/core/json.h"
#include "libps/model/blas.h"
#include "libps/model/conv_direct.h"
#include "libps/model/ops.h"
#include "test/bench/bench_util.h"

namespace {

using ps::bench::Clock;
using ps::bench::Die;
using ps::bench::Must;
using ps::bench::Seconds;
using namespace ps::model;

struct LayerSpec {
  int64_t h = 14, w = 14, c = 32, f = 64, k = 3, s = 1;
  bool same = true;
  bool input_grad = true;
};

LayerSpec ParseLayer(const std::string& text) {
  LayerSpec l;
  char pad[16] = "same";
  int n = std::sscanf(text.c_str(), "%ldx%ldx%ld:%ldx%ld:%15[a-z]:s%ld", &l.h, &l.w, &l.c, &l.f,
                      &l.k, pad, &l.s);
  if (n < 5) Die("--layer " + text + ": expected HxWxC:FxK[:same|valid][:sS]");
  l.same = std::string(pad) == "same";
  return l;
}

// Best seconds per call of a and of b, calling them alternately over `budget` seconds (at
// least 5 calls each), so that both see the same load.
template <typename A, typename B>
std::pair<double, double> BestOfAlternating(double budget, A&& a, B&& b) {
  double best_a = 1e30, best_b = 1e30;
  auto start = Clock::now();
  for (int i = 0; i < 5 || Seconds(start, Clock::now()) < budget; ++i) {
    auto t0 = Clock::now();
    a();
    auto t1 = Clock::now();
    b();
    best_a = std::min(best_a, Seconds(t0, t1));
    best_b = std::min(best_b, Seconds(t1, Clock::now()));
  }
  return {best_a, best_b};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 128;
  double budget = 2.0;
  std::vector<LayerSpec> layers;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--batch") {
      batch = std::stoll(ps::bench::FlagValue(argc, argv, &i));
    } else if (a == "--seconds") {
      budget = std::stod(ps::bench::FlagValue(argc, argv, &i));
    } else if (a == "--im2col") {
      SetDirectConvAllowed(false);
    } else if (a == "--layer") {
      layers.push_back(ParseLayer(ps::bench::FlagValue(argc, argv, &i)));
    } else {
      Die("unknown flag " + a);
    }
  }
  if (layers.empty()) {
    layers.push_back({28, 28, 1, 32, 3, 1, false, false});  // conv_0: no input gradient
    layers.push_back({13, 13, 32, 64, 3, 1, false, true});  // conv_1
    layers.push_back({14, 14, 32, 64, 3, 1, true, true});   // conv_1 with same padding
  }
  SetBlasThreads(1);
  std::printf("bench-conv: batch %ld, 1 BLAS thread, direct kernels %s, load %s\n",
              static_cast<long>(batch),
              !DirectConvAllowed()       ? "off"
              : DirectConvCpuSupported() ? "where K <= 32"
                                         : "unavailable (no AVX2+FMA)",
              ps::bench::LoadAverage().c_str());
  std::printf("%-26s %8s %6s %5s %10s %10s %10s %7s\n", "layer", "M", "K", "N", "conv ms",
              "conv GF/s", "sgemm GF/s", "ratio");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  double total_flop = 0, total_conv = 0, total_gemm = 0;  // flops; seconds
  for (const LayerSpec& l : layers) {
    ps::Json cfg = {{"filters", l.f},
                    {"kernel_size", l.k},
                    {"strides", l.s},
                    {"padding", l.same ? "same" : "valid"},
                    {"activation", "relu"}};
    ps::JsonReader r(cfg, "layer");
    VarSet vars;
    OpBuild b;
    b.config = &r;
    b.name = "conv";
    b.path = "layer";
    b.vars = &vars;
    b.in_shapes = {{l.h, l.w, l.c}};
    b.in_names = {"in"};
    b.in_sparse = {false};
    b.sparse = {SparseInput{}};
    auto op = Must(MakeOp("conv2d", b), "conv2d");
    const Shape out = op->shape();
    const int64_t m = batch * out[0] * out[1], k = l.k * l.k * l.c, n = l.f;
    std::vector<float> x(static_cast<size_t>(batch * l.h * l.w * l.c)), dx(x.size());
    for (float& v : x) v = u(rng);
    std::vector<std::vector<float>> values, grads(vars.defs().size());
    Params params;
    for (const VariableDef& d : vars.defs()) {
      values.emplace_back(static_cast<size_t>(d.num_elements()));
      for (float& v : values.back()) v = 0.1f * u(rng);
    }
    for (size_t v = 0; v < values.size(); ++v) {
      params.values.emplace_back(values[v]);
      params.rows.emplace_back();
      grads[v].resize(values[v].size());
    }
    Grads g{grads};
    Batch dummy;
    OpContext ctx{&dummy, &params, &g, batch, true, 0};
    std::vector<std::span<const float>> ins{x};
    std::vector<float> dout(static_cast<size_t>(batch * op->size()));
    for (float& v : dout) v = u(rng);
    // Backward turns its output gradient into the pre-activation gradient in place; the
    // relu mask applied again changes nothing, so dy is filled once, outside the timing.
    std::vector<float> dy = dout;
    std::vector<std::span<float>> dins{l.input_grad ? std::span<float>(dx) : std::span<float>()};
    std::vector<float> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(k * n)),
        c(static_cast<size_t>(m * n));
    for (float& v : a) v = u(rng);
    for (float& v : w) v = u(rng);
    const auto [conv, gemm] = BestOfAlternating(
        budget,
        [&] {
          Must(op->Forward(ctx, ins), "forward");
          op->Backward(ctx, ins, dy, dins);
        },
        [&] {
          Gemm(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, w.data(), n, 0.0f, c.data(), n);
        });
    const double flop =
        2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
    const double conv_gf = (l.input_grad ? 3 : 2) * flop / conv / 1e9, gemm_gf = flop / gemm / 1e9;
    char name[64];
    std::snprintf(name, sizeof name, "%ldx%ldx%ld -> %ld, %ldx%ld%s%s", static_cast<long>(l.h),
                  static_cast<long>(l.w), static_cast<long>(l.c), static_cast<long>(l.f),
                  static_cast<long>(l.k), static_cast<long>(l.k), l.same ? " same" : " valid",
                  l.input_grad ? "" : " (no dx)");
    std::printf("%-26s %8ld %6ld %5ld %10.2f %10.2f %10.2f %7.2f\n", name, static_cast<long>(m),
                static_cast<long>(k), static_cast<long>(n), conv * 1e3, conv_gf, gemm_gf,
                conv_gf / gemm_gf);
    // The whole model's conv layers: their flops over their time, against the same flops
    // at each layer's sgemm rate.
    total_flop += (l.input_grad ? 3 : 2) * flop;
    total_conv += conv;
    total_gemm += (l.input_grad ? 3 : 2) * gemm;
  }
  if (layers.size() > 1) {
    std::printf("%-26s %8s %6s %5s %10.2f %10.2f %10.2f %7.2f\n", "all layers", "", "", "",
                total_conv * 1e3, total_flop / total_conv / 1e9, total_flop / total_gemm / 1e9,
                total_gemm / total_conv);
  }
  return 0;
}
