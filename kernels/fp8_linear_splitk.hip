// FP8 linear for decode, larger N: y[n, m] = (sum_k x[n, k] * W[m, k]) * scales (+ bias) for
// N = 9..128 tokens on the matrix units, FP8 e4m3 weights (OCP or FNUZ) widened exactly to
// 16-bit in registers (hipskinny/fp8.h), fp16/bf16 activations or FP8 ones widened in LDS,
// fp32 accumulation, K split into shards across workgroups; scales and bias in fp32. W8A8 in
// the arch's own flavour on gfx942/gfx950 (MFMA 16x16x32 fp8) and gfx1201 (WMMA fp8) takes
// the bytes as they are (fp8_linear_splitk_fp8_*): one FP8 instruction per step, x staged as
// bytes (8 to a 16-byte slot), NaN encodings propagated by the hardware.
//
// Arguments (strides in elements of their operand):
//   x, w, w_scale, x_scale, bias, y, flags   as kernels/fp8_linear.hip (the same modes,
//            scale layouts and flags; K a multiple of 16, x and w 16-byte aligned)
//   partials fp32 scratch, a slot of R * 16 * NT floats per segment: units + blocks slots
//            (hipskinny/splitk.h's Walk; blocks = ceil(M / R), R = 128 / S); unused
//            (may be null) when no row block is split (unit_len a multiple of K's groups)
//   counters ceil(M / R) uint32, zero before the launch and zero again after it
//   N (<= 16 * NT), M, K, unit_len, block_len (multiples of 128: hipskinny/splitk.h's Walk)
//
// Launch: fp8_linear_splitk_<x16|fp8>_<ocp|fnuz>[_block]_t<NT>[_s<S>] (S slices per unit: 4 at NT = 1,
// 2; 2 at NT = 4; hipskinny/splitk.h), block (256, 1, 1), any grid, dynamic
// LDS 32 KiB (x staged as 16-bit: 16 * NT tokens x 1024 / NT columns), plus 512 bytes in block
// mode (the pass's per-token group scales).
//
// Work split, tile multiply, shard reduction: hipskinny/splitk.h, as skinny_gemm_splitk. The
// K order of a fragment (the same for A and B): each 16-lane group loads 16 weight bytes, so a
// pair of steps covers 16 * groups columns, group g taking columns 16 g .. 16 g + 15, the
// first 8 in the first step, the rest in the second. gfx11 WMMA needs every step's 16
// columns in both halves: half h loads step 2 j + h whole and the halves swap (permlanex16).
// In block mode each 128-column group is summed on its own and added to the accumulators
// scaled by its weight-block and per-token scales. A NaN weight encoding makes its feature's
// sums NaN before they are published, so it reaches the output through any shard order.
// Deterministic: results depend on the shard boundaries only (bitwise equal for any grid,
// CU count or schedule).
#include "hipskinny/common.h"
#include "hipskinny/fp8.h"
#include "hipskinny/splitk.h"

