// GEMV for decode: y[0, m] = sum_k x[0, k] * W[m, k] (+ bias[m]), fp16 or bf16 in and
// out, fp32 accumulation, one rounding to the output type at the end.
//
// Arguments (all device pointers, 16-bit elements):
//   x        [K]            activations, 16-byte aligned
//   w        [M, w_stride]  weights, row m starts at w + m * w_stride; w and
//                           w_stride * 2 bytes 16-byte aligned; only K columns are read
//   bias     [M] or null
//   y        [M]            output
//   M, K     any positive values; w_stride >= K, w_stride % 8 == 0
//
// Launch: block (256, 1, 1), grid (ceil(M / R), 1, 1) for kernel gemv_<dtype>_r<R>.
// Each workgroup owns R consecutive rows and splits K over all 256 threads in
// 8-element (16-byte) chunks, UNROLL chunks in flight per thread; the last partial
// chunk (K % 8) is read element-wise so nothing past column K is touched. Rows
// past M are clamped for loading (in bounds, never written). Partial sums reduce
// per wave (common.h wave_sum), then across waves through LDS in a fixed order:
// bitwise reproducible for a given arch.
//
// Budget: registers hold R * UNROLL * 4 weight dwords, 4 * UNROLL activation dwords and
// R accumulators: <= 84 VGPRs at R = 8 (108 for bf16 on gfx942, which widens bf16 in
// VALU registers), so at least 4 waves per SIMD everywhere; no scratch; LDS =
// waves * R * 4 bytes (<= 256).
#include "hipskinny/common.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWaves = kThreads / hs::kWave;
constexpr int kUnroll = 2;

template <typename T, int R>
__device__ void gemv(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                     const uint16_t* __restrict__ bias, uint16_t* __restrict__ y,
                     int M, int K, int64_t w_stride) {
  __shared__ float partial[kWaves][R];

  const int tid = threadIdx.x;
  const int row0 = blockIdx.x * R;
  const int rows = min(R, M - row0);
  const uint16_t* wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wrow[r] = w + (int64_t)(row0 + min(r, rows - 1)) * w_stride;

  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;

  const int chunks = K >> 3;  // full 8-element chunks
  int c = tid;
  for (; c + (kUnroll - 1) * kThreads < chunks; c += kUnroll * kThreads) {
    hs::u32x4 xv[kUnroll];
    hs::u32x4 wv[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      xv[u] = hs::load16(x + 8 * (c + u * kThreads));
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = hs::load16_stream(wrow[r] + 8 * (c + u * kThreads));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[r] = hs::dot2<T>(wv[u][r][j], xv[u][j], acc[r]);
  }
  for (; c < chunks; c += kThreads) {
    hs::u32x4 xv = hs::load16(x + 8 * c);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      hs::u32x4 wv = hs::load16_stream(wrow[r] + 8 * c);
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[r] = hs::dot2<T>(wv[j], xv[j], acc[r]);
    }
  }
  // K % 8 tail: one thread, element-wise, so no load crosses column K.
  if ((K & 7) != 0 && tid == kThreads - 1) {
    for (int k = chunks * 8; k < K; ++k) {
      float xk = hs::to_float<T>(x[k]);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = __builtin_fmaf(hs::to_float<T>(wrow[r][k]), xk, acc[r]);
    }
  }

  const int wave = tid / hs::kWave;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s = hs::wave_sum(acc[r]);
    if (tid % hs::kWave == 0) partial[wave][r] = s;
  }
  __syncthreads();
  if (tid < rows) {
    float s = 0.0f;
#pragma unroll
    for (int v = 0; v < kWaves; ++v) s += partial[v][tid];
    if (bias != nullptr) s += hs::to_float<T>(bias[row0 + tid]);
    y[row0 + tid] = hs::from_float<T>(s);
  }
}

}  // namespace

#define HS_GEMV(NAME, T, R)                                                                  \
  extern "C" __global__ void __launch_bounds__(kThreads)                                     \
  NAME(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,                       \
       const uint16_t* __restrict__ bias, uint16_t* __restrict__ y, int M, int K,            \
       int64_t w_stride) {                                                                   \
    gemv<T, R>(x, w, bias, y, M, K, w_stride);                                               \
  }

HS_GEMV(gemv_f16_r1, hs::f16, 1)
HS_GEMV(gemv_f16_r2, hs::f16, 2)
HS_GEMV(gemv_f16_r4, hs::f16, 4)
HS_GEMV(gemv_f16_r8, hs::f16, 8)
HS_GEMV(gemv_bf16_r1, hs::bf16, 1)
HS_GEMV(gemv_bf16_r2, hs::bf16, 2)
HS_GEMV(gemv_bf16_r4, hs::bf16, 4)
HS_GEMV(gemv_bf16_r8, hs::bf16, 8)
