// Every non-vision layer of the graph, alone: forward values against a naive reference
// loop, gradients (inputs and variables) against central differences.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "test/unit/model/op_check.h"

using namespace ps::model;
using model_test::CompareArrays;
using model_test::OpHarness;

namespace {

double Act(const std::string& a, double z) {
  if (a == "relu") return z > 0 ? z : 0;
  if (a == "tanh") return std::tanh(z);
  if (a == "sigmoid") return 1 / (1 + std::exp(-z));
  if (a == "gelu") return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
  return z;
}

// Batch with `fields` sparse fields over vocab ids; example 0 of field 0 has no ids.
Batch SparseBatch(int64_t size, int fields, int64_t vocab, uint32_t seed, bool weights) {
  std::mt19937 rng(seed);
  Batch b;
  b.size = size;
  for (int f = 0; f < fields; ++f) {
    SparseField s;
    s.offsets.push_back(0);
    for (int64_t i = 0; i < size; ++i) {
      const int n = (f == 0 && i == 0) ? 0 : 1 + static_cast<int>(rng() % 3);
      for (int j = 0; j < n; ++j) {
        s.ids.push_back(static_cast<int64_t>(rng() % static_cast<uint32_t>(vocab)));
        if (weights) s.values.push_back(0.5f + static_cast<float>(rng() % 100) / 100.0f);
      }
      s.offsets.push_back(static_cast<int64_t>(s.ids.size()));
    }
    b.sparse.push_back(std::move(s));
  }
  return b;
}

}  // namespace

TEST_CASE("dense: forward against x·W + b with every activation; gradients") {
  for (const char* act : {"linear", "relu", "tanh", "sigmoid", "gelu"}) {
    for (int64_t batch : {1, 4}) {
      INFO(act << " batch " << batch);
      auto h = OpHarness::Make("dense", std::string(R"({"units":3,"activation":")") + act + "\"}",
                               {{2, 3}}, batch, 1);
      h->Pull();
      std::vector<double> want;
      for (int64_t e = 0; e < batch; ++e) {
        for (int u = 0; u < 3; ++u) {
          double z = h->full[1][u];
          for (int k = 0; k < 6; ++k) z += double{h->inputs[0][e * 6 + k]} * h->full[0][k * 3 + u];
          want.push_back(Act(act, z));
        }
      }
      CHECK(CompareArrays(h->Forward(), want) == 0);
      CHECK(h->CheckGradients(2) == 0);
    }
  }
}

TEST_CASE("activation layer: forward and gradients for every function") {
  for (const char* act : {"linear", "relu", "tanh", "sigmoid", "gelu"}) {
    INFO(act);
    auto h = OpHarness::Make("activation", std::string(R"({"activation":")") + act + "\"}",
                             {{2, 3}}, 3, 3);
    std::vector<double> want;
    for (float x : h->inputs[0]) want.push_back(Act(act, x));
    CHECK(CompareArrays(h->Forward(), want) == 0);
    if (std::string(act) != "linear") CHECK(h->CheckGradients(4) == 0);
  }
}

TEST_CASE("dropout: training masks are seeded per step and scaled; identity outside training") {
  auto h = OpHarness::Make("dropout", R"({"rate":0.25,"seed":9})", {{1000}}, 4, 5);
  std::vector<float> a = h->Forward();
  int dropped = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == 0.0f) {
      ++dropped;
    } else {
      CHECK(a[i] == Approx(h->inputs[0][i] / 0.75f));
    }
  }
  CHECK(dropped > 900);  // 4000 * 0.25 = 1000 expected
  CHECK(dropped < 1100);
  CHECK(h->Forward() == a);  // same step, same mask
  h->step = 1;
  CHECK(h->Forward() != a);
  CHECK(h->CheckGradients(6) == 0);
  h->training = false;
  CHECK(h->Forward() == h->inputs[0]);
  auto h2 = OpHarness::Make("dropout", R"({"rate":0.5})", {{3}}, 2, 5);
  h2->training = false;
  CHECK(h2->CheckGradients(7) == 0);
}

TEST_CASE("layer_norm: forward against the definition over the last axis; gradients") {
  for (int64_t batch : {1, 3}) {
    auto h = OpHarness::Make("layer_norm", R"({"epsilon":0.01})", {{2, 5}}, batch, 8);
    h->Pull();
    std::vector<double> want;
    for (int64_t r = 0; r < batch * 2; ++r) {
      const float* x = h->inputs[0].data() + r * 5;
      double mean = 0, var = 0;
      for (int k = 0; k < 5; ++k) mean += x[k] / 5.0;
      for (int k = 0; k < 5; ++k) var += (x[k] - mean) * (x[k] - mean) / 5.0;
      for (int k = 0; k < 5; ++k)
        want.push_back(h->full[0][k] * (x[k] - mean) / std::sqrt(var + 0.01) + h->full[1][k]);
    }
    CHECK(CompareArrays(h->Forward(), want) == 0);
    CHECK(h->CheckGradients(9) == 0);
  }
}

