// Skinny GEMM for decode, small N: y[n, m] = sum_k x[n, k] * W[m, k] (+ bias), for
// N = 1..8 tokens, fp16 or bf16 in and out, fp32 accumulation, one rounding to the output
// type at the end (bias added in fp32 before it).
//
// Arguments (device pointers to 16-bit elements; strides in elements):
//   x        [N, x_stride]  activations, row n at x + n * x_stride; only K columns are read
//   w        [M, w_stride]  weights, row m at w + m * w_stride; only K columns are read
//   bias     null, or bias[n * bias_stride + m]: bias_stride 0 broadcasts one [M] row over
//                           the tokens, bias_stride >= M gives one row per token ([N, M])
//   y        [N, M]         output, contiguous
//   M, K     any positive values below 2**31
//   x_stride, w_stride      >= K, multiples of 8 (16 bytes); x, w 16-byte aligned
//   kc       K columns staged in LDS per pass: a multiple of 8; either >= K (x staged once
//            per workgroup) or a multiple of 8 * wave size (x streamed in K-chunks)
//
// Launch: kernel skinny_gemm_<dtype>_n<N>_y<YTILE>, block (256, 1, 1), any grid (the op
// uses a persistent grid of up to 4 workgroups per CU, as registers and LDS allow), dynamic LDS
// N * kc * 2 bytes (the op sizes kc from the arch's LDS per workgroup).
//
// Work split (the loop is hs::lane_split::run, hipskinny/lane_split.h; this file is its body:
// staging x, a lane's chunks, the write): a work unit is a tile of YTILE consecutive output rows x all N tokens,
// owned by one wave, which reduces over the whole K across its lanes: lane l takes the
// 8-element (16-byte) chunks g with g % wave == l, in increasing g, 4 weight loads in
// flight (4 / YTILE unrolled steps), dot2 into N * YTILE fp32 accumulators, then one
// fixed xor-butterfly reduce-scatter (DPP inside 16-lane rows; ds_swizzle / permlanex16 /
// ds_bpermute across them) that leaves each output in its own lanes. Waves stride over
// tiles: wave v of workgroup b takes tiles (b * waves + v) + i * (gridDim.x * waves).
// Because a chunk's lane and a lane's order depend only on the arch's wave size (kc is a
// multiple of 8 * wave when x is streamed), and the butterfly tree does not depend on how
// many outputs share it, every output is bitwise the same for any grid, YTILE, kc or CU
// count.
//
// x goes through LDS (x[n, k0 + j] at xs[n * kc + j]) so every token's slice is read from
// global memory once per workgroup and pass, not once per wave. All barriers sit in
// loops whose trip counts are uniform over the workgroup (tile loop by workgroup, K-pass
// loop by K), so every wave reaches every barrier; waves without a tile only stage.
//
// Bounds: rows past M are clamped to M - 1 for loading and never written; every row
// < M of every tile is written by exactly one lane. The K % 8 tail is read element-wise
// (W and x), so nothing past column K is touched; x's tail chunk is zero-padded in LDS.
//
// Variants: N = 1..8, YTILE in {1, 2, 4} with N * YTILE <= 16, dtype f16 / bf16.
//
// Budget: N * YTILE <= 16 fp32 accumulators, 4 weight chunks (16 VGPRs) in flight per
// lane (U = 4 / YTILE unrolled steps), one x chunk per token per step. gfx11/12 are held
// to 96 VGPRs (amdgpu_waves_per_eu(16): full occupancy); the build reports 54-94 there,
// 62-98 on gfx942/gfx950 (4+ waves per SIMD) except bf16 on gfx942, which widens bf16
// pairs in VALU registers: up to 204 (2 waves per SIMD, still the op's two workgroups per
// CU). No spills, no scratch, no static LDS; dynamic LDS N * kc * 2 <= the arch's LDS per
// workgroup (hsaco/manifest.json has the per-kernel counts; tests/skinny_gemm/test_skinny_gemm.py
// asserts them).
#include "hipskinny/common.h"
#include "hipskinny/loads.h"
#include "hipskinny/lane_split.h"

