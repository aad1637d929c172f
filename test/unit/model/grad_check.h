// Helpers for the model tests: full parameter tables held "ps-side", Params built from
// them the way a worker would, and a central-difference gradient check.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/model/initializer.h"
#include "libps/model/model.h"

namespace model_test {

using ps::model::Batch;
using ps::model::Model;

// Builds a model from JSON text; fails the test on an error.
inline std::unique_ptr<Model> Build(const std::string& text) {
  auto j = ps::ParseJson(text, "test");
  REQUIRE(j.ok());
  auto m = ps::model::BuildModel(*j, "job.model");
  INFO(m.status().ToString());
  REQUIRE(m.ok());
  return std::move(m).value();
}

// The message of the InvalidArgument that building JSON text must fail with.
inline std::string BuildError(const std::string& text) {
  auto j = ps::ParseJson(text, "test");
  REQUIRE(j.ok());
  auto m = ps::model::BuildModel(*j, "job.model");
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().code() == ps::Code::kInvalidArgument);
  return m.status().message();
}

// A batch with `fields` sparse fields (ids in [0, vocab), 0..3 per example, duplicates
// likely), optional weights, dense features and labels for `classes`.
inline Batch RandomBatch(int64_t size, std::vector<int64_t> vocab, int64_t dense_dim,
                         int64_t classes, bool weighted, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Batch b;
  b.size = size;
  b.dense_dim = dense_dim;
  for (int64_t i = 0; i < size * dense_dim; ++i) b.dense.push_back(u(rng));
  for (int64_t v : vocab) {
    ps::model::SparseField f;
    f.offsets.push_back(0);
    for (int64_t i = 0; i < size; ++i) {
      const int64_t n = std::uniform_int_distribution<int64_t>(i == 0 ? 1 : 0, 3)(rng);
      for (int64_t j = 0; j < n; ++j) {
        f.ids.push_back(std::uniform_int_distribution<int64_t>(0, v - 1)(rng));
        if (weighted) f.values.push_back(0.5f + std::fabs(u(rng)));
      }
      f.offsets.push_back(static_cast<int64_t>(f.ids.size()));
    }
    b.sparse.push_back(std::move(f));
  }
  for (int64_t i = 0; i < size; ++i) {
    b.labels.push_back(classes == 1 ? static_cast<float>(rng() % 2)
                                    : static_cast<float>(rng() % static_cast<uint32_t>(classes)));
  }
  return b;
}

// Full values of every variable, as a ps would hold them.
struct Store {
  std::vector<std::vector<float>> full;

  // Every variable filled with its own initializer, as the ps does.
  Store(const Model& m, uint64_t seed) {
    for (const auto& v : m.variables()) {
      full.emplace_back(static_cast<size_t>(v.num_elements()));
      Fill(v, v.init, seed, full.back());
    }
  }
  // Every variable drawn from U[-scale, scale) instead.
  void Randomize(const Model& m, uint64_t seed, float scale) {
    for (size_t v = 0; v < full.size(); ++v) {
      Fill(m.variables()[v], {ps::model::InitKind::kUniform, -scale, scale}, seed, full[v]);
    }
  }
  // The whole variable as one shard: rows along axis 0 (shape [] is one row).
  static void Fill(const ps::model::VariableDef& def, const ps::model::InitSpec& init,
                   uint64_t seed, std::span<float> out) {
    const int64_t cols = def.row_elements();
    ps::model::FillInitial(init, seed, def.name, def.shape, 0, def.num_elements() / cols, cols,
                           out);
  }
};

// A worker's pulled state for one batch: rows and the pulled (gathered) values.
struct Pulled {
  std::vector<std::vector<int64_t>> rows;
  std::vector<std::vector<float>> values;
  ps::model::Params params;

