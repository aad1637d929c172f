// Vision layers over images [height, width, channels] (channels last, as Keras):
// conv2d (im2col + one sgemm over the whole batch; direct AVX2 kernels instead when a
// filter has few taps, see conv_direct.h), max_pool2d, avg_pool2d.
//
// Output size and padding follow TensorFlow: "valid": out = floor((in - k) / s) + 1
// (in >= k required); "same": out = ceil(in / s), padding max((out - 1) * s + k - in, 0)
// split with the smaller half before (top/left). avg_pool2d divides by the number of
// window elements inside the image (padding excluded), as TensorFlow does.
#include <algorithm>
#include <utility>

#include "libps/core/text.h"
#include "libps/model/blas.h"
#include "libps/model/conv_direct.h"
#include "libps/model/ops.h"

namespace ps::model {
namespace {

// One spatial axis of a window sliding over an image.
struct Axis {
  int64_t in = 0, k = 0, stride = 1, out = 0, pad = 0;  // pad: before the first element
};

Status MakeAxis(int64_t in, int64_t k, int64_t stride, bool same, const std::string& where,
                Axis* a) {
  a->in = in;
  a->k = k;
  a->stride = stride;
  if (same) {
    a->out = (in + stride - 1) / stride;
    a->pad = std::max<int64_t>((a->out - 1) * stride + k - in, 0) / 2;
  } else {
    if (in < k) {
      return InvalidArgument(where + ": window " + std::to_string(k) +
                             " is larger than the input's " + std::to_string(in) +
                             " with padding \"valid\"");
    }
    a->out = (in - k) / stride + 1;
    a->pad = 0;
  }
  return Status::Ok();
}

// Geometry shared by conv2d and the pools.
struct Window {
  Axis h, w;
  int64_t c = 0;  // input channels
};

// For each output position of one image and one kernel row ki: the kernel row's k_w * c
// column entries and the input elements they read. Within a kernel row the taps read
// k_w consecutive input pixels, so where the window lies inside the input (always with
// "valid" padding) they are one contiguous run of k_w * c floats on both sides; only
// windows overlapping the padding go tap by tap. fn(col_offset, input_offset, n) is
// called per run; padding is skipped (its column entries are zero: see Im2Col).
template <typename Fn>
void ForEachRun(const Window& g, int64_t oh, int64_t ow, int64_t ki, Fn&& fn) {
  const int64_t ih = oh * g.h.stride - g.h.pad + ki;
  if (ih < 0 || ih >= g.h.in) return;
  const int64_t iw0 = ow * g.w.stride - g.w.pad;
  const int64_t col = ki * g.w.k * g.c;
  if (iw0 >= 0 && iw0 + g.w.k <= g.w.in) {
    fn(col, (ih * g.w.in + iw0) * g.c, g.w.k * g.c);
    return;
  }
  for (int64_t kj = 0; kj < g.w.k; ++kj) {
    const int64_t iw = iw0 + kj;
    if (iw >= 0 && iw < g.w.in) fn(col + kj * g.c, (ih * g.w.in + iw) * g.c, g.c);
  }
}

// im2col of one batch: cols [batch * out_h * out_w, k_h * k_w * c], column (ki, kj, ch) in
// that order (the layout of a [k_h, k_w, c, filters] kernel); padding reads as 0.
// Whether some window reaches into the padding ("same" may pad only after the input: pad
// is the padding before it).
bool Overhangs(const Axis& a) { return a.pad > 0 || (a.out - 1) * a.stride + a.k > a.in; }
bool Padded(const Window& g) { return Overhangs(g.h) || Overhangs(g.w); }

void Im2Col(const Window& g, int64_t batch, const float* x, float* cols) {
  const int64_t kcols = g.h.k * g.w.k * g.c;
  const bool padded = Padded(g);
  for (int64_t e = 0; e < batch; ++e) {
    const float* img = x + e * g.h.in * g.w.in * g.c;
    for (int64_t oh = 0; oh < g.h.out; ++oh) {
      for (int64_t ow = 0; ow < g.w.out; ++ow) {
        float* row = cols + ((e * g.h.out + oh) * g.w.out + ow) * kcols;
        if (padded) std::fill_n(row, kcols, 0.0f);
        for (int64_t ki = 0; ki < g.h.k; ++ki) {
          // A plain loop: the runs are short (k_w * c floats), too short for a memcpy call.
          ForEachRun(g, oh, ow, ki, [&](int64_t c0, int64_t i0, int64_t n) {
            for (int64_t t = 0; t < n; ++t) row[c0 + t] = img[i0 + t];
          });
        }
      }
    }
  }
}

// The adjoint of Im2Col: adds each column entry back to the input element it came from.
void Col2ImAdd(const Window& g, int64_t batch, const float* cols, float* dx) {
  const int64_t kcols = g.h.k * g.w.k * g.c;
  for (int64_t e = 0; e < batch; ++e) {
    float* img = dx + e * g.h.in * g.w.in * g.c;
    for (int64_t oh = 0; oh < g.h.out; ++oh) {
      for (int64_t ow = 0; ow < g.w.out; ++ow) {
        const float* row = cols + ((e * g.h.out + oh) * g.w.out + ow) * kcols;
        for (int64_t ki = 0; ki < g.h.k; ++ki) {
          ForEachRun(g, oh, ow, ki, [&](int64_t c0, int64_t i0, int64_t n) {
            for (int64_t t = 0; t < n; ++t) img[i0 + t] += row[c0 + t];
          });
        }
      }
    }
  }
}

// conv2d: y = act(im2col(x) · kernel + bias), kernel [k_h, k_w, c, filters]. With few
// taps per filter, relu or no activation and a CPU with AVX2 + FMA, the direct kernels of
// conv_direct.h compute the same without the column matrix (decided when the op is built).
class Conv2dOp final : public Op {
 public:
  Conv2dOp(Window g, int64_t filters, Activation act, size_t kernel, size_t bias)
      : g_(g), f_(filters), act_(act), kernel_(kernel), bias_(bias) {
    SetShape({g_.h.out, g_.w.out, filters});
    has_variables_ = true;
    direct_ = Taps() <= kDirectConvMaxTaps &&
              (act_ == Activation::kRelu || act_ == Activation::kLinear) && DirectConvAllowed() &&
              DirectConvCpuSupported();
    if (direct_) SetUpDirect();
  }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    if (direct_) {
      ForwardDirect(ctx, in[0].data());
      return std::span<const float>(y_);
    }
    const int64_t rows = ctx.batch_size * g_.h.out * g_.w.out;
    const int64_t k = Taps();
    cols_.resize(static_cast<size_t>(rows * k));
    Im2Col(g_, ctx.batch_size, in[0].data(), cols_.data());
    y_.resize(static_cast<size_t>(rows * f_));
    Gemm(Trans::kNo, Trans::kNo, rows, f_, k, 1.0f, cols_.data(), k,
         ctx.params->values[kernel_].data(), f_, 0.0f, y_.data(), f_);
    // One pass: + bias, then the activation (keeping the pre-activation for gelu).
    std::span<const float> bias = ctx.params->values[bias_];
    const bool keep_z = ActivationNeedsInput(act_);
    if (keep_z) z_.resize(y_.size());
    for (int64_t r = 0; r < rows; ++r) {
      float* y = y_.data() + r * f_;
      if (act_ == Activation::kRelu) {  // the common case, inline: rows are short (f_ floats)
        for (int64_t j = 0; j < f_; ++j) {
          const float z = y[j] + bias[j];
          y[j] = z > 0.0f ? z : 0.0f;  // as ApplyActivation
        }
        continue;
      }
      for (int64_t j = 0; j < f_; ++j) y[j] += bias[j];
      if (keep_z) std::copy_n(y, f_, z_.data() + r * f_);
      ApplyActivation(act_, y, y, f_);
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>> in,
                std::span<float> dout, std::span<const std::span<float>> din) override {
    const int64_t rows = ctx.batch_size * g_.h.out * g_.w.out;
    const int64_t k = Taps();
    if (direct_) {
      BackwardDirect(ctx, in[0].data(), dout.data(), !din[0].empty());
    } else {
      // One pass: the activation's derivative, then the bias gradient (column sums).
      std::span<float> db = ctx.grads->values[bias_];
      std::fill(db.begin(), db.end(), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        float* d = dout.data() + r * f_;
        const float* y = y_.data() + r * f_;
        if (act_ == Activation::kRelu) {
          for (int64_t j = 0; j < f_; ++j) d[j] = y[j] > 0.0f ? d[j] : 0.0f;
        } else {
          ActivationBackward(act_, z_.empty() ? nullptr : z_.data() + r * f_, y, d, f_);
        }
        for (int64_t j = 0; j < f_; ++j) db[j] += d[j];
      }
      Gemm(Trans::kYes, Trans::kNo, k, f_, rows, 1.0f, cols_.data(), k, dout.data(), f_, 0.0f,
           ctx.grads->values[kernel_].data(), f_);
    }
    if (din[0].empty()) return;
    // The columns are no longer needed (the direct path never made them): reuse them for
    // d(loss)/d(cols).
    cols_.resize(static_cast<size_t>(rows * k));
    Gemm(Trans::kNo, Trans::kYes, rows, k, f_, 1.0f, dout.data(), f_,
         ctx.params->values[kernel_].data(), f_, 0.0f, cols_.data(), k);
    Col2ImAdd(g_, ctx.batch_size, cols_.data(), din[0].data());
  }

