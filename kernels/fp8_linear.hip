// FP8 linear for decode, small N: y[n, m] = (sum_k x[n, k] * W[m, k]) * scales (+ bias) for
// N = 1..8 tokens, W in FP8 e4m3 (OCP "fn" or FNUZ), x in fp16/bf16 (W8A16) or FP8 (W8A8),
// fp32 accumulation, scales and bias applied in fp32, one rounding to fp16/bf16.
//
// The weights are widened in registers with exact integer operations, on every arch: an
// e4m3 byte's exponent and mantissa shifted into an fp16 are the same value times 2^-8
// (OCP, bias 7) or 2^-7 (FNUZ, bias 8), subnormals included, so the products with the
// 16-bit activations are exact in fp32 (dot2) and the power of two comes back once with
// the scales. NaN encodings (OCP 0x7F/0xFF, FNUZ 0x80) do not survive the shift; each lane
// records them per row in a poison word and the row's sums become NaN. FP8 activations
// (W8A8) are widened the same way, exactly and NaN-preserving, once per workgroup while
// they are staged in LDS. On gfx942/gfx950/gfx1201 W8A8 in the arch's own flavour also has
// kernels on the FP8 instructions (fp8_linear_fp8_*, Native below): x staged as bytes.
//
// Arguments (strides in elements of their operand):
//   x        [N, x_stride]  fp16/bf16 (W8A16) or FP8 bytes (flag kXFp8); 16-byte aligned
//   w        [M, w_stride]  FP8 bytes; 16-byte aligned, w_stride a multiple of 16
//   w_scale  fp32: w_scale[row * ws_stride] (ws_stride 0: per tensor, 1: per channel), or in
//            block mode w_scale[(row / 128) * ws_stride + k / 128] (ws_stride >= ceil(K/128))
//   x_scale  null (W8A16), or fp32 x_scale[n * xs_stride] (0: per tensor, 1: per token), or in
//            block mode x_scale[n * xs_stride + k / 128] (one per token and 128 columns)
//   bias     null, or bias[n * bias_stride + m] in the output dtype (stride 0: one [M] row)
//   y        [N, M] contiguous, fp16 or bf16 (flag kOutBf16)
//   kc       K columns staged in LDS per pass: a multiple of 16; >= K (staged once) or a
//            multiple of 16 * wave size (streamed; a chunk's lane does not depend on the pass)
//   flags    kXFp8, kXFnuz, kOutBf16 (below)
//
// Launch: fp8_linear_<x16>_<ocp|fnuz>[_block]_n<N>_y<YTILE> (x16: f16 for fp16 and widened
// FP8 activations, bf16 for bf16, fp8 for the FP8 instructions; then the weight flavour;
// _block: 128x128 block scales), block (256, 1, 1), any grid, dynamic LDS N * kc * 2 bytes
// (N * kc for fp8) plus, in block mode with x_scale, N * ceil(K / 128) * 4 bytes.
//
// Work split and reduction as kernels/skinny_gemm.hip (hs::lane_split::run; Fp8Linear is its
// body): a wave owns YTILE consecutive rows x
// all N tokens; lane l takes the 16-column chunks g with g % wave == l in increasing g; a
// fixed xor butterfly reduces across lanes. Results are bitwise the same for any grid,
// YTILE, kc or CU count. In block mode each chunk's sums are scaled by its 128-column
// group's scales before they join the accumulator (a chunk never straddles a group, and a
// tile's rows never straddle a 128-row block: YTILE divides 128 and tiles are aligned).
#include "hipskinny/common.h"
#include "hipskinny/loads.h"
#include "hipskinny/fp8.h"
#include "hipskinny/lane_split.h"