namespace {

using namespace hs::splitk;

enum Flags : int { kXFp8 = 2, kXFnuz = 4, kOutBf16 = 8 };  // `flags` bits, copied into the manifest (launch_flags) for the planner (as fp8_linear's)
constexpr int kGroup = 128;
constexpr int kPairs = kUnroll / 2;                  // step pairs per 128-column group

// x[:, k0 : k0 + len] for 16 * NT token rows into LDS as 16-bit (NAT: as the FP8 bytes, 8 to
// a slot); zero past N and past len. A thread's chunks (one column c, every kStep-th token row)
// are loaded kBatch at a time before any is stored: a round trip per batch, not per chunk.
template <int NT, int KC, bool NAT>
__device__ void stage(hs::u32x4* xs, const void* __restrict__ x, int64_t x_stride, int N, int k0, int len,
                      int flags) {
  constexpr int kRowChunks = KC / 8, kStep = kThreads / kRowChunks, kPer = 16 * NT / kStep;
  constexpr int kBatch = NT >= 8 ? 1 : 4;   // (8 at NT = 1 spills SGPRs in the block-scaled kernels)
  static_assert(kStep * kRowChunks == kThreads && kPer % kBatch == 0, "whole rows and batches per pass");
  const bool x8 = NAT || (flags & kXFp8) != 0, fnuz = (flags & kXFnuz) != 0;
  const int c = threadIdx.x % kRowChunks, n0 = threadIdx.x / kRowChunks;
  const bool in_k = 8 * c < len;
  const uint8_t* src8 = static_cast<const uint8_t*>(x) + n0 * x_stride + k0 + 8 * c;
  const uint16_t* src16 = static_cast<const uint16_t*>(x) + n0 * x_stride + k0 + 8 * c;
#pragma unroll 1   // rolled: one batch's registers
  for (int b = 0; b < kPer; b += kBatch) {
    if (x8) {
      u32x2 raw[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int n = n0 + (b + j) * kStep;
        raw[j] = in_k && n < N ? *reinterpret_cast<const u32x2*>(src8 + (b + j) * kStep * x_stride) : u32x2{0u, 0u};
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int at = slot<KC>(n0 + (b + j) * kStep, c);
        if constexpr (NAT) {
          reinterpret_cast<u32x2*>(xs)[at] = raw[j];
        } else {
          uint32_t d0, d1, d2, d3;
          hs::widen_word(raw[j].x, fnuz, d0, d1);
          hs::widen_word(raw[j].y, fnuz, d2, d3);
          xs[at] = hs::u32x4{d0, d1, d2, d3};
        }
      }
    } else if constexpr (!NAT) {
      hs::u32x4 raw[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int n = n0 + (b + j) * kStep;
        raw[j] = in_k && n < N ? hs::load16(src16 + (b + j) * kStep * x_stride) : hs::u32x4{0u, 0u, 0u, 0u};
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) xs[slot<KC>(n0 + (b + j) * kStep, c)] = raw[j];
    }
  }
}

// Block mode: the pass's per-token group scales into LDS after x (16 * NT tokens x KC / 128
// groups = 128 floats; 0 for padded tokens, whose sums are 0; 1 without x_scale (W8A16), so
// the multiply-add needs no branch, which costs the WMMA kernels their registers).
template <int NT, int KC>
__device__ void stage_scales(float* sxs, const float* __restrict__ x_scale, int64_t xs_stride, int N, int K, int g0) {
  constexpr int G = KC / 128;
  for (int i = threadIdx.x; i < 16 * NT * G; i += kThreads) {
    const int n = i / G, g = g0 + i % G;   // groups past K (a pass reaching beyond it) are never used
    sxs[i] = n >= N || 128 * g >= K ? 0.0f : x_scale == nullptr ? 1.0f : x_scale[n * xs_stride + g];
  }
}

// The two steps' W fragments from this lane's 16 weight bytes (its row, its columns).
template <typename T>
__device__ inline void w_frags(hs::u32x4 raw, int lane, frag& first, frag& second) {
  uint32_t d[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) hs::widen4<T>(raw[j], d[2 * j], d[2 * j + 1]);
#if HS_WMMA11
  // d is the whole step 2j + h of this half h; the other half has the other step.
  uint32_t o[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = __builtin_amdgcn_permlanex16(d[j], d[j], 0x76543210u, 0xfedcba98u, false, false);
  const bool upper = lane >= 16;
  const u32x8 own = {d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]};
  const u32x8 other = {o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]};
  first = upper ? other : own;
  second = upper ? own : other;
#else
  (void)lane;
  first = frag{d[0], d[1], d[2], d[3]};
  second = frag{d[4], d[5], d[6], d[7]};
#endif
}

// This lane's x fragment of token tile nt for step h of pair j of the group at LDS chunk c0.
template <int KC>
__device__ inline frag x_frag(const hs::u32x4* xs, int nt, int c0, int j, int h, int lane) {
#if HS_WMMA11
  return x_piece<KC>(xs, nt, c0 + 2 * (2 * j + h), lane);   // step 2 j + h: its two chunks
#else
  return xs[slot<KC>(16 * nt + (lane & 15), c0 + 2 * kGroups * j + 2 * (lane >> 4) + h)];
#endif
}