 private:
  int64_t Taps() const { return g_.h.k * g_.w.k * g_.c; }

  // The direct kernels read an image [pad_h_, pad_w_, c] in which every window lies
  // inside: the input itself when no window overhangs it, else a zero-padded copy.
  void SetUpDirect() {
    padded_ = Padded(g_);
    pad_h_ = padded_ ? (g_.h.out - 1) * g_.h.stride + g_.h.k : g_.h.in;
    pad_w_ = padded_ ? (g_.w.out - 1) * g_.w.stride + g_.w.k : g_.w.in;
    for (int64_t ki = 0; ki < g_.h.k; ++ki) {
      for (int64_t kj = 0; kj < g_.w.k; ++kj) {
        for (int64_t ch = 0; ch < g_.c; ++ch) tap_off_.push_back((ki * pad_w_ + kj) * g_.c + ch);
      }
    }
    for (int64_t oh = 0; oh < g_.h.out; ++oh) {
      for (int64_t ow = 0; ow < g_.w.out; ++ow) {
        pixel_off_.push_back((oh * g_.h.stride * pad_w_ + ow * g_.w.stride) * g_.c);
      }
    }
  }

  DirectConvShape DirectShape() const {
    return {Taps(),
            tap_off_.data(),
            g_.h.out * g_.w.out,
            pixel_off_.data(),
            f_,
            DirectConvPaddedFilters(f_)};
  }

