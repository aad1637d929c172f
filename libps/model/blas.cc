#include "libps/model/blas.h"

#include <climits>

#include <cblas.h>

#include "libps/core/status.h"

// Not every cblas.h declares OpenBLAS's extensions (netlib's does not); these are the
// OpenBLAS ABI and match its own declarations when they are present.
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace ps::model {
namespace {

int ToInt(int64_t v) {
  PS_ASSERT(v >= 0 && v <= INT_MAX);
  return static_cast<int>(v);
}

CBLAS_TRANSPOSE ToCblas(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

}  // namespace

void Gemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS rejects lda < 1; the product is empty, so C = beta * C.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, ToCblas(trans_a), ToCblas(trans_b), ToInt(m), ToInt(n), ToInt(k),
              alpha, a, ToInt(lda), b, ToInt(ldb), beta, c, ToInt(ldc));
}

void Gemv(Trans trans_a, int64_t m, int64_t n, float alpha, const float* a, int64_t lda,
          const float* x, float beta, float* y) {
  if (m == 0 || n == 0) {
    int64_t len = trans_a == Trans::kYes ? n : m;
    for (int64_t i = 0; i < len; ++i) y[i] = beta == 0.0f ? 0.0f : beta * y[i];
    return;
  }
  cblas_sgemv(CblasRowMajor, ToCblas(trans_a), ToInt(m), ToInt(n), alpha, a, ToInt(lda), x, 1, beta,
              y, 1);
}

void Axpy(int64_t n, float alpha, const float* x, float* y) {
  if (n == 0) return;
  cblas_saxpy(ToInt(n), alpha, x, 1, y, 1);
}

void Scal(int64_t n, float alpha, float* x) {
  if (n == 0) return;
  cblas_sscal(ToInt(n), alpha, x, 1);
}

float Dot(int64_t n, const float* x, const float* y) {
  if (n == 0) return 0.0f;
  return cblas_sdot(ToInt(n), x, 1, y, 1);
}

void SetBlasThreads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }

int BlasThreads() { return openblas_get_num_threads(); }

}  // namespace ps::model