// This lane's weight bytes of the 128-column group at k0 (zero past K when TAIL).
template <bool TAIL>
__device__ inline void load_group(hs::u32x4 (&wv)[kPairs][kTiles], const uint8_t* const (&wrow)[kTiles], int k0,
                                  int K, int lane) {
  const int kl = k0 + 16 * (lane >> 4);     // group g (gfx11: half h) of each pair of steps
#pragma unroll
  for (int j = 0; j < kPairs; ++j)
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const int k = kl + j * 16 * kGroups;
      wv[j][t] = (!TAIL || k < K) ? hs::load16_stream(wrow[t] + k) : hs::u32x4{0u, 0u, 0u, 0u};
    }
}

// The same without a branch around any load (splitk.h's pipelined): columns past K load the
// row's last 16 bytes again (in bounds). They meet zeros of x in LDS, and an FP8 weight is
// finite or NaN: a NaN among those bytes has already made the feature NaN (a select to zero
// here would wait for the load as soon as it is issued).
__device__ inline void load_group_clamped(hs::u32x4 (&wv)[kPairs][kTiles], const uint8_t* const (&wrow)[kTiles],
                                          int k0, int K, int lane) {
  const int kl = k0 + 16 * (lane >> 4);
#pragma unroll
  for (int j = 0; j < kPairs; ++j)
#pragma unroll
    for (int t = 0; t < kTiles; ++t) wv[j][t] = hs::load16_stream(wrow[t] + min(kl + j * 16 * kGroups, K - 16));
}

// A group's weight bytes, one buffer of splitk.h's pipelined ring.
struct Weights {
  hs::u32x4 v[kPairs][kTiles];
};

// acc[t][nt - LO] += x . W^T over the group for token tiles LO .. HI - 1; with POISON, also
// collects the NaN encodings of the weights. NAT: the FP8 matrix instruction on the bytes as
// they are (NaN encodings propagate by themselves).
template <typename T, bool FNUZ, bool NAT, int KC, int LO, int HI, bool POISON, int NA>
__device__ inline void multiply(accv (&acc)[kTiles][NA], uint32_t (&poison)[kTiles], const hs::u32x4 (&wv)[kPairs][kTiles],
                                const hs::u32x4* xs, int c0, int lane) {
#if HS_FP8_MMA
  if constexpr (NAT) {
    const u32x2* x8 = reinterpret_cast<const u32x2*>(xs);
#pragma unroll
    for (int j = 0; j < kPairs; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int nt = LO; nt < HI; ++nt) {
          const u32x2 a = x8[slot<KC>(16 * nt + (lane & 15), c0 + 2 * kGroups * j + 2 * (lane >> 4) + h)];
#pragma unroll
          for (int t = 0; t < kTiles; ++t) {
            const u32x2 b = h ? u32x2{wv[j][t].z, wv[j][t].w} : u32x2{wv[j][t].x, wv[j][t].y};
            acc[t][nt - LO] = mma8(a, b, acc[t][nt - LO]);
          }
        }
        __builtin_amdgcn_sched_barrier(0);
      }
    return;
  }
#endif
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    frag b[2][kTiles];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      w_frags<T>(wv[j][t], lane, b[0][t], b[1][t]);
      if (POISON) {
#pragma unroll
        for (int q = 0; q < 4; ++q) poison[t] |= hs::nan_bits<FNUZ>(wv[j][t][q]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int nt = LO; nt < HI; ++nt) {
        const frag a = x_frag<KC>(xs, nt, c0, j, h, lane);
#pragma unroll
        for (int t = 0; t < kTiles; ++t) acc[t][nt - LO] = mma<T>(a, b[h][t], acc[t][nt - LO]);
#if !HS_GFX9
        if (HI - LO > 2) __builtin_amdgcn_sched_barrier(0);
#endif
      }
      __builtin_amdgcn_sched_barrier(0);
    }
  }
}