namespace {

using hs::nan_bits;
using hs::widen_pair;
using hs::widen_word;

constexpr int kThreads = hs::lane_split::kThreads;
constexpr int kInFlight = 2;  // 16-byte weight loads (32 weights) per lane per unrolled step
constexpr int kGroup = 128;   // columns per block-scale group
constexpr int kChunk = 16;    // columns per lane chunk (16 FP8 bytes, 32 bytes of staged x)

enum Flags : int { kXFp8 = 2, kXFnuz = 4, kOutBf16 = 8 };  // `flags` bits, copied into the manifest (launch_flags) for the planner


// acc + w.lo * x.lo + w.hi * x.hi, w an fp16 pair from widen_pair, x a pair of T.
template <typename T> __device__ float dot_w(uint32_t w, uint32_t x, float acc);

template <> __device__ inline float dot_w<hs::f16>(uint32_t w, uint32_t x, float acc) {
  return hs::dot2<hs::f16>(w, x, acc);
}

template <> __device__ inline float dot_w<hs::bf16>(uint32_t w, uint32_t x, float acc) {
#if defined(__gfx942__)
  // No bf16 dot: the fp16 values and the bf16 x as fp32 (exact), two FMAs.
  const float lo = (float)__builtin_bit_cast(_Float16, (uint16_t)w);
  const float hi = (float)__builtin_bit_cast(_Float16, (uint16_t)(w >> 16));
  const float xlo = __builtin_bit_cast(float, x << 16), xhi = __builtin_bit_cast(float, x & 0xffff0000u);
  return __builtin_fmaf(hi, xhi, __builtin_fmaf(lo, xlo, acc));
#else
  return hs::dot2<hs::bf16>(hs::f16_pair_to_bf16(w), x, acc);
#endif
}

typedef uint32_t u32x2 __attribute__((ext_vector_type(2)));

// Copy x[:, k0 : k0 + len] into LDS as 16-bit rows of kc elements, widening FP8 activations
// (K is a multiple of 16, so every 8-column half is whole). A thread's chunk of up to kRows rows
// is loaded before any is stored: a round trip per kRows rows of a chunk, not per row.
template <int N, int kRows>
__device__ void stage(hs::u32x4* xs, const void* __restrict__ x, int64_t x_stride, int k0, int len, int row_q,
                      int flags) {
  constexpr int kB = N < kRows ? N : kRows;
  const int halves = len >> 3;
  if (flags & kXFp8) {
    const bool fnuz = (flags & kXFnuz) != 0;
    const uint8_t* x8 = static_cast<const uint8_t*>(x);
    if constexpr (kB == 1) {   // row by row (the registers of the largest tiles)
#pragma unroll 1
      for (int n = 0; n < N; ++n)
        for (int c = threadIdx.x; c < halves; c += kThreads) {
          const u32x2 b = *reinterpret_cast<const u32x2*>(x8 + n * x_stride + k0 + 8 * c);
          uint32_t v0, v1, v2, v3;
          widen_word(b.x, fnuz, v0, v1);
          widen_word(b.y, fnuz, v2, v3);
          xs[n * row_q + c] = hs::u32x4{v0, v1, v2, v3};
        }
      return;
    }
#pragma unroll 1
    for (int c = threadIdx.x; c < halves; c += kThreads)
      hs::rows_in_groups<N, kB, u32x2>(
          [&](int n) { return *reinterpret_cast<const u32x2*>(x8 + n * x_stride + k0 + 8 * c); },
          [&](int n, u32x2 b) {
            uint32_t v0, v1, v2, v3;
            widen_word(b.x, fnuz, v0, v1);
            widen_word(b.y, fnuz, v2, v3);
            xs[n * row_q + c] = hs::u32x4{v0, v1, v2, v3};
          });
  } else {
    const uint16_t* x16 = static_cast<const uint16_t*>(x);
    if constexpr (kB == 1) {
#pragma unroll 1
      for (int n = 0; n < N; ++n)
        for (int c = threadIdx.x; c < halves; c += kThreads) xs[n * row_q + c] = hs::load16(x16 + n * x_stride + k0 + 8 * c);
      return;
    }
#pragma unroll 1
    for (int c = threadIdx.x; c < halves; c += kThreads)
      hs::rows_in_groups<N, kB, hs::u32x4>([&](int n) { return hs::load16(x16 + n * x_stride + k0 + 8 * c); },
                                          [&](int n, hs::u32x4 v) { xs[n * row_q + c] = v; });
  }
}

// Copy the FP8 bytes of x[:, k0 : k0 + len] into LDS as they are (rows of row_q 16-byte chunks),
// up to kRows rows of a chunk per round trip.
template <int N, int kRows>
__device__ void stage_bytes(hs::u32x4* xs, const void* __restrict__ x, int64_t x_stride, int k0, int len, int row_q) {
  constexpr int kB = N < kRows ? N : kRows;
  const uint8_t* x8 = static_cast<const uint8_t*>(x);
  if constexpr (kB == 1) {
#pragma unroll 1
    for (int n = 0; n < N; ++n)
      for (int c = threadIdx.x; c < (len >> 4); c += kThreads) xs[n * row_q + c] = hs::load16(x8 + n * x_stride + k0 + 16 * c);
    return;
  }
#pragma unroll 1
  for (int c = threadIdx.x; c < (len >> 4); c += kThreads)
    hs::rows_in_groups<N, kB, hs::u32x4>([&](int n) { return hs::load16(x8 + n * x_stride + k0 + 16 * c); },
                                        [&](int n, hs::u32x4 v) { xs[n * row_q + c] = v; });
}


// The exact-integer widening path: a lane's fp32 sums per (n, r), and per row a poison word
// whose 0x80 bits mark a NaN weight.
template <typename T, bool FNUZ, bool BLOCK, int N, int YTILE>
struct Widened {
  // A float in a struct: the accumulators stay scalars (a plain float array becomes one vector,
  // whose 4-wide operations cost gfx942's bf16 tiles up to 82 VGPRs).
  struct Acc {
    float v;
  };