  // The batch's images as the direct kernels read them: [batch, pad_h_, pad_w_, c].
  const float* DirectInput(int64_t batch, const float* x, bool copy) {
    if (!padded_) return x;
    if (!copy) return padded_x_.data();
    const int64_t c = g_.c;
    padded_x_.assign(static_cast<size_t>(batch * pad_h_ * pad_w_ * c), 0.0f);
    const int64_t n = std::min(g_.w.in, pad_w_ - g_.w.pad) * c;  // floats of an input row inside
    for (int64_t e = 0; e < batch; ++e) {
      for (int64_t ih = 0; ih < g_.h.in && ih + g_.h.pad < pad_h_; ++ih) {
        std::copy_n(x + (e * g_.h.in + ih) * g_.w.in * c, n,
                    padded_x_.data() + ((e * pad_h_ + ih + g_.h.pad) * pad_w_ + g_.w.pad) * c);
      }
    }
    return padded_x_.data();
  }

  void ForwardDirect(const OpContext& ctx, const float* x) {
    const DirectConvShape s = DirectShape();
    const float* kernel = ctx.params->values[kernel_].data();
    w_.assign(static_cast<size_t>(s.taps * s.padded_filters), 0.0f);
    for (int64_t t = 0; t < s.taps; ++t)
      std::copy_n(kernel + t * f_, f_, w_.data() + t * s.padded_filters);
    b_.assign(static_cast<size_t>(s.padded_filters), 0.0f);
    std::copy_n(ctx.params->values[bias_].data(), f_, b_.data());
    const float* img = DirectInput(ctx.batch_size, x, true);
    y_.resize(static_cast<size_t>(ctx.batch_size * s.pixels * f_));
    const bool relu = act_ == Activation::kRelu;
    const int64_t groups = s.padded_filters / 8;
    if (relu) relu_mask_.resize(static_cast<size_t>(ctx.batch_size * s.pixels * groups));
    const int64_t image = pad_h_ * pad_w_ * g_.c;
    for (int64_t e = 0; e < ctx.batch_size; ++e) {
      DirectConvForward(s, img + e * image, w_.data(), b_.data(), relu,
                        y_.data() + e * s.pixels * f_,
                        relu ? relu_mask_.data() + e * s.pixels * groups : nullptr);
    }
  }

