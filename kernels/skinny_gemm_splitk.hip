// Skinny GEMM for decode, larger N: y[n, m] = sum_k x[n, k] * W[m, k] (+ bias) for
// N = 9..128 tokens on the matrix units (MFMA on gfx942/gfx950, WMMA on gfx11/gfx12),
// fp16 or bf16 in and out, fp32 accumulation, K split into shards across workgroups.
//
// Arguments (16-bit elements; strides in elements):
//   x        [N, x_stride]  activations; x_stride >= K, a multiple of 8; 16-byte aligned
//   w        [M, w_stride]  weights; w_stride >= K, a multiple of 8; 16-byte aligned
//   bias     null, or bias[n * bias_stride + m] (bias_stride 0 broadcasts one [M] row)
//   y        [N, M]         output, contiguous
//   partials fp32 scratch, a slot of R * 16 * NT floats per segment: units + blocks slots
//            (hipskinny/splitk.h's Walk; blocks = ceil(M / R), R = 128 / S), or one per row block
//            (atomic); unused (may be null) when no row block is split (unit_len a multiple of K's groups)
//   counters ceil(M / R) uint32, zero before the launch and zero again after it
//   N (<= 16 * NT), M, K  positive, below 2**31
//   unit_len              a work unit's run of row-block columns (hipskinny/splitk.h's Walk):
//                         a multiple of 128
//   block_len             a row block's stride in the walk: its columns rounded up to 128, or to
//                         a multiple of unit_len (units within row blocks)
//
// Launch: skinny_gemm_splitk_<dtype>_t<NT>[_s<S>][_atomic] (S slices per unit: 4 at NT = 1, 2; 2 at
// NT = 4; hipskinny/splitk.h), block (256, 1, 1), any grid (the op
// uses up to 4 workgroups per CU), dynamic LDS 16 * NT * KC * 2 = 32 KiB (KC = 1024 / NT).
//
// Work split: a row block is R = 128 / S output features x all N tokens; a work unit is a run
// of the row blocks' 128-column groups (hipskinny/splitk.h's Walk), its part of one row block a
// segment (a K shard of it), owned by one workgroup; workgroups stride over the units. Each wave
// owns 16 * kTiles features (two 16-row tiles on wave64, one on wave32) and all NT 16-token tiles;
// with S slices the S waves of those features take every S-th group of the segment and sum in
// LDS at the end (hipskinny/splitk.h). The segment is walked in passes of KC columns: x's
// slice for the pass (16 * NT rows, zero past N and K) is staged in LDS once per
// workgroup, then each wave multiplies its tiles with A = x (from LDS) and B = W (16
// bytes per lane straight from global memory), 128 columns per group of instructions (one
// token tile: each group's weights loaded while the group before multiplies, splitk.h's
// pipelined).
// Lane l supplies the 8 consecutive k at 8 * (l / 16) of each (wave / 16) * 8-column
// step for row l % 16 -- a relabelling of the documented K order (matrix_layouts.md
// section 1) used for A and B alike, so the products pair correctly. gfx11 WMMA wants A
// and B replicated in both 16-lane halves: x is read that way from LDS, W's two 8-column
// halves are exchanged with v_permlanex16.
//
// Reduction across shards (a row block split into shards > 1 segments): every segment writes its
// fp32 tile to its own slot of `partials` (deterministic) or adds it atomically to one slot per
// row block (`_atomic`), then counts itself in counters[row_block]; the workgroup that brings the
// count to `shards` resets the counter, sums the slots in shard order 0, 1, ... (or
// reads the atomic sum and writes zeros back), adds the bias and writes y. Nothing needs
// clearing between calls. The deterministic sum depends on the shard boundaries and the
// fixed k order inside a shard only, so results are bitwise equal for any grid, CU
// count or schedule; the atomic variant's order follows arrival.
//
// Bounds: rows past M are clamped to M - 1 for loading and never written; columns past K
// are zero in LDS and not loaded from W (K must be a multiple of 8: the op pads host
// inputs and requires it of device tensors); tokens past N are zero in LDS and never written.
#include "hipskinny/common.h"
#include "hipskinny/loads.h"
#include "hipskinny/splitk.h"

namespace {

using namespace hs::splitk;

// x[:, k0 : k0 + len] for 16 * NT token rows into LDS; zero past N and past len.
// A thread's chunks (one column c, every kStep-th token row) are loaded kBatch at a time before
// any is stored: a round trip per batch, not per chunk.
template <int NT, int KC>
__device__ void stage(hs::u32x4* xs, const uint16_t* __restrict__ x, int64_t x_stride, int N, int k0, int len) {
  constexpr int kRowChunks = KC / 8, kStep = kThreads / kRowChunks, kPer = 16 * NT / kStep,
                kBatch = NT == 1 ? kPer : NT >= 8 ? 1 : 4;   // NT = 1: the pass's 8 chunks at once
  static_assert(kStep * kRowChunks == kThreads && kPer % kBatch == 0, "whole rows and batches per pass");
  const int c = threadIdx.x % kRowChunks, n0 = threadIdx.x / kRowChunks;
  const bool in_k = 8 * c < len;
  const uint16_t* src = x + n0 * x_stride + k0 + 8 * c;
#pragma unroll 1   // rolled: one batch's registers
  for (int b = 0; b < kPer; b += kBatch) {
    hs::u32x4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int n = n0 + (b + j) * kStep;
      v[j] = in_k && n < N ? hs::load16(src + (b + j) * kStep * x_stride) : hs::u32x4{0u, 0u, 0u, 0u};
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) xs[slot<KC>(n0 + (b + j) * kStep, c)] = v[j];
  }
}