  // The (n, r) sum of this lane for the cross-lane reduction: NaN if the row has a NaN weight.
  static HS_BODY float value(const Acc (&acc)[N][YTILE], const uint32_t (&poison)[YTILE], int n, int r, int) {
    return (poison[r] & 0x80808080u) ? __builtin_nanf("") : acc[n][r].v;
  }

  // Chunk c (16 columns) of the staged pass against its weight chunks wv[r]. Four columns at
  // a time: their widened weights for every row, then each token's x for them (8 bytes of
  // LDS), so only a few widened dwords and one token's x are live at once.
  static HS_BODY void chunk(Acc (&acc)[N][YTILE], uint32_t (&poison)[YTILE], const hs::u32x4 (&wv)[YTILE],
                            const hs::u32x4* xq, int row_q, int c, const float* gscale, bool = true) {
    const u32x2* xs = reinterpret_cast<const u32x2*>(xq);
    const int row_d = 2 * row_q;
    float s[N][YTILE];
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int r = 0; r < YTILE; ++r) s[n][r] = BLOCK ? 0.0f : acc[n][r].v;
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      uint32_t lo[YTILE], hi[YTILE];
#pragma unroll
      for (int r = 0; r < YTILE; ++r) {
        lo[r] = widen_pair<false>(wv[r][d]);
        hi[r] = widen_pair<true>(wv[r][d]);
        poison[r] |= nan_bits<FNUZ>(wv[r][d]);
      }
#pragma unroll
      for (int n = 0; n < N; ++n) {
        const u32x2 xv = xs[n * row_d + 4 * c + d];
#pragma unroll
        for (int r = 0; r < YTILE; ++r) s[n][r] = dot_w<T>(hi[r], xv.y, dot_w<T>(lo[r], xv.x, s[n][r]));
      }
#if !HS_GFX9
      // One column quad's widened weights live at a time (gfx11/12: 4400 fewer VGPRs over each
      // arch's kernels, 96 a wave per SIMD more).
      __builtin_amdgcn_sched_barrier(0);
#endif
    }
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int r = 0; r < YTILE; ++r) acc[n][r].v = BLOCK ? __builtin_fmaf(s[n][r], gscale[n], acc[n][r].v) : s[n][r];
  }
};

// W8A8 on the FP8 instructions (the arch's own flavour), x staged as its bytes: gfx1201's
// v_dot4_f32_fp8_fp8 (four products per dword into the fp32 sum), gfx942/gfx950's
// v_mfma_f32_16x16x32_fp8_fp8 as a 64-lane dot product: A holds the lane's weight bytes and B
// its x bytes, so the diagonal D[i][i] = sum over lanes i + 16 g of their own 8 products (the
// other 240 results are discarded); lane i + 16 (i / 4) keeps D[i][i] in register i % 4.
// NaN encodings propagate through the instructions (no poison words).
#if defined(__gfx942__) || defined(__gfx950__) || defined(__gfx1201__)
#define HS_FP8_NATIVE 1
#if HS_GFX9
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef f32x4 nacc;
#else
typedef float nacc;
#endif

template <bool BLOCK, int N, int YTILE>
struct Native {
  using Acc = nacc;