// Block mode: the group's sums of token tiles LO .. HI - 1, scaled by the weight block's scale
// sw and each token's group scale, added to acc.
template <typename T, bool FNUZ, bool NAT, int KC, int LO, int HI, int NT>
__device__ inline void block_mul(accv (&acc)[kTiles][NT], uint32_t (&poison)[kTiles],
                                 const hs::u32x4 (&wv)[kPairs][kTiles], const hs::u32x4* xs, int c0, float sw,
                                 const float* sxs, int gq, int lane) {
  accv part[kTiles][HI - LO];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int nt = 0; nt < HI - LO; ++nt) part[t][nt] = accv{};
  multiply<T, FNUZ, NAT, KC, LO, HI, LO == 0 && !NAT>(part, poison, wv, xs, c0, lane);
  __builtin_amdgcn_sched_barrier(0);   // the scale loads after the sums, not next to every accumulator
#pragma unroll
  for (int nt = LO; nt < HI; ++nt) {
#pragma unroll
    for (int r = 0; r < kAccs; ++r) {
      const float s = sw * sxs[(16 * nt + result_row(lane, r)) * (KC / 128) + gq];
#pragma unroll
      for (int t = 0; t < kTiles; ++t) acc[t][nt][r] = __builtin_fmaf(part[t][nt - LO][r], s, acc[t][nt][r]);
    }
    __builtin_amdgcn_sched_barrier(0);   // one token tile's scale loads live at a time
  }
}

// The same with the group's loads first.
template <typename T, bool FNUZ, bool NAT, int KC, int LO, int HI, bool TAIL, int NT>
__device__ inline void block_part(accv (&acc)[kTiles][NT], uint32_t (&poison)[kTiles],
                                  const uint8_t* const (&wrow)[kTiles], int k0, int K, const hs::u32x4* xs, int c0,
                                  float sw, const float* sxs, int gq, int lane) {
  hs::u32x4 wv[kPairs][kTiles];
  load_group<TAIL>(wv, wrow, k0, K, lane);
  block_mul<T, FNUZ, NAT, KC, LO, HI>(acc, poison, wv, xs, c0, sw, sxs, gq, lane);
}