TEST_CASE("concat, add, multiply, reshape, flatten: forward and gradients") {
  SECTION("concat") {
    auto h = OpHarness::Make("concat", "{}", {{3}, {2, 2}}, 2, 10);
    CHECK(h->op->shape() == Shape{7});
    std::vector<double> want;
    for (int e = 0; e < 2; ++e) {
      for (int k = 0; k < 3; ++k) want.push_back(h->inputs[0][e * 3 + k]);
      for (int k = 0; k < 4; ++k) want.push_back(h->inputs[1][e * 4 + k]);
    }
    CHECK(CompareArrays(h->Forward(), want) == 0);
    CHECK(h->CheckGradients(11) == 0);
  }
  for (const char* type : {"add", "multiply"}) {
    SECTION(type) {
      auto h = OpHarness::Make(type, "{}", {{2, 3}, {2, 3}, {2, 3}}, 2, 12);
      std::vector<double> want;
      for (int i = 0; i < 12; ++i) {
        const double a = h->inputs[0][i], b = h->inputs[1][i], c = h->inputs[2][i];
        want.push_back(std::string(type) == "add" ? a + b + c : a * b * c);
      }
      CHECK(CompareArrays(h->Forward(), want) == 0);
      CHECK(h->CheckGradients(13) == 0);
    }
  }
  SECTION("reshape and flatten") {
    auto r = OpHarness::Make("reshape", R"({"shape":[-1,2]})", {{2, 3}}, 2, 14);
    CHECK(r->op->shape() == Shape{3, 2});
    CHECK(r->Forward() == r->inputs[0]);
    CHECK(r->CheckGradients(15) == 0);
    auto f = OpHarness::Make("flatten", "{}", {{2, 3, 1}}, 1, 16);
    CHECK(f->op->shape() == Shape{6});
    CHECK(f->CheckGradients(17) == 0);
  }
}

TEST_CASE("fm: Σ_{i<j} <v_i, v_j> over stacked inputs; gradients") {
  for (int64_t batch : {1, 3}) {
    auto h = OpHarness::Make("fm", "{}", {{3, 4}, {4}}, batch, 20);
    CHECK(h->op->shape() == Shape{1});
    std::vector<double> want;
    for (int64_t e = 0; e < batch; ++e) {
      std::vector<const float*> v;
      for (int i = 0; i < 3; ++i) v.push_back(h->inputs[0].data() + e * 12 + i * 4);
      v.push_back(h->inputs[1].data() + e * 4);
      double s = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        for (size_t j = i + 1; j < v.size(); ++j) {
          for (int k = 0; k < 4; ++k) s += double{v[i][k]} * v[j][k];
        }
      }
      want.push_back(s);
    }
    CHECK(CompareArrays(h->Forward(), want) == 0);
    CHECK(h->CheckGradients(21) == 0);
  }
}

TEST_CASE("dot_interaction: DLRM's lower-triangle pairs, with and without self; gradients") {
  for (bool self : {false, true}) {
    INFO("self " << self);
    auto h = OpHarness::Make("dot_interaction", self ? R"({"self_interaction":true})" : "{}",
                             {{4}, {3, 4}}, 2, 22);
    CHECK(h->op->shape() == Shape{self ? 10 : 6});
    std::vector<double> want;
    for (int e = 0; e < 2; ++e) {
      std::vector<const float*> v{h->inputs[0].data() + e * 4};
      for (int i = 0; i < 3; ++i) v.push_back(h->inputs[1].data() + e * 12 + i * 4);
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < (self ? i + 1 : i); ++j) {
          double s = 0;
          for (int k = 0; k < 4; ++k) s += double{v[i][k]} * v[j][k];
          want.push_back(s);
        }
      }
    }
    CHECK(CompareArrays(h->Forward(), want) == 0);
    CHECK(h->CheckGradients(23) == 0);
  }
}