  void Pull(Model& m, const Store& s, const Batch& b) {
    REQUIRE(m.RowsNeeded(b, &rows).ok());
    values.assign(s.full.size(), {});
    params.values.clear();
    params.rows.clear();
    for (size_t v = 0; v < s.full.size(); ++v) {
      const auto& def = m.variables()[v];
      if (def.sparse) {
        const int64_t d = def.row_elements();
        for (int64_t r : rows[v]) {
          values[v].insert(values[v].end(), s.full[v].begin() + r * d,
                           s.full[v].begin() + (r + 1) * d);
        }
      } else {
        values[v] = s.full[v];
      }
    }
    for (size_t v = 0; v < s.full.size(); ++v) {
      params.values.emplace_back(values[v]);
      params.rows.emplace_back(rows[v]);
    }
  }
};

// Applies grads with plain SGD to the store (scattering sparse rows).
inline void ApplySgd(const Model& m, const Pulled& p, const ps::model::Grads& g, float lr,
                     Store* s) {
  for (size_t v = 0; v < s->full.size(); ++v) {
    const auto& def = m.variables()[v];
    if (def.sparse) {
      const int64_t d = def.row_elements();
      for (size_t k = 0; k < p.rows[v].size(); ++k) {
        for (int64_t e = 0; e < d; ++e)
          s->full[v][p.rows[v][k] * d + e] -= lr * g.values[v][k * d + e];
      }
    } else {
      for (size_t i = 0; i < s->full[v].size(); ++i) s->full[v][i] -= lr * g.values[v][i];
    }
  }
}

inline bool Close(double analytic, double numeric, double atol, double rtol) {
  return std::fabs(analytic - numeric) <=
         atol + rtol * std::max(std::fabs(analytic), std::fabs(numeric));
}

// Tolerances: the model computes in float, so Forward's loss carries a relative error
// of ~1e-7 per logit; divided by 2*eps = 2e-3 that is ~1e-4 of noise at worst in the
// numeric derivative, and the O(eps^2) truncation error is far below it. Hence
// atol 2e-4 plus 1% relative; the suite passes at atol 1e-4, rtol 0.5% too, and a wrong
// tanh derivative fails hundreds of elements.
// Compares ForwardBackward's gradients with central differences of the mean loss
// (from Forward) for every element of every pulled variable. Returns the number of
// mismatches (each reported with INFO/CHECK).
inline int CheckGradients(Model& m, Store& store, const Batch& b, double eps = 1e-3,
                          double atol = 2e-4, double rtol = 1e-2) {
  Pulled p;
  p.Pull(m, store, b);
  ps::model::Grads g;
  auto step = m.ForwardBackward(b, p.params, &g);
  REQUIRE(step.ok());
  REQUIRE(step->examples == b.size);
  int bad = 0;
  int nonzero = 0;
  for (size_t v = 0; v < p.values.size(); ++v) {
    REQUIRE(g.values[v].size() == p.values[v].size());
    for (size_t i = 0; i < p.values[v].size(); ++i) {
      const float saved = p.values[v][i];
      p.values[v][i] = static_cast<float>(saved + eps);
      auto up = m.Forward(b, p.params);
      p.values[v][i] = static_cast<float>(saved - eps);
      auto down = m.Forward(b, p.params);
      p.values[v][i] = saved;
      REQUIRE(up.ok());
      REQUIRE(down.ok());
      // The perturbation actually applied, in float.
      const double h =
          double{static_cast<float>(saved + eps)} - double{static_cast<float>(saved - eps)};
      const double numeric = (up->loss_sum - down->loss_sum) / static_cast<double>(b.size) / h;
      const double analytic = g.values[v][i];
      if (std::fabs(analytic) > 1e-4) ++nonzero;
      if (!Close(analytic, numeric, atol, rtol)) {
        ++bad;
        INFO(m.variables()[v].name << "[" << i << "] analytic " << analytic << " numeric "
                                   << numeric);
        CHECK(false);
      }
    }
  }
  // A check over all-zero gradients would prove nothing.
  CHECK(nonzero > 0);
  return bad;
}

}  // namespace model_test
