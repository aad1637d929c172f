#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "libps/model/blas.h"

using ps::model::Trans;

namespace {

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Element (i, j) of op(M) where M is row-major with leading dimension ld.
double At(const std::vector<float>& m, int64_t ld, Trans t, int64_t i, int64_t j) {
  return t == Trans::kNo ? m[i * ld + j] : m[j * ld + i];
}

}  // namespace

TEST_CASE("Gemm matches a naive triple loop for every transpose combination") {
  std::mt19937 rng(42);
  const int64_t m = 5, n = 3, k = 7;
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      // Leading dimensions padded beyond the logical width to catch ld mix-ups.
      const int64_t a_rows = ta == Trans::kNo ? m : k, a_cols = ta == Trans::kNo ? k : m;
      const int64_t b_rows = tb == Trans::kNo ? k : n, b_cols = tb == Trans::kNo ? n : k;
      const int64_t lda = a_cols + 2, ldb = b_cols + 1, ldc = n + 3;
      auto a = Random(a_rows * lda, rng);
      auto b = Random(b_rows * ldb, rng);
      auto c = Random(m * ldc, rng);
      const auto c0 = c;
      const float alpha = 0.75f, beta = -0.5f;
      ps::model::Gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double want = beta * c0[i * ldc + j];
          for (int64_t p = 0; p < k; ++p)
            want += alpha * At(a, lda, ta, i, p) * At(b, ldb, tb, p, j);
          INFO("ta=" << (ta == Trans::kYes) << " tb=" << (tb == Trans::kYes) << " i=" << i
                     << " j=" << j);
          CHECK(c[i * ldc + j] == Approx(want).margin(1e-5));
        }
        // Padding columns of C are untouched.
        for (int64_t j = n; j < ldc; ++j) CHECK(c[i * ldc + j] == c0[i * ldc + j]);
      }
    }
  }
}

TEST_CASE("Gemm with beta = 0 ignores garbage in C; k = 0 scales C") {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};  // [2 x 3]
  std::vector<float> b = {1, 0, 0, 1, 1, 1};  // [3 x 2]
  std::vector<float> c = {NAN, NAN, NAN, NAN};
  ps::model::Gemm(Trans::kNo, Trans::kNo, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2, 0.0f, c.data(),
                  2);
  CHECK(c == std::vector<float>{4, 5, 10, 11});
  ps::model::Gemm(Trans::kNo, Trans::kNo, 2, 2, 0, 1.0f, a.data(), 3, b.data(), 2, 2.0f, c.data(),
                  2);
  CHECK(c == std::vector<float>{8, 10, 20, 22});
}

TEST_CASE("Gemv, Axpy, Scal and Dot match hand-computed values") {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};  // [2 x 3]
  std::vector<float> x3 = {1, -1, 2};
  std::vector<float> y2 = {10, 20};
  ps::model::Gemv(Trans::kNo, 2, 3, 1.0f, a.data(), 3, x3.data(), 1.0f, y2.data());
  CHECK(y2 == std::vector<float>{15, 31});
  std::vector<float> x2 = {1, 2};
  std::vector<float> y3 = {0, 0, 0};
  ps::model::Gemv(Trans::kYes, 2, 3, 2.0f, a.data(), 3, x2.data(), 0.0f, y3.data());
  CHECK(y3 == std::vector<float>{18, 24, 30});
  std::vector<float> y = {1, 1, 1};
  ps::model::Axpy(3, 2.0f, x3.data(), y.data());
  CHECK(y == std::vector<float>{3, -1, 5});
  ps::model::Scal(3, -1.0f, y.data());
  CHECK(y == std::vector<float>{-3, 1, -5});
  CHECK(ps::model::Dot(3, x3.data(), y.data()) == Approx(-3 - 1 - 10));
}

TEST_CASE("SetBlasThreads sets OpenBLAS's thread count") {
  ps::model::SetBlasThreads(1);
  CHECK(ps::model::BlasThreads() == 1);
  ps::model::SetBlasThreads(0);
  CHECK(ps::model::BlasThreads() == 1);
}

TEST_CASE("Gemm from several threads at once gives each thread its own exact result") {
  ps::model::SetBlasThreads(1);
  const int64_t m = 64, n = 48, k = 96;
  std::mt19937 rng(9);
  auto a = Random(m * k, rng);
  auto b = Random(k * n, rng);
  std::vector<float> want(m * n);
  ps::model::Gemm(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                  want.data(), n);
  std::vector<std::vector<float>> got(4, std::vector<float>(m * n));
  std::vector<std::thread> threads;
  for (auto& c : got) {
    threads.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        ps::model::Gemm(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                        c.data(), n);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& c : got) CHECK(c == want);
}