TEST_CASE("cross (DCN-v2): full-rank and low-rank layers against the recurrence; gradients") {
  for (int rank : {0, 2}) {
    for (int64_t batch : {1, 3}) {
      INFO("rank " << rank << " batch " << batch);
      auto h = OpHarness::Make("cross", R"({"num_layers":2,"rank":)" + std::to_string(rank) + "}",
                               {{5}}, batch, 24);
      h->Pull();
      const int d = 5;
      std::vector<double> want;
      for (int64_t e = 0; e < batch; ++e) {
        std::vector<double> x0(h->inputs[0].begin() + e * d, h->inputs[0].begin() + (e + 1) * d),
            x = x0;
        for (int l = 0; l < 2; ++l) {
          // variables per layer: kernel, bias (full) or u, v, bias (low rank)
          const size_t base = static_cast<size_t>(l) * (rank == 0 ? 2 : 3);
          std::vector<double> z(d, 0.0);
          if (rank == 0) {
            for (int o = 0; o < d; ++o) {
              for (int i = 0; i < d; ++i) z[o] += x[i] * h->full[base][i * d + o];
            }
          } else {
            std::vector<double> t(rank, 0.0);
            for (int q = 0; q < rank; ++q) {
              for (int i = 0; i < d; ++i) t[q] += x[i] * h->full[base][i * rank + q];
            }
            for (int o = 0; o < d; ++o) {
              for (int q = 0; q < rank; ++q) z[o] += t[q] * h->full[base + 1][q * d + o];
            }
          }
          const std::vector<float>& bias = h->full[base + (rank == 0 ? 1 : 2)];
          for (int o = 0; o < d; ++o) x[o] = x0[o] * (z[o] + bias[o]) + x[o];
        }
        want.insert(want.end(), x.begin(), x.end());
      }
      CHECK(CompareArrays(h->Forward(), want) == 0);
      CHECK(h->CheckGradients(25) == 0);
    }
  }
}

TEST_CASE("embedding: per-field pooling from a shared table, hashing, weights; gradients") {
  for (const char* combiner : {"mean", "sum", "sqrtn"}) {
    for (bool hashed : {false, true}) {
      for (bool weighted : {false, true}) {
        INFO(combiner << " hashed " << hashed << " weighted " << weighted);
        const std::string cfg = std::string(R"({"dim":3,"combiner":")") + combiner + "\"," +
                                (hashed ? R"("num_buckets":5})" : R"("vocab":9})");
        auto h = OpHarness::Make("embedding", cfg, {}, 4, 30, 2);
        h->batch = SparseBatch(4, 2, 9, 31, weighted);
        CHECK(h->op->shape() == Shape{2, 3});
        h->Pull();
        std::vector<double> want;
        for (int64_t e = 0; e < 4; ++e) {
          for (int f = 0; f < 2; ++f) {
            const SparseField& s = h->batch.sparse[f];
            std::vector<double> acc(3, 0.0);
            double wsum = 0, wsq = 0;
            for (int64_t j = s.offsets[e]; j < s.offsets[e + 1]; ++j) {
              const double w = weighted ? s.values[j] : 1.0;
              const int64_t row =
                  hashed ? static_cast<int64_t>(SplitMix64(static_cast<uint64_t>(s.ids[j])) % 5)
                         : s.ids[j];
              for (int k = 0; k < 3; ++k) acc[k] += w * h->full[0][row * 3 + k];
              wsum += w;
              wsq += w * w;
            }
            const std::string c = combiner;
            const double div = c == "sum" ? 1.0 : c == "mean" ? wsum : std::sqrt(wsq);
            for (int k = 0; k < 3; ++k) want.push_back(div == 0 ? 0.0 : acc[k] / div);
          }
        }
        CHECK(CompareArrays(h->Forward(), want) == 0);
        CHECK(h->CheckGradients(32) == 0);
        if (hashed) {
          for (int64_t r : h->rows[0]) CHECK(r < 5);
        }
      }
    }
  }
}

TEST_CASE("linear: bias + weighted sum of weight rows over fields, several units; gradients") {
  auto h = OpHarness::Make("linear", R"({"vocab":9,"units":2})", {}, 3, 40, 2);
  h->batch = SparseBatch(3, 2, 9, 41, true);
  h->Pull();
  std::vector<double> want;
  for (int64_t e = 0; e < 3; ++e) {
    for (int u = 0; u < 2; ++u) {
      double z = h->full[1][u];
      for (const SparseField& s : h->batch.sparse) {
        for (int64_t j = s.offsets[e]; j < s.offsets[e + 1]; ++j)
          z += s.values[j] * h->full[0][s.ids[j] * 2 + u];
      }
      want.push_back(z);
    }
  }
  CHECK(CompareArrays(h->Forward(), want) == 0);
  CHECK(h->CheckGradients(42) == 0);
}

TEST_CASE("linear with a vocab per input: each input owns its block of weight rows") {
  auto h = OpHarness::Make("linear", R"({"vocab":[4,6]})", {}, 3, 43, 2);
  CHECK(h->defs[0].shape == std::vector<int64_t>{10, 1});
  h->batch = SparseBatch(3, 2, 4, 44, false);
  h->Pull();
  for (int64_t r : h->rows[0]) CHECK(r < 10);
  std::vector<double> want;
  for (int64_t e = 0; e < 3; ++e) {
    double z = h->full[1][0];
    for (int f = 0; f < 2; ++f) {
      const SparseField& s = h->batch.sparse[f];
      for (int64_t j = s.offsets[e]; j < s.offsets[e + 1]; ++j)
        z += h->full[0][(f == 0 ? 0 : 4) + s.ids[j]];
    }
    want.push_back(z);
  }
  CHECK(CompareArrays(h->Forward(), want) == 0);
  CHECK(h->CheckGradients(45) == 0);
}