template <typename T, bool FNUZ, bool NAT, bool BLOCK, int NT, int LG>
__device__ void splitk(const void* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                       const float* __restrict__ x_scale, const uint16_t* __restrict__ bias, uint16_t* __restrict__ y,
                       float* __restrict__ partials, uint32_t* __restrict__ counters, int N, int M, int K,
                       int64_t x_stride, int64_t w_stride, int64_t bias_stride, int unit_len, int block_len, int ws_stride,
                       int xs_stride, int flags) {
  constexpr int KC = 1024 / NT;
  extern __shared__ hs::u32x4 xs[];

  const int lane = threadIdx.x % hs::kWave;
  typedef Layout<LG> Lay;
  const Lay L(hs::wave_index());
  const Walk walk((M + Lay::kUnitRows - 1) / Lay::kUnitRows, K, unit_len, block_len);
  // Block mode: the pass's activation scales after x in LDS.
  float* sxs = reinterpret_cast<float*>(xs + 16 * NT * (KC / 8));
  const float unbias =
      NAT ? 1.0f : (FNUZ ? 128.0f : 256.0f) * ((flags & kXFp8) ? ((flags & kXFnuz) ? 128.0f : 256.0f) : 1.0f);

  walk.each([&](const Segment& sg) {
    const int block = sg.block;
    const int m_base = block * Lay::kUnitRows + L.row_group * 16 * kTiles;
    const int64_t w_block = block >> LG;   // the unit's 128-row block of weight scales (block mode)
    const int ks = 128 * sg.g0, ke = min(K, 128 * sg.g1);
    const bool active = m_base < M;
    const uint8_t* wrow[kTiles];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) wrow[t] = w + (int64_t)min(m_base + 16 * t + (lane & 15), M - 1) * w_stride;

    accv acc[kTiles][NT];
    uint32_t poison[kTiles];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      poison[t] = 0u;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[t][nt] = accv{};
    }

    if constexpr (NT <= 4) {
      // Each group's weight bytes are loaded ahead, across passes too: three groups at one token
      // tile (N <= 16: few accumulators, and long shards, the planner capping their partials), one
      // at two and four (splitk.h's `pipelined`; one wait per two groups). Step i takes the wave's
      // group i * slices + slice (hipskinny/splitk4.h's `run`, the same walk). Eight tiles wait for
      // each group: a second group's registers would spill in block mode.
      constexpr int kGroupsPerPass = KC / 128, kDepth = NT == 1 ? 4 : 2;
      const int groups = (ke - ks + 127) / 128;
      pipelined<kDepth, Weights, (NT > 1)>(
          Lay::steps(groups),
          [&](int i, Weights& b) {   // (rows and groups clamped)
            load_group_clamped(b.v, wrow, ks + 128 * L.loaded(i, groups), K, lane);
          },
          [&](int i, const Weights& b) {
            const int g0 = Lay::step_first(i), g = L.group(i), k0 = ks + 128 * g, gq = g % kGroupsPerPass;
            if (g0 % kGroupsPerPass == 0) {
              __syncthreads();
              stage<NT, KC, NAT>(xs, x, x_stride, N, ks + 128 * g0, min(KC, ke - ks - 128 * g0), flags);
              if (BLOCK) stage_scales<NT, KC>(sxs, x_scale, xs_stride, N, K, (ks + 128 * g0) / kGroup);
              __syncthreads();
            }
            if (!active || g >= groups) return;
            if constexpr (BLOCK) {
              const float sw = w_scale[w_block * ws_stride + k0 / kGroup];
              block_mul<T, FNUZ, NAT, KC, 0, NT>(acc, poison, b.v, xs, 16 * gq, sw, sxs, gq, lane);
            } else {
              multiply<T, FNUZ, NAT, KC, 0, NT, !NAT>(acc, poison, b.v, xs, 16 * gq, lane);
            }
          });
    } else {
      for (int k0 = ks; k0 < ke; k0 += KC) {
        const int len = min(KC, ke - k0);
        __syncthreads();
        stage<NT, KC, NAT>(xs, x, x_stride, N, k0, len, flags);
        if (BLOCK) stage_scales<NT, KC>(sxs, x_scale, xs_stride, N, K, k0 / kGroup);
        __syncthreads();
        if (!active) continue;
#pragma unroll 1  // one group's weights in registers at a time; the wave's: slice, slice + slices, ...
        for (int g = L.slice; 128 * g < len; g += Lay::kSlices) {
          const bool tail = 128 * (g + 1) > len;
          if constexpr (BLOCK) {
            const int gi = (k0 + 128 * g) / kGroup;
            const float sw = w_scale[w_block * ws_stride + gi];
            if (tail)
              block_part<T, FNUZ, NAT, KC, 0, NT, true>(acc, poison, wrow, k0 + 128 * g, K, xs, 16 * g, sw, sxs, g, lane);
            else
              block_part<T, FNUZ, NAT, KC, 0, NT, false>(acc, poison, wrow, k0 + 128 * g, K, xs, 16 * g, sw, sxs, g, lane);
          } else {
            hs::u32x4 wv[kPairs][kTiles];
            if (tail) load_group<true>(wv, wrow, k0 + 128 * g, K, lane);
            else load_group<false>(wv, wrow, k0 + 128 * g, K, lane);
            multiply<T, FNUZ, NAT, KC, 0, NT, !NAT>(acc, poison, wv, xs, 16 * g, lane);
          }
        }
      }
    }

    // A feature's NaN weights were seen by the lanes that load its row: combine them, then
    // make the feature's sums NaN.
#pragma unroll
    for (int t = 0; t < (NAT ? 0 : kTiles); ++t) {
      uint32_t p = poison[t];
#pragma unroll
      for (int d = 16; d < hs::kWave; d *= 2) p |= (uint32_t)__shfl_xor((int)p, d);
      if (p & 0x80808080u) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int r = 0; r < kAccs; ++r) acc[t][nt][r] = __builtin_nanf("");
      }
    }

    reduce_slices<NT>(acc, xs, L, lane);
    if (walk.shards(sg) > 1 && !finish_shards<NT, false>(acc, xs, partials, counters, walk, sg, N, L)) return;
    // outside block mode the scales apply per output (block mode scaled each group's sums)
    write_out<NT>(acc, reinterpret_cast<float*>(xs),
                  Epilogue{BLOCK ? nullptr : w_scale, ws_stride, BLOCK ? nullptr : x_scale, xs_stride, unbias, bias,
                           bias_stride, y, (flags & kOutBf16) != 0},
                  N, M, block * Lay::kUnitRows, lane, L);
  });
}

}  // namespace