  // dout becomes the pre-activation gradient in place when write_d (the input gradient
  // needs it).
  void BackwardDirect(const OpContext& ctx, const float* x, float* dout, bool write_d) {
    const DirectConvShape s = DirectShape();
    w_.assign(static_cast<size_t>(s.taps * s.padded_filters), 0.0f);  // now the kernel gradient
    b_.assign(static_cast<size_t>(s.padded_filters), 0.0f);
    scratch_.resize(static_cast<size_t>(DirectConvScratch(s)));
    const float* img = DirectInput(ctx.batch_size, x, false);
    const int64_t image = pad_h_ * pad_w_ * g_.c;
    const bool relu = act_ == Activation::kRelu;
    const int64_t groups = s.padded_filters / 8;
    for (int64_t e = 0; e < ctx.batch_size; ++e) {
      DirectConvBackward(s, img + e * image,
                         relu ? relu_mask_.data() + e * s.pixels * groups : nullptr,
                         dout + e * s.pixels * f_, write_d, w_.data(), b_.data(), scratch_.data());
    }
    float* dk = ctx.grads->values[kernel_].data();
    for (int64_t t = 0; t < s.taps; ++t)
      std::copy_n(w_.data() + t * s.padded_filters, f_, dk + t * f_);
    std::copy_n(b_.data(), f_, ctx.grads->values[bias_].data());
  }