  // live = false: a lane past the pass's chunks (its weights are 0; so is its x, which may
  // hold NaN encodings).
  static HS_BODY void chunk(nacc (&acc)[N][YTILE], uint32_t (&)[YTILE], const hs::u32x4 (&wv)[YTILE],
                            const hs::u32x4* xs, int row_q, int c, const float* gscale, bool live = true) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const hs::u32x4 xv = live ? xs[n * row_q + c] : hs::u32x4{0u, 0u, 0u, 0u};
#pragma unroll
      for (int r = 0; r < YTILE; ++r) {
#if HS_GFX9
        f32x4 s = BLOCK ? f32x4{} : acc[n][r];
        s = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(__builtin_bit_cast(long, (u32x2){wv[r].x, wv[r].y}),
                                                      __builtin_bit_cast(long, (u32x2){xv.x, xv.y}), s, 0, 0, 0);
        s = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(__builtin_bit_cast(long, (u32x2){wv[r].z, wv[r].w}),
                                                      __builtin_bit_cast(long, (u32x2){xv.z, xv.w}), s, 0, 0, 0);
#else
        float s = BLOCK ? 0.0f : acc[n][r];
#pragma unroll
        for (int d = 0; d < 4; ++d) s = __builtin_amdgcn_dot4_f32_fp8_fp8(wv[r][d], xv[d], s);
#endif
        if constexpr (BLOCK) acc[n][r] += s * gscale[n];
        else acc[n][r] = s;
      }
    }
  }

  // This lane's share of the (n, r) sum for the cross-lane reduction.
  static HS_BODY float value(const nacc (&acc)[N][YTILE], const uint32_t (&)[YTILE], int n, int r, int lane) {
#if HS_GFX9
    const f32x4 a = acc[n][r];
    const int q = lane & 3;
    const float d = q == 0 ? a.x : q == 1 ? a.y : q == 2 ? a.z : a.w;
    return ((lane & 15) >> 2) == (lane >> 4) ? d : 0.0f;
#else
    (void)lane;
    return acc[n][r];
#endif
  }
};
#else
#define HS_FP8_NATIVE 0
template <bool BLOCK, int N, int YTILE> struct Native;
#endif

template <bool NAT, typename A, typename B> struct pick { using type = A; };
template <typename A, typename B> struct pick<true, A, B> { using type = B; };

// The lane-split body (hipskinny/lane_split.h): x staged (widened, or as bytes for the FP8
// instructions), block mode's activation scales after it in LDS, a path's chunks.
template <typename T, bool FNUZ, bool NAT, bool BLOCK, int N, int YTILE>
struct Fp8Linear : hs::lane_split::Body {
  using Path = typename pick<NAT, Widened<T, FNUZ, BLOCK, N, YTILE>, Native<BLOCK, N, YTILE>>::type;
  using Acc = typename Path::Acc;
  static constexpr bool kUniform = NAT && HS_GFX9;
  static constexpr int U = kInFlight > YTILE ? kInFlight / YTILE : 1;
  // rows of a chunk per round trip: 2, 1 for the 4-row tiles (their registers are scarcest)
  static constexpr int kRows = YTILE >= 4 ? 1 : 2;

  const void* x;
  const uint8_t* w;
  const float* w_scale;
  const float* x_scale;
  const uint16_t* bias;
  uint16_t* y;
  int M, K;
  int64_t x_stride, w_stride, bias_stride;
  int kc, ws_stride, xs_stride, flags;
  int row_q;       // u32x4 per staged row
  int groups;      // 128-column groups of K
  float* xsc;      // block mode: the activation scales of every group, after the staged rows
  bool x_groups;   // block mode with x_scale

  HS_BODY void stage(hs::u32x4* xs, int k0, int len) const {
    if constexpr (NAT) stage_bytes<N, kRows>(xs, x, x_stride, k0, len, row_q);
    else ::stage<N, kRows>(xs, x, x_stride, k0, len, row_q, flags);
  }
  HS_BODY bool prologue(hs::u32x4* xs, bool staged_once) const {
    if (x_groups) {
      for (int i = threadIdx.x; i < N * groups; i += kThreads)
        xsc[i] = x_scale[(i / groups) * (int64_t)xs_stride + i % groups];
    }
    if (staged_once) stage(xs, 0, K);
    return staged_once || x_groups;
  }

