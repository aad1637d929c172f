// Helpers for testing one graph op alone: build it from JSON with given input shapes,
// fill inputs and variables with seeded random values, run it, and compare its gradients
// (with respect to every input element and every variable element) with central
// differences of the scalar L = Σ r ⊙ output for a fixed random r.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/model/ops.h"
#include "test/unit/model/grad_check.h"

namespace model_test {

struct OpHarness {
  ps::model::VarSet vars;
  std::vector<ps::model::VariableDef> defs;
  std::unique_ptr<ps::model::Op> op;
  int64_t batch_size = 0;
  std::vector<ps::model::Shape> in_shapes;
  std::vector<std::vector<float>> inputs;  // [inputs][batch * size]; empty for sparse
  std::vector<std::vector<float>> full;    // [vars] whole variable values
  std::vector<std::vector<int64_t>> rows;  // [vars] rows used (sparse variables)
  std::vector<std::vector<float>> values;  // [vars] pulled values
  ps::model::Batch batch;                  // sparse fields for sparse ops
  ps::model::Params params;
  ps::model::Grads grads;
  bool training = true;
  uint64_t step = 0;

  // Builds `type` from `config` (keys other than name/type/inputs). sparse_fields > 0
  // makes the inputs sparse fields 0..n-1 of `batch` (which the caller fills).
  static std::unique_ptr<OpHarness> Make(const std::string& type, const std::string& config,
                                         std::vector<ps::model::Shape> shapes, int64_t batch,
                                         uint32_t seed, int sparse_fields = 0) {
    auto h = std::make_unique<OpHarness>();
    h->batch_size = batch;
    h->in_shapes = shapes;
    auto j = ps::ParseJson(config, "test");
    REQUIRE(j.ok());
    ps::JsonReader r(*j, "layer");
    ps::model::OpBuild b;
    b.config = &r;
    b.name = "l";
    b.path = "layer";
    b.vars = &h->vars;
    const size_t n = sparse_fields > 0 ? static_cast<size_t>(sparse_fields) : shapes.size();
    for (size_t i = 0; i < n; ++i) {
      b.in_names.push_back("in" + std::to_string(i));
      b.in_sparse.push_back(sparse_fields > 0);
      b.in_shapes.push_back(sparse_fields > 0 ? ps::model::Shape{} : shapes[i]);
      b.sparse.push_back({static_cast<int>(i), true});
    }
    auto op = ps::model::MakeOp(type, b);
    INFO(op.status().ToString());
    REQUIRE(op.ok());
    h->op = std::move(op).value();
    h->defs = h->vars.defs();
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) {
      h->inputs.emplace_back();
      if (sparse_fields > 0) continue;
      h->inputs.back().resize(static_cast<size_t>(batch * ps::model::NumElements(shapes[i])));
      for (float& x : h->inputs.back()) x = u(rng);
    }
    for (const auto& d : h->defs) {
      h->full.emplace_back(static_cast<size_t>(d.num_elements()));
      for (float& x : h->full.back()) x = u(rng);
    }
    return h;
  }

  // Pulls the variables the way a worker would (rows of sparse ones for `batch`).
  void Pull() {
    rows.assign(defs.size(), {});
    op->CollectRows(batch, &rows);
    values.assign(defs.size(), {});
    params = {};
    for (size_t v = 0; v < defs.size(); ++v) {
      std::sort(rows[v].begin(), rows[v].end());
      rows[v].erase(std::unique(rows[v].begin(), rows[v].end()), rows[v].end());
      if (defs[v].sparse) {
        const int64_t d = defs[v].row_elements();
        for (int64_t r : rows[v])
          values[v].insert(values[v].end(), full[v].begin() + r * d, full[v].begin() + (r + 1) * d);
      } else {
        values[v] = full[v];
      }
    }
    for (size_t v = 0; v < defs.size(); ++v) {
      params.values.emplace_back(values[v]);
      params.rows.emplace_back(rows[v]);
    }
  }

  ps::model::OpContext Context(bool with_grads) {
    return {&batch, &params, with_grads ? &grads : nullptr, batch_size, training, step};
  }

  std::vector<std::span<const float>> Ins() const {
    std::vector<std::span<const float>> s;
    for (const auto& x : inputs) s.emplace_back(x);
    return s;
  }

  std::vector<float> Forward() {
    auto out = op->Forward(Context(false), Ins());
    INFO(out.status().ToString());
    REQUIRE(out.ok());
    REQUIRE(static_cast<int64_t>(out->size()) == batch_size * op->size());
    return {out->begin(), out->end()};
  }

  double Objective(const std::vector<float>& r) {
    std::vector<float> y = Forward();
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += double{r[i]} * y[i];
    return s;
  }

  // Checks every input and pulled-variable gradient; returns the number of mismatches.
  int CheckGradients(uint32_t seed, double eps = 1e-3, double atol = 5e-4, double rtol = 1e-2) {
    Pull();
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> r(static_cast<size_t>(batch_size * op->size()));
    for (float& x : r) x = u(rng);
    // Analytic.
    auto out = op->Forward(Context(false), Ins());
    REQUIRE(out.ok());
    grads.values.assign(defs.size(), {});
    for (size_t v = 0; v < defs.size(); ++v)
      grads.values[v].assign(values[v].size(), defs[v].sparse ? 0.0f : 7.0f);
    std::vector<std::vector<float>> din;
    std::vector<std::span<float>> din_spans;
    for (const auto& x : inputs) din.emplace_back(x.size(), 0.0f);
    for (auto& d : din) din_spans.emplace_back(d);
    std::vector<float> dout = r;
    op->Backward(Context(true), Ins(), dout, din_spans);
    int bad = 0, nonzero = 0;
    auto check = [&](std::vector<float>& param, size_t i, double analytic,
                     const std::string& what) {
      const float saved = param[i];
      param[i] = static_cast<float>(saved + eps);
      const double hi = param[i];
      const double up = Objective(r);
      param[i] = static_cast<float>(saved - eps);
      const double lo = param[i];
      const double down = Objective(r);
      param[i] = saved;
      const double numeric = (up - down) / (hi - lo);
      if (std::fabs(analytic) > 1e-4) ++nonzero;
      if (!Close(analytic, numeric, atol, rtol)) {
        ++bad;
        INFO(what << "[" << i << "] analytic " << analytic << " numeric " << numeric);
        CHECK(false);
      }
    };
    for (size_t k = 0; k < inputs.size(); ++k) {
      for (size_t i = 0; i < inputs[k].size(); ++i)
        check(inputs[k], i, din[k][i], "input " + std::to_string(k));
    }
    for (size_t v = 0; v < defs.size(); ++v) {
      for (size_t i = 0; i < values[v].size(); ++i)
        check(values[v], i, grads.values[v][i], defs[v].name);
    }
    CHECK(nonzero > 0);
    return bad;
  }
};

// A relative-and-absolute comparison of two float arrays; returns the mismatches.
inline int CompareArrays(const std::vector<float>& got, const std::vector<double>& want,
                         double tol = 1e-5) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tol * (1.0 + std::fabs(want[i]))) {
      ++bad;
      INFO("[" << i << "] got " << got[i] << " want " << want[i]);
      CHECK(false);
    }
  }
  return bad;
}

}  // namespace model_test