  Window g_;
  int64_t f_;
  Activation act_;
  size_t kernel_, bias_;
  std::vector<float> cols_;  // [batch * out_h * out_w, k_h * k_w * c]
  std::vector<float> y_;     // [batch * out_h * out_w, filters]
  std::vector<float> z_;     // pre-activation, gelu only
  // The direct path.
  bool direct_ = false;
  bool padded_ = false;             // the kernels read padded_x_, not the input
  int64_t pad_h_ = 0, pad_w_ = 0;   // the image the kernels read
  std::vector<int64_t> tap_off_;    // [taps]
  std::vector<int64_t> pixel_off_;  // [out_h * out_w]
  std::vector<float> padded_x_;     // [batch, pad_h_, pad_w_, c], from Forward to Backward
  std::vector<float> w_,
      b_;  // [taps, padded filters], [padded filters]: kernel and bias, then their gradients
  std::vector<float> scratch_;
  std::vector<uint8_t> relu_mask_;  // relu: [batch * out_h * out_w, padded filters / 8] bits y > 0
};

// max_pool2d / avg_pool2d per channel.
class Pool2dOp final : public Op {
 public:
  Pool2dOp(Window g, bool max) : g_(g), max_(max) { SetShape({g_.h.out, g_.w.out, g_.c}); }
  Result<std::span<const float>> Forward(const OpContext& ctx,
                                         std::span<const std::span<const float>> in) override {
    const int64_t c = g_.c, in_size = g_.h.in * g_.w.in * c;
    y_.resize(static_cast<size_t>(ctx.batch_size * size_));
    if (max_) arg_.resize(y_.size());
    for (int64_t e = 0; e < ctx.batch_size; ++e) {
      const float* img = in[0].data() + e * in_size;
      for (int64_t oh = 0; oh < g_.h.out; ++oh) {
        for (int64_t ow = 0; ow < g_.w.out; ++ow) {
          const int64_t o = ((e * g_.h.out + oh) * g_.w.out + ow) * c;
          float* y = y_.data() + o;
          bool first = true;
          int64_t count = 0;
          ForWindow(oh, ow, [&](int64_t pos) {
            const float* v = img + pos;
            ++count;
            if (first) {
              first = false;
              std::copy_n(v, c, y);
              if (max_) {
                for (int64_t ch = 0; ch < c; ++ch) arg_[o + ch] = static_cast<int32_t>(pos + ch);
              }
            } else if (max_) {
              // Branch-free (random data defeats the branch predictor) and vectorizable.
              int32_t* a = arg_.data() + o;
              const auto p = static_cast<int32_t>(pos);
              for (int64_t ch = 0; ch < c; ++ch) {
                const bool gt = v[ch] > y[ch];
                y[ch] = gt ? v[ch] : y[ch];
                a[ch] = gt ? p + static_cast<int32_t>(ch) : a[ch];
              }
            } else {
              for (int64_t ch = 0; ch < c; ++ch) y[ch] += v[ch];
            }
          });
          if (!max_) {
            const float inv = 1.0f / static_cast<float>(count);
            for (int64_t ch = 0; ch < c; ++ch) y[ch] *= inv;
          }
        }
      }
    }
    return std::span<const float>(y_);
  }
  void Backward(const OpContext& ctx, std::span<const std::span<const float>>,
                std::span<float> dout, std::span<const std::span<float>> din) override {
    if (din[0].empty()) return;
    const int64_t c = g_.c, in_size = g_.h.in * g_.w.in * c;
    for (int64_t e = 0; e < ctx.batch_size; ++e) {
      float* dx = din[0].data() + e * in_size;
      for (int64_t oh = 0; oh < g_.h.out; ++oh) {
        for (int64_t ow = 0; ow < g_.w.out; ++ow) {
          const int64_t o = ((e * g_.h.out + oh) * g_.w.out + ow) * c;
          const float* g = dout.data() + o;
          if (max_) {
            for (int64_t ch = 0; ch < c; ++ch) dx[arg_[o + ch]] += g[ch];
            continue;
          }
          int64_t count = 0;
          ForWindow(oh, ow, [&](int64_t) { ++count; });
          const float inv = 1.0f / static_cast<float>(count);
          ForWindow(oh, ow, [&](int64_t pos) {
            for (int64_t ch = 0; ch < c; ++ch) dx[pos + ch] += g[ch] * inv;
          });
        }
      }
    }
  }

 private:
  // Calls fn(offset of channel 0 of the pixel) for each window pixel inside the image.
  template <typename Fn>
  void ForWindow(int64_t oh, int64_t ow, Fn&& fn) const {
    for (int64_t ki = 0; ki < g_.h.k; ++ki) {
      const int64_t ih = oh * g_.h.stride - g_.h.pad + ki;
      if (ih < 0 || ih >= g_.h.in) continue;
      for (int64_t kj = 0; kj < g_.w.k; ++kj) {
        const int64_t iw = ow * g_.w.stride - g_.w.pad + kj;
        if (iw < 0 || iw >= g_.w.in) continue;
        fn((ih * g_.w.in + iw) * g_.c);
      }
    }
  }