namespace {

constexpr int kThreads = hs::lane_split::kThreads;
constexpr int kInFlight = 4;  // 16-byte weight loads per lane per unrolled step


// Copy x[:, k0 : k0 + len] into LDS rows of kc / 8 chunks (zero past column K).
// Up to 4 of a thread's chunks (its rows of one or several columns) are loaded before any is
// stored: a round trip per 4 chunks, not per row (hs::stage_columns; 8 spill the 4-row tiles of
// N = 4 on gfx11/12).
template <int N>
__device__ void stage_rows(hs::u32x4* xs, const uint16_t* __restrict__ x, int64_t x_stride, int K, int k0,
                      int len, int row_chunks) {
  hs::stage_columns<N, 4, hs::u32x4>(
      threadIdx.x, kThreads, (len + 7) >> 3,
      [&](int n, int c) {
        const int k = k0 + 8 * c;
        const uint16_t* src = x + n * x_stride + k;
        return (k + 8 <= K) ? hs::load16(src) : hs::load_partial(src, K - k);
      },
      [&](int n, int c, hs::u32x4 v) { xs[n * row_chunks + c] = v; });
}

template <typename T, int N, int YTILE, int U>
__device__ inline void step(float (&acc)[N][YTILE], const hs::u32x4 (&wv)[U][YTILE], const hs::u32x4* xs,
                            int row_chunks, int c) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const hs::u32x4 xv = xs[n * row_chunks + c + u * hs::kWave];
#pragma unroll
      for (int r = 0; r < YTILE; ++r)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[n][r] = hs::dot2<T>(wv[u][r][j], xv[j], acc[n][r]);
    }
}

// This lane's share of x[:, k0 : k0 + len] . W[rows, k0 : k0 + len].
template <typename T, int N, int YTILE>
__device__ inline void accumulate(float (&acc)[N][YTILE], const hs::u32x4* xs,
                                  const uint16_t* const (&wrow)[YTILE], int K, int k0, int len,
                                  int row_chunks, int lane) {
  constexpr int U = kInFlight / YTILE;
  const int full = len >> 3;
  int c = lane;
  for (; c + (U - 1) * hs::kWave < full; c += U * hs::kWave) {
    hs::u32x4 wv[U][YTILE];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < YTILE; ++r) wv[u][r] = hs::load16_stream(wrow[r] + k0 + 8 * (c + u * hs::kWave));
    step<T, N, YTILE, U>(acc, wv, xs, row_chunks, c);
  }
  for (; c < full; c += hs::kWave) {
    hs::u32x4 wv[1][YTILE];
#pragma unroll
    for (int r = 0; r < YTILE; ++r) wv[0][r] = hs::load16_stream(wrow[r] + k0 + 8 * c);
    step<T, N, YTILE, 1>(acc, wv, xs, row_chunks, c);
  }
  // The K % 8 tail chunk (only in the last pass) belongs to the lane whose sequence
  // reaches it, like any other chunk; W is read element-wise up to column K.
  if ((len & 7) != 0 && c == full) {
    hs::u32x4 wv[1][YTILE];
#pragma unroll
    for (int r = 0; r < YTILE; ++r) wv[0][r] = hs::load_partial(wrow[r] + k0 + 8 * c, K - (k0 + 8 * c));
    step<T, N, YTILE, 1>(acc, wv, xs, row_chunks, c);
  }
}

// The lane-split body (hipskinny/lane_split.h): x staged as it is, 16-bit weights.
template <typename T, int N, int YTILE>
struct SkinnyGemm : hs::lane_split::Body {
  const uint16_t* x;
  const uint16_t* w;
  const uint16_t* bias;
  uint16_t* y;
  int M, K;
  int64_t x_stride, w_stride, bias_stride;
  int kc;