  struct Rows {
    uint32_t poison[YTILE];     // the widening path's NaN marks
    const uint8_t* w[YTILE];
    const float* wsb;           // block mode: the tile's 128-row block of w_scale
  };
  HS_BODY void rows(Rows& rows, int m0) const {
#pragma unroll
    for (int r = 0; r < YTILE; ++r) rows.w[r] = w + (int64_t)min(m0 + r, M - 1) * w_stride;
    rows.wsb = w_scale + (int64_t)(min(m0, M - 1) / kGroup) * ws_stride;
#pragma unroll
    for (int r = 0; r < YTILE; ++r) rows.poison[r] = 0u;
  }

  HS_BODY void pass(Rows& rows, Acc (&acc)[N][YTILE], const hs::u32x4* xs, int k0, int len, int lane) const {
    const int full = len / kChunk;
    float gs[N];
    auto scales = [&](int c) {  // block mode: chunk c's group scales per token
      if constexpr (BLOCK) {
        const int g = (k0 + kChunk * c) / kGroup;
        const float sw = rows.wsb[g];
#pragma unroll
        for (int n = 0; n < N; ++n) gs[n] = x_groups ? sw * xsc[n * groups + g] : sw;
      }
    };
    // MFMA needs every lane of the wave: with kUniform the trip counts are the wave's (the
    // unrolled loop while every lane has U chunks, then single chunks, dead lanes adding 0),
    // and the four lanes i + 16 g summed into one diagonal result take four consecutive
    // chunks (of one 128-column group, which block mode scales as one).
    const int pos = kUniform ? 4 * (lane & 15) + (lane >> 4) : lane;
    const int lim = kUniform ? full - (hs::kWave - 1 - pos) : full;
    int c = pos;
    for (; c + (U - 1) * hs::kWave < lim; c += U * hs::kWave) {
      hs::u32x4 wv[U][YTILE];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < YTILE; ++r) wv[u][r] = hs::load16_stream(rows.w[r] + k0 + kChunk * (c + u * hs::kWave));
#pragma unroll
      for (int u = 0; u < U; ++u) {
        scales(c + u * hs::kWave);
        Path::chunk(acc, rows.poison, wv[u], xs, row_q, c + u * hs::kWave, gs);
        // One chunk's LDS reads and widened weights live at a time: left to itself the
        // scheduler hoists the next chunk's too (177 VGPRs instead of 150 on gfx1100).
        __builtin_amdgcn_sched_barrier(0);
      }
    }
    for (; c < (kUniform ? full + pos : full); c += hs::kWave) {
      const bool live = !kUniform || c < full;
      const int cl = live ? c : 0;
      hs::u32x4 wv[YTILE];
#pragma unroll
      for (int r = 0; r < YTILE; ++r)
        wv[r] = live ? hs::load16_stream(rows.w[r] + k0 + kChunk * cl) : hs::u32x4{0u, 0u, 0u, 0u};
      scales(kUniform ? min(c, full - 1) : c);   // a dead lane may hold its set's result: its set's group
      Path::chunk(acc, rows.poison, wv, xs, row_q, cl, gs, live);
    }
  }

  HS_BODY float partial(const Rows& rows, const Acc (&acc)[N][YTILE], int n, int r, int lane) const {
    return Path::value(acc, rows.poison, n, r, lane);
  }

  HS_BODY void store(float sum, int n, int row) const {
    // The widening's powers of two, then the scales, then the bias, all in fp32.
    const float unbias = NAT ? 1.0f
                             : (FNUZ ? 128.0f : 256.0f) * ((flags & kXFp8) ? ((flags & kXFnuz) ? 128.0f : 256.0f) : 1.0f);
    float out = sum * unbias;
    if constexpr (!BLOCK) {
      out *= w_scale[(int64_t)row * ws_stride];
      if (x_scale != nullptr) out *= x_scale[(int64_t)n * xs_stride];
    }
    const bool out_bf16 = (flags & kOutBf16) != 0;
    if (bias != nullptr) {
      const uint16_t b = bias[n * bias_stride + row];
      out += out_bf16 ? hs::to_float<hs::bf16>(b) : hs::to_float<hs::f16>(b);
    }
    y[(int64_t)n * M + row] = out_bf16 ? hs::from_float<hs::bf16>(out) : hs::from_float<hs::f16>(out);
  }
};