// The W operand from this lane's 16 bytes (columns 8 * (lane / 16) of the step).
__device__ inline frag w_piece(hs::u32x4 own, int lane) {
#if HS_WMMA11
  // Both halves need all 16 columns: take the other half's 8 from lane l ^ 16.
  hs::u32x4 other;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    other[j] = __builtin_amdgcn_permlanex16(own[j], own[j], 0x76543210u, 0xfedcba98u, false, false);
  const bool upper = lane >= 16;
  const hs::u32x4 lo = upper ? other : own, hi = upper ? own : other;
  return u32x8{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#else
  (void)lane;
  return own;
#endif
}

// This lane's weights of the 128-column group at k0 (TAIL: the group reaches past K, whose
// columns read zero without a load).
template <bool TAIL>
__device__ inline void load_group(hs::u32x4 (&wv)[kUnroll][kTiles], const uint16_t* const (&wrow)[kTiles], int k0,
                                  int K, int lane) {
  const int kl = k0 + 8 * (lane >> 4);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
      wv[u][t] = TAIL ? hs::load16_stream_or_zero(wrow[t], kl + u * kStep, K) : hs::load16_stream(wrow[t] + kl + u * kStep);
}

// The same without a branch around any load (splitk.h's pipelined): columns past K load the
// row's last 8 columns (in bounds) and read zero.
__device__ inline void load_group_clamped(hs::u32x4 (&wv)[kUnroll][kTiles], const uint16_t* const (&wrow)[kTiles],
                                          int k0, int K, int lane) {
  const int kl = k0 + 8 * (lane >> 4);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const int k = kl + u * kStep;
      const hs::u32x4 v = hs::load16_stream(wrow[t] + min(k, K - 8));
      wv[u][t] = k < K ? v : hs::u32x4{0u, 0u, 0u, 0u};
    }
}

// acc += x[:, k0 : k0 + 128] . W[rows, k0 : k0 + 128]^T for this wave's tiles from the group's
// weights wv; c0 is the group's first LDS chunk column.
template <typename T, int NT, int KC>
__device__ inline void multiply(accv (&acc)[kTiles][NT], const hs::u32x4 (&wv)[kUnroll][kTiles], const hs::u32x4* xs,
                                int c0, int lane) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    frag b[kTiles];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) b[t] = w_piece(wv[u][t], lane);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const frag a = x_piece<KC>(xs, nt, c0 + u * kGroups, lane);
#pragma unroll
      for (int t = 0; t < kTiles; ++t) acc[t][nt] = mma<T>(a, b[t], acc[t][nt]);
#if !HS_GFX9
      // wave32 holds 8 accumulators per tile: keep just one x piece live next to them.
      if (NT > 2) __builtin_amdgcn_sched_barrier(0);
#endif
    }
    // Keep each step's LDS reads with its matrix instructions: hoisting all of them
    // (NT pieces per step) ahead of the group runs out of VGPRs at NT = 8.
    __builtin_amdgcn_sched_barrier(0);
  }
}

// One group: its loads, then its products.
template <typename T, int NT, int KC, bool TAIL>
__device__ inline void group(accv (&acc)[kTiles][NT], const hs::u32x4* xs, const uint16_t* const (&wrow)[kTiles],
                             int k0, int c0, int K, int lane) {
  hs::u32x4 wv[kUnroll][kTiles];
  load_group<TAIL>(wv, wrow, k0, K, lane);
  multiply<T, NT, KC>(acc, wv, xs, c0, lane);
}

// A group's weights, one buffer of splitk.h's pipelined ring.
struct Weights {
  hs::u32x4 v[kUnroll][kTiles];
};