  Window g_;
  bool max_;
  std::vector<float> y_;
  std::vector<int32_t>
      arg_;  // max: [batch * size] input offset (within the example, < 2^24) of the max
};

// An int or a pair of ints at key (Keras' kernel_size / strides / pool_size forms).
Status ReadPair(JsonReader& r, const char* key, bool required, int64_t def, int64_t out[2]) {
  const Json* j = r.Find(key);
  if (j == nullptr) {
    if (required) return InvalidArgument(r.Path(key) + ": required key is missing");
    out[0] = out[1] = def;
    return Status::Ok();
  }
  if (j->is_number_integer()) {
    out[0] = out[1] = j->get<int64_t>();
  } else if (j->is_array() && j->size() == 2 && (*j)[0].is_number_integer() &&
             (*j)[1].is_number_integer()) {
    out[0] = (*j)[0].get<int64_t>();
    out[1] = (*j)[1].get<int64_t>();
  } else {
    return InvalidArgument(r.Path(key) + ": expected an integer or [height, width]");
  }
  for (int i = 0; i < 2; ++i) {
    if (out[i] < 1 || out[i] > 4096) {
      return InvalidArgument(r.Path(key) + ": must be in [1, 4096], got " + std::to_string(out[i]));
    }
  }
  return Status::Ok();
}

// Reads the window keys and computes the geometry over the (rank 3) input.
Status ReadWindow(OpBuild& b, const char* size_key, bool size_required, Window* g) {
  JsonReader& r = *b.config;
  const Shape& s = b.in_shapes[0];
  if (s.size() != 3) {
    return InvalidArgument(b.path + ".inputs[0]: " + QuoteInput(b.in_names[0], '"') +
                           " has shape " + ShapeString(s) +
                           "; expected an image [height, width, channels]");
  }
  int64_t k[2], st[2];
  PS_RETURN_IF_ERROR(ReadPair(r, size_key, size_required, 2, k));
  PS_RETURN_IF_ERROR(ReadPair(r, "strides", false, size_required ? 1 : 0, st));
  if (st[0] == 0) std::copy_n(k, 2, st);  // pools: strides default to the pool size
  std::string padding = "valid";
  PS_RETURN_IF_ERROR(r.GetOr("padding", &padding));
  if (padding != "valid" && padding != "same") {
    return InvalidArgument(r.Path("padding") + ": unknown padding " + QuoteInput(padding, '"') +
                           " (expected valid or same)");
  }
  const bool same = padding == "same";
  PS_RETURN_IF_ERROR(MakeAxis(s[0], k[0], st[0], same, r.Path(size_key), &g->h));
  PS_RETURN_IF_ERROR(MakeAxis(s[1], k[1], st[1], same, r.Path(size_key), &g->w));
  g->c = s[2];
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Op>> MakeConv2dOp(OpBuild& b) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, 1));
  JsonReader& r = *b.config;
  int64_t filters = 0;
  PS_RETURN_IF_ERROR(ReadPositive(r, "filters", &filters, true, 65536));
  Window g;
  PS_RETURN_IF_ERROR(ReadWindow(b, "kernel_size", true, &g));
  Activation act = Activation::kLinear;
  PS_RETURN_IF_ERROR(ReadActivationKey(r, &act));
  InitSpec init{InitKind::kGlorotUniform};
  PS_RETURN_IF_ERROR(ReadInitKey(r, "kernel_init", &init));
  PS_RETURN_IF_ERROR(r.Finish());
  if (g.h.out * g.w.out * filters > (int64_t{1} << 24)) {
    return InvalidArgument(b.path + ".filters: output " + ShapeString({g.h.out, g.w.out, filters}) +
                           " exceeds 2^24 values per example");
  }
  PS_ASSIGN_OR_RETURN(
      size_t kernel,
      b.vars->Add({b.name + "/kernel", {g.h.k, g.w.k, g.c, filters}, init, false}, b.path));
  PS_ASSIGN_OR_RETURN(
      size_t bias,
      b.vars->Add({b.name + "/bias", {filters}, InitSpec{InitKind::kZeros}, false}, b.path));
  return std::unique_ptr<Op>(std::make_unique<Conv2dOp>(g, filters, act, kernel, bias));
}

Result<std::unique_ptr<Op>> MakePool2dOp(OpBuild& b, bool max) {
  PS_RETURN_IF_ERROR(RequireDenseInputs(b, 1, 1));
  Window g;
  PS_RETURN_IF_ERROR(ReadWindow(b, "pool_size", false, &g));
  PS_RETURN_IF_ERROR(b.config->Finish());
  return std::unique_ptr<Op>(std::make_unique<Pool2dOp>(g, max));
}

}  // namespace ps::model