#define HS_FP8_SPLITK(T, TAG, FNUZ, NAT, FL, BLOCK, MODE, NT, LG, S)                                       \
  extern "C" __global__ void __launch_bounds__(kThreads) fp8_linear_splitk_##TAG##_##FL##MODE##_t##NT##S(   \
      const void* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,          \
      const float* __restrict__ x_scale, const uint16_t* __restrict__ bias, uint16_t* __restrict__ y,       \
      float* __restrict__ partials, uint32_t* __restrict__ counters, int N, int M, int K, int64_t x_stride, \
      int64_t w_stride, int64_t bias_stride, int unit_len, int block_len, int ws_stride, int xs_stride, int flags) { \
    splitk<T, FNUZ, NAT, BLOCK, NT, LG>(x, w, w_scale, x_scale, bias, y, partials, counters, N, M, K, x_stride, \
                                        w_stride, bias_stride, unit_len, block_len, ws_stride, xs_stride, flags); \
  }
// (_s<S>: S slices per unit, hipskinny/splitk.h: two or four at one and two token tiles, two at four.)
#define HS_FP8_SPLITK_MODES(T, TAG, NT, LG, S)                                                                    \
  HS_FP8_SPLITK(T, TAG, false, false, ocp, false, , NT, LG, S)                                                     \
  HS_FP8_SPLITK(T, TAG, true, false, fnuz, false, , NT, LG, S)                                                     \
  HS_FP8_SPLITK(T, TAG, false, false, ocp, true, _block, NT, LG, S)                                                \
  HS_FP8_SPLITK(T, TAG, true, false, fnuz, true, _block, NT, LG, S)
#define HS_FP8_SPLITK_ALL(T, TAG)                                                                                 \
  HS_FP8_SPLITK_MODES(T, TAG, 1, 0, ) HS_FP8_SPLITK_MODES(T, TAG, 2, 0, ) HS_FP8_SPLITK_MODES(T, TAG, 4, 0, )       \
  HS_FP8_SPLITK_MODES(T, TAG, 8, 0, ) HS_FP8_SPLITK_MODES(T, TAG, 1, 1, _s2) HS_FP8_SPLITK_MODES(T, TAG, 2, 1, _s2) \
  HS_FP8_SPLITK_MODES(T, TAG, 1, 2, _s4) HS_FP8_SPLITK_MODES(T, TAG, 2, 2, _s4) \
  HS_FP8_SPLITK_MODES(T, TAG, 4, 1, _s2)

HS_FP8_SPLITK_ALL(hs::f16, f16)
HS_FP8_SPLITK_ALL(hs::bf16, bf16)

// W8A8 on the FP8 matrix instructions, in the arch's own flavour only (fp8_linear_splitk_fp8_*).
#if HS_FP8_MMA
#if defined(__gfx942__)
#define HS_FP8_NATIVE(NT, LG, S) HS_FP8_SPLITK(hs::f16, fp8, true, true, fnuz, false, , NT, LG, S) \
  HS_FP8_SPLITK(hs::f16, fp8, true, true, fnuz, true, _block, NT, LG, S)
#else
#define HS_FP8_NATIVE(NT, LG, S) HS_FP8_SPLITK(hs::f16, fp8, false, true, ocp, false, , NT, LG, S) \
  HS_FP8_SPLITK(hs::f16, fp8, false, true, ocp, true, _block, NT, LG, S)
#endif
HS_FP8_NATIVE(1, 0, ) HS_FP8_NATIVE(2, 0, ) HS_FP8_NATIVE(4, 0, ) HS_FP8_NATIVE(8, 0, )
HS_FP8_NATIVE(1, 1, _s2) HS_FP8_NATIVE(2, 1, _s2) HS_FP8_NATIVE(1, 2, _s4) HS_FP8_NATIVE(2, 2, _s4) HS_FP8_NATIVE(4, 1, _s2)
#endif