  HS_BODY bool prologue(hs::u32x4* xs, bool staged_once) const {
    if (staged_once) stage_rows<N>(xs, x, x_stride, K, 0, K, kc >> 3);
    return staged_once;
  }
  HS_BODY void stage(hs::u32x4* xs, int k0, int len) const { stage_rows<N>(xs, x, x_stride, K, k0, len, kc >> 3); }

  typedef const uint16_t* Rows[YTILE];

  HS_BODY void rows(Rows& rows, int m0) const {
#pragma unroll
    for (int r = 0; r < YTILE; ++r) rows[r] = w + (int64_t)min(m0 + r, M - 1) * w_stride;
  }
  HS_BODY void pass(Rows& rows, float (&acc)[N][YTILE], const hs::u32x4* xs, int k0, int len, int lane) const {
    accumulate<T, N, YTILE>(acc, xs, rows, K, k0, len, kc >> 3, lane);
  }

  HS_BODY void store(float sum, int n, int row) const {
    if (bias != nullptr) sum += hs::to_float<T>(bias[n * bias_stride + row]);
    y[(int64_t)n * M + row] = hs::from_float<T>(sum);
  }
};

// The kernel's arguments as __restrict__ parameters (noalias scopes once inlined), as before the skeleton.
template <typename T, int N, int YTILE>
__device__ void skinny_gemm(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                            const uint16_t* __restrict__ bias, uint16_t* __restrict__ y, int M, int K,
                            int64_t x_stride, int64_t w_stride, int64_t bias_stride, int kc) {
  hs::lane_split::run<N, YTILE>(SkinnyGemm<T, N, YTILE>{{}, x, w, bias, y, M, K, x_stride, w_stride, bias_stride, kc},
                                M, K, kc);
}

}  // namespace

#if HS_GFX9
#define HS_SKINNY_ATTRS
#else
// <= 96 VGPRs: the full 16 waves per SIMD, and no s_sendmsg(MSG_DEALLOC_VGPRS) at the end
// (gfx11/12 code below full occupancy ends with it; the emulator does not execute it yet).
#define HS_SKINNY_ATTRS __attribute__((amdgpu_waves_per_eu(16)))
#endif

#define HS_SKINNY(T, TAG, N, YT)                                                             \
  extern "C" __global__ void __launch_bounds__(kThreads) HS_SKINNY_ATTRS                     \
  skinny_gemm_##TAG##_n##N##_y##YT(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w, \
                                   const uint16_t* __restrict__ bias, uint16_t* __restrict__ y,   \
                                   int M, int K, int64_t x_stride, int64_t w_stride,              \
                                   int64_t bias_stride, int kc) {                                 \
    skinny_gemm<T, N, YT>(x, w, bias, y, M, K, x_stride, w_stride, bias_stride, kc);             \
  }

// YTILE 4 only while N * YTILE <= 16: larger tiles do not fit 96 VGPRs on gfx11/12.
#define HS_SKINNY_N4(T, TAG, N) HS_SKINNY(T, TAG, N, 1) HS_SKINNY(T, TAG, N, 2) HS_SKINNY(T, TAG, N, 4)
#define HS_SKINNY_N2(T, TAG, N) HS_SKINNY(T, TAG, N, 1) HS_SKINNY(T, TAG, N, 2)
#define HS_SKINNY_ALL(T, TAG)                                                                    \
  HS_SKINNY_N4(T, TAG, 1) HS_SKINNY_N4(T, TAG, 2) HS_SKINNY_N4(T, TAG, 3) HS_SKINNY_N4(T, TAG, 4) \
  HS_SKINNY_N2(T, TAG, 5) HS_SKINNY_N2(T, TAG, 6) HS_SKINNY_N2(T, TAG, 7) HS_SKINNY_N2(T, TAG, 8)

HS_SKINNY_ALL(hs::f16, f16)
HS_SKINNY_ALL(hs::bf16, bf16)
