// Direct conv2d kernels for layers with few taps per filter (k_h * k_w * c <=
// kDirectConvMaxTaps, e.g. the first layer over a grey or RGB image), where im2col + sgemm
// spends its time moving memory rather than multiplying: K is too small to amortise the
// column matrix and the separate bias, activation and mask passes. Written with AVX2 + FMA
// intrinsics in functions compiled for that target only (the build targets plain x86-64);
// the caller checks DirectConvCpuSupported() first. Internal to libps/model (and its tests).
//
// The kernels see one image at a time as a padded image in which every window lies inside
// (the caller copies the input into one when the layer pads), so a tap is a fixed offset
// from its window's origin. Filters are processed 8 at a time (one ymm register); the
// kernel and bias are passed padded with zeros to a multiple of 8 columns.
//
// Thread rules: the kernels are reentrant (all state is in their arguments);
// SetDirectConvAllowed is process-wide (see there).
#pragma once

#include <cstdint>

namespace ps::model {

inline constexpr int64_t kDirectConvMaxTaps = 32;

// Whether this CPU has AVX2 and FMA (what the kernels run on).
bool DirectConvCpuSupported();

// Whether conv2d ops built from now on use the direct kernels where they apply (default:
// yes). Tests and benchmarks turn it off to compare with the im2col path. Any thread may
// call; an op decides once, when it is built.
void SetDirectConvAllowed(bool allowed);
bool DirectConvAllowed();

// One image as the kernels see it.
struct DirectConvShape {
  int64_t taps = 0;  // k_h * k_w * c, in [1, kDirectConvMaxTaps]
  const int64_t* tap_off =
      nullptr;         // [taps] floats from a window's origin to tap (ki, kj, ch), kernel row order
  int64_t pixels = 0;  // output pixels of one image (out_h * out_w)
  const int64_t* pixel_off =
      nullptr;  // [pixels] floats from the image's start to each output pixel's window
  int64_t filters = 0;
  int64_t padded_filters = 0;  // filters rounded up to a multiple of 8
};

// Filters rounded up to the kernels' multiple of 8.
inline int64_t DirectConvPaddedFilters(int64_t filters) { return (filters + 7) / 8 * 8; }

// Floats of scratch DirectConvBackward needs.
int64_t DirectConvScratch(const DirectConvShape& s);

// One image: y [pixels * filters] = act(windows(img) · w + bias), act relu (relu = true)
// or the identity. w [taps * padded_filters] and bias [padded_filters] hold zeros past
// `filters`. With relu, mask [pixels * padded_filters / 8] gets the bits y > 0, a byte per
// pixel and group of 8 filters (bit i: filter 8 * group + i); unused (may be null)
// otherwise. Needs DirectConvCpuSupported().
void DirectConvForward(const DirectConvShape& s, const float* img, const float* w,
                       const float* bias, bool relu, float* y, uint8_t* mask);

// One image, after DirectConvForward: d = dy masked by the forward pass's mask (relu) or
// dy (mask null: the identity); d is written back into dy [pixels * filters] when write_d.
// Adds windows(img)ᵀ · d to dw [taps * padded_filters] and the column sums of d to db
// [padded_filters] (their padding columns stay as they were). scratch:
// [DirectConvScratch(s)]. Needs DirectConvCpuSupported().
void DirectConvBackward(const DirectConvShape& s, const float* img, const uint8_t* mask, float* dy,
                        bool write_d, float* dw, float* db, float* scratch);

}  // namespace ps::model