// The kernel's arguments as __restrict__ parameters (noalias scopes once inlined).
template <typename T, bool FNUZ, bool NAT, bool BLOCK, int N, int YTILE>
__device__ void fp8_linear(const void* __restrict__ x, const uint8_t* __restrict__ w,
                           const float* __restrict__ w_scale, const float* __restrict__ x_scale,
                           const uint16_t* __restrict__ bias, uint16_t* __restrict__ y, int M, int K,
                           int64_t x_stride, int64_t w_stride, int64_t bias_stride, int kc, int ws_stride,
                           int xs_stride, int flags) {
  extern __shared__ hs::u32x4 xs[];
  const int row_q = NAT ? kc >> 4 : kc >> 3;
  hs::lane_split::run<N, YTILE>(
      Fp8Linear<T, FNUZ, NAT, BLOCK, N, YTILE>{{}, x, w, w_scale, x_scale, bias, y, M, K, x_stride, w_stride,
                                               bias_stride, kc, ws_stride, xs_stride, flags, row_q,
                                               (K + kGroup - 1) / kGroup, reinterpret_cast<float*>(xs + N * row_q),
                                               BLOCK && x_scale != nullptr},
      M, K, kc);
}

}  // namespace

#ifndef HS_FP8_ATTRS
#define HS_FP8_ATTRS
#endif

// One kernel per weight flavour and scale mode: in one body the four would share a register
// allocation that does not fit (it spills on gfx11/12).
#define HS_FP8(T, TAG, FNUZ, NAT, FL, BLOCK, MODE, N, YT)                                              \
  extern "C" __global__ void __launch_bounds__(kThreads) HS_FP8_ATTRS                                  \
  fp8_linear_##TAG##_##FL##MODE##_n##N##_y##YT(                                                        \
      const void* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,      \
      const float* __restrict__ x_scale, const uint16_t* __restrict__ bias, uint16_t* __restrict__ y,   \
      int M, int K, int64_t x_stride, int64_t w_stride, int64_t bias_stride, int kc, int ws_stride,     \
      int xs_stride, int flags) {                                                                      \
    fp8_linear<T, FNUZ, NAT, BLOCK, N, YT>(x, w, w_scale, x_scale, bias, y, M, K, x_stride, w_stride,       \
                                      bias_stride, kc, ws_stride, xs_stride, flags);                   \
  }
#define HS_FP8_MODES(T, TAG, N, YT)                                                                    \
  HS_FP8(T, TAG, false, false, ocp, false, , N, YT) HS_FP8(T, TAG, true, false, fnuz, false, , N, YT) \
  HS_FP8(T, TAG, false, false, ocp, true, _block, N, YT) HS_FP8(T, TAG, true, false, fnuz, true, _block, N, YT)

#define HS_FP8_N4(T, TAG, N) HS_FP8_MODES(T, TAG, N, 1) HS_FP8_MODES(T, TAG, N, 2) HS_FP8_MODES(T, TAG, N, 4)
#define HS_FP8_N2(T, TAG, N) HS_FP8_MODES(T, TAG, N, 1) HS_FP8_MODES(T, TAG, N, 2)
#define HS_FP8_ALL(T, TAG)                                                               \
  HS_FP8_N4(T, TAG, 1) HS_FP8_N4(T, TAG, 2) HS_FP8_N4(T, TAG, 3) HS_FP8_N4(T, TAG, 4) \
  HS_FP8_N2(T, TAG, 5) HS_FP8_N2(T, TAG, 6) HS_FP8_N2(T, TAG, 7) HS_FP8_N2(T, TAG, 8)

HS_FP8_ALL(hs::f16, f16)
HS_FP8_ALL(hs::bf16, bf16)

// W8A8 on the FP8 instructions, in the arch's own flavour only (fp8_linear_fp8_*).
#if HS_FP8_NATIVE
#undef HS_FP8_MODES
#if defined(__gfx942__)
#define HS_FP8_MODES(T, TAG, N, YT) HS_FP8(T, TAG, true, true, fnuz, false, , N, YT) \
  HS_FP8(T, TAG, true, true, fnuz, true, _block, N, YT)
#else
#define HS_FP8_MODES(T, TAG, N, YT) HS_FP8(T, TAG, false, true, ocp, false, , N, YT) \
  HS_FP8(T, TAG, false, true, ocp, true, _block, N, YT)
#endif
HS_FP8_ALL(hs::f16, fp8)
#endif