template <typename T, int NT, bool ATOMIC, int LG>
__device__ void splitk(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                       const uint16_t* __restrict__ bias, uint16_t* __restrict__ y, float* __restrict__ partials,
                       uint32_t* __restrict__ counters, int N, int M, int K, int64_t x_stride, int64_t w_stride,
                       int64_t bias_stride, int unit_len, int block_len) {
  constexpr int KC = 1024 / NT;                        // columns per LDS pass: 32 KiB of x
  extern __shared__ hs::u32x4 xs[];

  const int lane = threadIdx.x % hs::kWave;
  typedef Layout<LG> Lay;
  const Lay L(hs::wave_index());
  const Walk walk((M + Lay::kUnitRows - 1) / Lay::kUnitRows, K, unit_len, block_len);
  const Epilogue out{nullptr, 0, nullptr, 0, 1.0f, bias, bias_stride, y, std::is_same<T, hs::bf16>::value};

  walk.each([&](const Segment& sg) {
    const int block = sg.block;
    const int m_base = block * Lay::kUnitRows + L.row_group * 16 * kTiles;
    const int ks = 128 * sg.g0, ke = min(K, 128 * sg.g1);
    const bool active = m_base < M;   // wave-uniform; idle waves still stage x
    const uint16_t* wrow[kTiles];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) wrow[t] = w + (int64_t)min(m_base + 16 * t + (lane & 15), M - 1) * w_stride;

    accv acc[kTiles][NT];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[t][nt] = accv{};

    if constexpr (NT == 1 || (HS_GFX9 && NT <= 4)) {
      // Each group's weights are loaded a group ahead, across passes too (splitk.h's `pipelined`:
      // one wait per two groups; settled at the end with more token tiles, whose write-out loops
      // would otherwise wait in each iteration). Step i takes the wave's group i * slices + slice
      // (hipskinny/splitk4.h's `run`, the same walk). Eight tiles wait for each group (registers),
      // and so do two and four on gfx11 / gfx12: measured, the second group's registers cost their
      // occupancy more than the shorter chain gives back (RESULTS: router N = 64 2-3% slower).
      constexpr int kGroupsPerPass = KC / 128;
      const int groups = (ke - ks + 127) / 128;
      pipelined<2, Weights, (NT > 1)>(
          Lay::steps(groups),
          [&](int i, Weights& b) {   // (rows and groups clamped)
            load_group_clamped(b.v, wrow, ks + 128 * L.loaded(i, groups), K, lane);
          },
          [&](int i, const Weights& b) {
            const int g0 = Lay::step_first(i), g = L.group(i), k0 = ks + 128 * g0;
            if (g0 % kGroupsPerPass == 0) {
              __syncthreads();   // every wave is done with the previous pass (or unit)
              stage<NT, KC>(xs, x, x_stride, N, k0, min(KC, ke - k0));
              __syncthreads();
            }
            if (active && g < groups) multiply<T, NT, KC>(acc, b.v, xs, 16 * (g % kGroupsPerPass), lane);
          });
    } else {
      for (int k0 = ks; k0 < ke; k0 += KC) {
        const int len = min(KC, ke - k0);
        __syncthreads();   // every wave is done with the previous pass (or unit)
        stage<NT, KC>(xs, x, x_stride, N, k0, len);
        __syncthreads();
        if (active) {   // the wave's groups of the pass: slice, slice + slices, ...
          int g = L.slice;
          for (; 128 * (g + 1) <= len; g += Lay::kSlices)
            group<T, NT, KC, false>(acc, xs, wrow, k0 + 128 * g, 16 * g, K, lane);
          if (128 * g < len) group<T, NT, KC, true>(acc, xs, wrow, k0 + 128 * g, 16 * g, K, lane);
        }
      }
    }

    reduce_slices<NT>(acc, xs, L, lane);
    if (walk.shards(sg) > 1 && !finish_shards<NT, ATOMIC>(acc, xs, partials, counters, walk, sg, N, L)) return;
    write_out<NT>(acc, reinterpret_cast<float*>(xs), out, N, M, block * Lay::kUnitRows, lane, L);
  });
}

}  // namespace

#define HS_SPLITK(T, TAG, NT, ATOMIC, LG, SUFFIX)                                                 \
  extern "C" __global__ void __launch_bounds__(kThreads)                                         \
  skinny_gemm_splitk_##TAG##_t##NT##SUFFIX(                                                      \
      const uint16_t* __restrict__ x, const uint16_t* __restrict__ w, const uint16_t* __restrict__ bias, \
      uint16_t* __restrict__ y, float* __restrict__ partials, uint32_t* __restrict__ counters, int N, int M, \
      int K, int64_t x_stride, int64_t w_stride, int64_t bias_stride, int unit_len, int block_len) { \
    splitk<T, NT, ATOMIC, LG>(x, w, bias, y, partials, counters, N, M, K, x_stride, w_stride, bias_stride, \
                              unit_len, block_len);                                             \
  }

// (_s<S>: S slices per unit, hipskinny/splitk.h: two or four at one and two token tiles, two at four.)
#define HS_SPLITK_NT(T, TAG, NT, LG, S) HS_SPLITK(T, TAG, NT, false, LG, S) HS_SPLITK(T, TAG, NT, true, LG, S##_atomic)
#define HS_SPLITK_ALL(T, TAG)                                                                            \
  HS_SPLITK_NT(T, TAG, 1, 0, ) HS_SPLITK_NT(T, TAG, 2, 0, ) HS_SPLITK_NT(T, TAG, 4, 0, ) HS_SPLITK_NT(T, TAG, 8, 0, ) \
  HS_SPLITK_NT(T, TAG, 1, 1, _s2) HS_SPLITK_NT(T, TAG, 2, 1, _s2)                                         \
  HS_SPLITK_NT(T, TAG, 1, 2, _s4) HS_SPLITK_NT(T, TAG, 2, 2, _s4) HS_SPLITK_NT(T, TAG, 4, 1, _s2)

HS_SPLITK_ALL(hs::f16, f16)
HS_SPLITK_ALL(hs::bf16, bf16)
