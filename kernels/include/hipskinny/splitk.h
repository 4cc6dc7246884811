// The split-K matrix-unit machinery shared by the larger-N kernel families (skinny_gemm_splitk,
// fp8_linear_splitk): one 16x16 tile multiply per arch (MFMA on gfx942/gfx950, WMMA on
// gfx11/gfx12), where each lane's results sit, the bank-spread LDS layout of staged x and
// the lane's x operand, and the cross-shard reduction through self-cleaning counters.
//
// Work split (both families): a row block is 128 / S output features x all N tokens (S, the
// kernel's slices: 1, or its _s<S> at compile time, `Layout`); a work unit is a run of the
// row blocks' 128-column groups (`Walk`: it may end one row block and begin the next), owned by
// one 256-thread workgroup; its waves form waves / S row groups of 16 * kTiles features (two
// 16-row tiles on wave64, one on wave32; `Layout` may take twice that, in half the row groups) and
// all NT 16-token tiles, and the S waves of a row
// group (slices) take every S-th 128-column group of the unit's part of a row block. Slices
// trade x staged more often for units without partials: a small layer fills more CUs. A and B fragments hold 8
// elements of K per lane at k = 8 * (lane / 16) + e of a step (gfx11 WMMA: all 16 k in both
// 16-lane halves); which columns of K a step covers is the family's choice, the same for A
// and B, so the products pair correctly.
#pragma once

#include "hipskinny/common.h"

namespace hs {
namespace splitk {

constexpr int kThreads = 256;
constexpr int kWaves = kThreads / hs::kWave;
constexpr int kRows = 128;                          // output features per work unit
constexpr int kTiles = kRows / (16 * kWaves);       // 16-row tiles per wave: 2 (wave64), 1 (wave32)
constexpr int kGroups = hs::kWave / 16;             // 16-lane groups, each 8 columns of a step
constexpr int kStep = 8 * kGroups;                  // K columns per matrix instruction (pair on gfx942)
constexpr int kUnroll = 128 / kStep;                // steps per 128-column group
constexpr int kAccs = 256 / hs::kWave;              // fp32 results per lane of a 16x16 tile
constexpr int kLogWaves = kWaves == 8 ? 3 : 2;
constexpr int kLdsArea = 32 * 1024;              // x's LDS area, every split-K kernel's (its dynamic LDS)

// A unit's waves for 2^LG slices (see the top; the kernels' _s<S> variants) and TW 16-row tiles per
// wave (kTiles, or twice that: a unit's 128 / S features then need half the row groups, and its
// waves split its groups one more way -- the planner still sees 128 / S features per unit): the
// slice-0 waves (the first kRowGroups waves) hold the unit's sums after `reduce_slices`.
template <int LG, int TW = kTiles>
struct Layout {
  static_assert(TW == kTiles || TW == 2 * kTiles, "kTiles or twice that per wave");
  static constexpr int kLogSlices = LG + (TW == kTiles ? 0 : 1);
  static constexpr int kSlices = 1 << kLogSlices;
  static constexpr int kUnitRows = kRows >> LG;      // features per unit
  static constexpr int kRowGroups = kWaves >> kLogSlices;
  static_assert(kRowGroups >= 1 && kRowGroups * 16 * TW == kUnitRows, "a slice is at least one wave");
  int row_group;   // this wave's: its features start at 16 * TW * row_group
  int slice;       // this wave's: it takes groups slice, slice + kSlices, ...
  __device__ explicit Layout(int wave)
      : row_group(kLogSlices == 0 ? wave : wave & (kRowGroups - 1)),
        slice(kLogSlices == 0 ? 0 : wave >> (kLogWaves - kLogSlices)) {}
  __device__ inline bool owner() const { return kLogSlices == 0 || slice == 0; }
  // A shard's groups walked in steps: step i covers groups i * kSlices .. + kSlices - 1 (a pass of x
  // in LDS holds whole steps), this wave's group of it is `group(i)`; `loaded(i, groups)` is the
  // same clamped to the shard's last group (loads sit under no branch: splitk.h's `pipelined`).
  static __device__ inline int steps(int groups) { return (groups + kSlices - 1) >> kLogSlices; }
  static __device__ inline int step_first(int i) { return i << kLogSlices; }
  __device__ inline int group(int i) const { return step_first(i) + slice; }
  __device__ inline int loaded(int i, int groups) const { return min(group(i), groups - 1); }
};

#if HS_GFX9
typedef float accv __attribute__((ext_vector_type(4)));
#else
typedef float accv __attribute__((ext_vector_type(8)));
#endif
typedef uint32_t u32x2 __attribute__((ext_vector_type(2)));
typedef uint32_t u32x8 __attribute__((ext_vector_type(8)));

#if defined(__gfx1100__) || defined(__gfx1151__)
#define HS_WMMA11 1
typedef u32x8 frag;   // 16 elements, k = 0..15 of the step, the same in both halves
#else
#define HS_WMMA11 0
typedef hs::u32x4 frag;   // 8 elements, k = 8 * (lane / 16) + e
#endif

// c + A . B for one 16x16 tile and one step: a = x piece (A rows = tokens), b = W piece
// (B columns = features).
template <typename T> __device__ accv mma(frag a, frag b, accv c);

#if defined(__gfx942__)
typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef short short4v __attribute__((ext_vector_type(4)));
template <> __device__ inline accv mma<hs::f16>(frag a, frag b, accv c) {
  c = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(half4, (u32x2){a.x, a.y}),
                                           __builtin_bit_cast(half4, (u32x2){b.x, b.y}), c, 0, 0, 0);
  return __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(half4, (u32x2){a.z, a.w}),
                                              __builtin_bit_cast(half4, (u32x2){b.z, b.w}), c, 0, 0, 0);
}
template <> __device__ inline accv mma<hs::bf16>(frag a, frag b, accv c) {
  c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(short4v, (u32x2){a.x, a.y}),
                                               __builtin_bit_cast(short4v, (u32x2){b.x, b.y}), c, 0, 0, 0);
  return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(short4v, (u32x2){a.z, a.w}),
                                                  __builtin_bit_cast(short4v, (u32x2){b.z, b.w}), c, 0, 0, 0);
}
#elif defined(__gfx950__)
typedef _Float16 half8 __attribute__((ext_vector_type(8)));
typedef __bf16 bf168 __attribute__((ext_vector_type(8)));
template <> __device__ inline accv mma<hs::f16>(frag a, frag b, accv c) {
  return __builtin_amdgcn_mfma_f32_16x16x32_f16(__builtin_bit_cast(half8, a), __builtin_bit_cast(half8, b), c, 0, 0, 0);
}
template <> __device__ inline accv mma<hs::bf16>(frag a, frag b, accv c) {
  return __builtin_amdgcn_mfma_f32_16x16x32_bf16(__builtin_bit_cast(bf168, a), __builtin_bit_cast(bf168, b), c, 0, 0, 0);
}
#elif HS_WMMA11
typedef _Float16 half16 __attribute__((ext_vector_type(16)));
typedef short short16 __attribute__((ext_vector_type(16)));
template <> __device__ inline accv mma<hs::f16>(frag a, frag b, accv c) {
  return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(__builtin_bit_cast(half16, a), __builtin_bit_cast(half16, b), c);
}
template <> __device__ inline accv mma<hs::bf16>(frag a, frag b, accv c) {
  return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(__builtin_bit_cast(short16, a), __builtin_bit_cast(short16, b), c);
}
#else  // gfx1201
typedef _Float16 half8 __attribute__((ext_vector_type(8)));
typedef short short8 __attribute__((ext_vector_type(8)));
template <> __device__ inline accv mma<hs::f16>(frag a, frag b, accv c) {
  return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(__builtin_bit_cast(half8, a), __builtin_bit_cast(half8, b), c);
}
template <> __device__ inline accv mma<hs::bf16>(frag a, frag b, accv c) {
  return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(__builtin_bit_cast(short8, a), __builtin_bit_cast(short8, b), c);
}
#endif

// Native FP8 (the arch's own flavour: FNUZ on gfx942, OCP on gfx950/gfx1201): c + A . B for
// one 16x16 tile and one step from 8 FP8 bytes per lane, a = x piece, b = W piece.
#if defined(__gfx942__) || defined(__gfx950__) || defined(__gfx1201__)
#define HS_FP8_MMA 1
__device__ inline accv mma8(u32x2 a, u32x2 b, accv c) {
#if HS_GFX9
  return __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(__builtin_bit_cast(long, a), __builtin_bit_cast(long, b), c, 0,
                                                   0, 0);
#else
  typedef int int2v __attribute__((ext_vector_type(2)));
  return __builtin_amdgcn_wmma_f32_16x16x16_fp8_fp8_w32_gfx12(__builtin_bit_cast(int2v, a),
                                                             __builtin_bit_cast(int2v, b), c);
#endif
}
#else
#define HS_FP8_MMA 0
#endif

// The launch's work as one walk (every split-K family's): row block b's 128-column groups are
// the flat groups b * B .. b * B + G - 1 (G = ceil(K / 128), B = block_len / 128: G, or G padded to
// whole units), and unit u takes the flat groups [u * L, (u + 1) * L) -- L = unit_len / 128.
// Unpadded (B = G), the units can be a whole number per CU for any row blocks x groups (no CU
// left with a unit more than the others); padded (B a multiple of L), a unit never leaves its row
// block: the row blocks x shards units of equal shards. A unit's part of one row block is a
// segment (unpadded, a unit has two or more when its run crosses a row block's end); a row
// block's segments (its shards) belong to units first .. last and are summed in that order, the
// same bits for any grid, CU count or schedule. L a multiple of G: whole row blocks, nothing
// summed. (Unsigned 32-bit: the ops' grids are at most the units, so positions stay below twice
// blocks x B.)
struct Segment {
  int block, g0, g1;   // the row block and its groups [g0, g1)
};

struct Walk {
  uint32_t G, B, L, total;   // groups per row block, its stride in the walk, groups per unit; blocks x B
  __device__ Walk(int blocks, int K, int unit_len, int block_len)
      : G(((uint32_t)K + 127u) >> 7), B((uint32_t)block_len >> 7), L((uint32_t)unit_len >> 7),
        total(B * (uint32_t)blocks) {}
  // A segment's row block's segments (those of units first .. last), the fp32 partial slot of its
  // first one, the segment's own (u + block: unique, as the walk's segments go). Derived after the
  // segment's groups, from what the walk holds.
  __device__ inline int shards(const Segment& s) const {
    const uint32_t at = (uint32_t)s.block * B;
    return (int)((at + G - 1u) / L - at / L) + 1;
  }
  __device__ inline int first(const Segment& s) const { return (int)((uint32_t)s.block * B / L) + s.block; }
  __device__ inline int slot(const Segment& s) const {
    return (int)(((uint32_t)s.block * B + (uint32_t)s.g0) / L) + s.block;
  }
  // f(segment) for every segment of this workgroup's units (blockIdx.x, + gridDim.x, ...), in
  // order. The loop carries the flat position only: a segment ends at its row block's last group
  // (then on past the padding) or at its unit's end, a multiple of L.
  template <class F>
  __device__ inline void each(const F& f) const {
    for (uint32_t at = blockIdx.x * L; at < total;) {
      const uint32_t block = at / B, g0 = at - block * B, end = at - at % L + L, g1 = min(G, g0 + end - at);
      uint32_t next = g1 == G ? block * B + B : block * B + g1;
      if (next >= end) next = end + (gridDim.x - 1u) * L;   // the unit's end: on to the workgroup's next unit
      f(Segment{(int)block, (int)g0, (int)g1});
      at = next;
    }
  }
};

// Token row (i) and feature column (j) of result r of this lane in a 16x16 tile.
__device__ inline int result_row(int lane, int r) {
#if HS_GFX9
  return 4 * (lane >> 4) + r;
#elif HS_WMMA11
  return 2 * r + (lane >> 4);
#else
  return 8 * (lane >> 4) + r;
#endif
}

// LDS slot of x's 16-byte chunk c of token n: rows of KC / 8 chunks, the chunk index
// xor-ed with n % 16 so that 16 lanes reading one chunk of 16 tokens hit 16 different
// 16-byte bank groups.
template <int KC>
__device__ inline int slot(int n, int c) { return n * (KC / 8) + (c ^ (n & 15)); }

// This lane's x piece for token tile nt at LDS chunk column c (the step's first chunk).
template <int KC>
__device__ inline frag x_piece(const hs::u32x4* xs, int nt, int c, int lane) {
  const int n = 16 * nt + (lane & 15);
#if HS_WMMA11
  const hs::u32x4 lo = xs[slot<KC>(n, c)], hi = xs[slot<KC>(n, c + 1)];
  return u32x8{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#else
  return xs[slot<KC>(n, c + (lane >> 4))];
#endif
}

// A shard's group loop with each group's weight loads issued DEPTH - 1 groups ahead: a ring of
// DEPTH buffers (indices fixed at compile time). load(g, buf) issues group g's loads into buf,
// step(g, buf) uses them; a wave then waits one round trip per DEPTH - 1 groups rather than one per
// group, so a long shard (few shards: few fp32 partials) keeps a short chain. No load sits under a
// branch (the compiler's wait counts would go conservative at the merge and wait for every load):
// the loads ahead of the shard's last group re-read that group (cache hits), and `load` must not
// branch either. Those loads are still in flight when the loop ends. SETTLE waits for them there,
// at once (one round trip): otherwise the compiler waits for them wherever it first reuses one of
// their registers, which can be at the head of a later loop (write_out's rows), and then on every
// iteration of it. (One dword of each buffer: loads return in order, so the wait for the last
// one issued is the wait for all.)
template <int DEPTH, class Buf, bool SETTLE = false, class Load, class Step>
__device__ inline void pipelined(int groups, const Load& load, const Step& step) {
  static_assert(DEPTH >= 2, "a ring of at least two buffers");
  Buf buf[DEPTH];
  const int last = groups - 1;
#pragma unroll
  for (int i = 0; i < DEPTH - 1; ++i) load(min(i, last), buf[i]);
#pragma unroll 1
  for (int g0 = 0; g0 < groups; g0 += DEPTH) {
#pragma unroll
    for (int i = 0; i < DEPTH; ++i) {
      load(min(g0 + i + DEPTH - 1, last), buf[(i + DEPTH - 1) % DEPTH]);
      if (g0 + i < groups) step(g0 + i, buf[i]);
    }
  }
  if constexpr (SETTLE) {
#pragma unroll
    for (int i = 0; i < DEPTH; ++i) {
      uint32_t w;
      __builtin_memcpy(&w, &buf[i], sizeof(w));
      asm volatile("" : : "v"(w));
    }
  }
}

// The output step of a finished row block: what multiplies and adds to a sum, per element.
struct Epilogue {
  const float* w_scale;        // null, or times w_scale[m * ws_stride]
  int64_t ws_stride;
  const float* x_scale;        // null, or times x_scale[n * xs_stride] (after w_scale)
  int64_t xs_stride;
  float unbias;                // the sum times this first (1: none)
  const uint16_t* bias;        // null, or plus bias[n * bias_stride + m] (the output type)
  int64_t bias_stride;
  uint16_t* y;                 // [N, M], rounded to bf16 (out_bf16) or fp16
  bool out_bf16;
};

// y[:, m_block : m_block + rows] from the finished sums of the slice-0 waves, called by the
// whole workgroup. The tiles go through LDS (x's area: rows features x 64 tokens of fp32 per
// round) so the writes are coalesced rows. A thread keeps 4 consecutive features (their w_scale
// read once) and takes every (256 / (rows / 4))-th token row, the row's x_scale and 4 biases
// loaded together: a round trip per row of 4 outputs, not per output (NT = 8, short of
// registers: 1 feature).
template <int NT, int LG, int TW>
__device__ void write_out(const accv (&acc)[TW][NT], float* lds, const Epilogue& e, int N, int M, int m_block,
                          int lane, const Layout<LG, TW>& L) {
  constexpr int kRound = NT < 4 ? NT : 4;   // token tiles per LDS round
  constexpr int kCols = NT < 8 ? 4 : 1, rows = Layout<LG, TW>::kUnitRows, kRowThreads = rows / kCols;
  constexpr int row_step = kThreads / kRowThreads;
  const int col = kCols * (threadIdx.x % kRowThreads), m0 = m_block + col, row0 = threadIdx.x / kRowThreads;
  // the features' w_scale: read once (NT = 8: with each row's operands)
  constexpr bool kKeepScales = NT < 8;
  float ws[kCols];
  auto load_scales = [&]() {
#pragma unroll
    for (int i = 0; i < kCols; ++i) ws[i] = e.w_scale != nullptr && m0 + i < M ? e.w_scale[(int64_t)(m0 + i) * e.ws_stride] : 1.0f;
  };
  if (kKeepScales) load_scales();
#pragma unroll
  for (int c = 0; c < NT; c += kRound) {
    __syncthreads();   // LDS is free (x pass or previous round done)
    if (L.owner()) {
#pragma unroll
      for (int t = 0; t < TW; ++t)
#pragma unroll
        for (int nt = c; nt < c + kRound; ++nt)
#pragma unroll
          for (int r = 0; r < kAccs; ++r)
            lds[(16 * (nt - c) + result_row(lane, r)) * rows + L.row_group * 16 * TW + 16 * t + (lane & 15)] =
                acc[t][nt][r];
    }
    __syncthreads();
    const int n_rows = min(N - 16 * c, 16 * kRound);
    if (m0 >= M) continue;
#pragma unroll 1
    for (int row = row0; row < n_rows; row += row_step) {
      const int n = 16 * c + row;
      if (!kKeepScales) load_scales();
      const float xv = e.x_scale != nullptr ? e.x_scale[(int64_t)n * e.xs_stride] : 1.0f;
      uint16_t bv[kCols];
#pragma unroll
      for (int i = 0; i < kCols; ++i) bv[i] = e.bias != nullptr && m0 + i < M ? e.bias[n * e.bias_stride + m0 + i] : (uint16_t)0;
#pragma unroll
      for (int i = 0; i < kCols; ++i) {
        if (m0 + i >= M) break;
        float v = lds[row * rows + col + i] * e.unbias;
        if (e.w_scale != nullptr) v *= ws[i];
        if (e.x_scale != nullptr) v *= xv;
        if (e.bias != nullptr) v += e.out_bf16 ? hs::to_float<hs::bf16>(bv[i]) : hs::to_float<hs::f16>(bv[i]);
        e.y[(int64_t)n * M + m0 + i] = e.out_bf16 ? hs::from_float<hs::bf16>(v) : hs::from_float<hs::f16>(v);
      }
    }
  }
}

// The unit's slices summed into the slice-0 waves, in slice order (the same bits for any
// schedule): the other waves' tiles go through LDS (x's area, kLdsArea bytes, free after the main
// loop's last pass once every wave has passed the barrier here), as many slices per round as fit:
// one round at NT = 4, S = 2 and twice kTiles per wave (32 KiB); two for the four slices of
// matmul_4bit's _direct kernels (16 KiB a slice). (The one-round case keeps its own form: written
// as the loop's single round, LLVM schedules every split-K kernel differently.)
template <int NT, int LG, int TW>
__device__ inline void reduce_slices(accv (&acc)[TW][NT], void* xs, const Layout<LG, TW>& L, int lane) {
  typedef Layout<LG, TW> Lay;
  if constexpr (Lay::kSlices > 1) {
    constexpr int kPer = TW * NT, kGroupsR = Lay::kRowGroups;   // kPer: accumulators per lane
    constexpr int kSliceBytes = kGroupsR * kPer * hs::kWave * (int)sizeof(accv);
    constexpr int kFit = kLdsArea / kSliceBytes;
    static_assert(kFit >= 1, "a slice's tiles fit x's area");
    accv* lds = reinterpret_cast<accv*>(xs);
    if constexpr (kFit >= Lay::kSlices - 1) {
      __syncthreads();   // every wave is done reading x
      if (!L.owner()) {
        accv* mine = lds + ((L.slice - 1) * kGroupsR + L.row_group) * kPer * hs::kWave + lane;
#pragma unroll
        for (int j = 0; j < kPer; ++j) mine[j * hs::kWave] = acc[j / NT][j % NT];
      }
      __syncthreads();
      if (L.owner()) {
#pragma unroll
        for (int sl = 1; sl < Lay::kSlices; ++sl) {
          const accv* theirs = lds + ((sl - 1) * kGroupsR + L.row_group) * kPer * hs::kWave + lane;
#pragma unroll
          for (int j = 0; j < kPer; ++j) acc[j / NT][j % NT] += theirs[j * hs::kWave];
        }
      }
    } else {
      // kFit slices per round, the owners adding each round's in slice order
#pragma unroll
      for (int s0 = 1; s0 < Lay::kSlices; s0 += kFit) {
        __syncthreads();   // every wave is done reading x, the owners with the previous round
        if (L.slice >= s0 && L.slice < s0 + kFit) {
          accv* mine = lds + ((L.slice - s0) * kGroupsR + L.row_group) * kPer * hs::kWave + lane;
#pragma unroll
          for (int j = 0; j < kPer; ++j) mine[j * hs::kWave] = acc[j / NT][j % NT];
        }
        __syncthreads();
        if (L.owner()) {
#pragma unroll
          for (int sl = s0; sl < s0 + kFit && sl < Lay::kSlices; ++sl) {
            const accv* theirs = lds + ((sl - s0) * kGroupsR + L.row_group) * kPer * hs::kWave + lane;
#pragma unroll
            for (int j = 0; j < kPer; ++j) acc[j / NT][j % NT] += theirs[j * hs::kWave];
          }
        }
      }
    }
  }
}

// Publishes this segment's fp32 tiles (its own slot of `partials`, or added atomically to the
// row block's slot) and counts it in counters[block]. Returns true in the workgroup that
// completes the row block, with the sum of every shard's tiles (in shard order, or the atomic
// sum, whose slot it zeroes) in `acc` and the counter reset; false elsewhere. xs
// (LDS) must be free: it carries the ticket. A lane whose results in a token tile are all past
// the N tokens neither publishes nor reads them (never written out): at N = 4 a gfx9 tile moves
// a quarter of its partial bytes. Atomic slices stay zero there, as every lane that adds also
// reads and zeroes.
template <int NT, bool ATOMIC, int LG, int TW>
__device__ inline bool finish_shards(accv (&acc)[TW][NT], void* xs, float* __restrict__ partials,
                                     uint32_t* __restrict__ counters, const Walk& walk, const Segment& sg,
                                     int N, const Layout<LG, TW>& L) {
  const int block = sg.block, shards = walk.shards(sg);
  // The slice-0 waves (threads 0 .. owners - 1) hold the unit's sums: rows * 16 * NT floats.
  constexpr int owners = kThreads >> Layout<LG, TW>::kLogSlices, unit_floats = owners * TW * NT * kAccs;
  // Whether this lane holds a token below N (its rows start at result_row(lane, 0)). One token
  // tile only (N <= 16): with more, the per-tile lane masks, hoisted out of the merge loop, cost
  // kernels at their SGPR limit spills (bf16 4-bit t2/t4, fp8 t8). The other slices' waves: in
  // the mask at one tile (as cheap as it was); with more, wave-uniform branches around all of it,
  // not a mask on every load (loads under a branch make the compiler wait for each one).
  const bool live = NT > 1 || (L.owner() && result_row(threadIdx.x % hs::kWave, 0) < N);
  // Publish this shard's tile, then count it; the last of the row block finishes it.
  // Slot layout: tile (t, nt) of thread i at ((t * NT + nt) * owners + i) * kAccs floats.
  accv* mine = reinterpret_cast<accv*>(partials + (int64_t)(ATOMIC ? block : walk.slot(sg)) * unit_floats) + threadIdx.x;
  if (NT == 1 || L.owner()) {
#pragma unroll
    for (int t = 0; t < TW; ++t)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        accv* p = mine + (t * NT + nt) * owners;
        if (!live) continue;
        if (ATOMIC) {
#pragma unroll
          for (int r = 0; r < kAccs; ++r) unsafeAtomicAdd(reinterpret_cast<float*>(p) + r, acc[t][nt][r]);
        } else {
          *p = acc[t][nt];
        }
      }
  }
  __threadfence();   // release: the partial tile is visible device-wide before the count
  __syncthreads();
  // x's LDS is free now (the next pass begins with a barrier): it carries the ticket.
  uint32_t* ticket = reinterpret_cast<uint32_t*>(xs);
  if (threadIdx.x == 0) *ticket = atomicAdd(&counters[block], 1u);
  __syncthreads();
  if (*ticket != (uint32_t)(shards - 1)) return false;   // workgroup-uniform

  __threadfence();   // acquire: see every shard's partial tile
  if (threadIdx.x == 0) counters[block] = 0u;   // ready for the next call
  if (NT > 1 && !L.owner()) return true;   // (on to write_out's barriers with the owners)
  accv* first = reinterpret_cast<accv*>(partials + (int64_t)(ATOMIC ? block : walk.first(sg)) * unit_floats) +
                threadIdx.x;
#pragma unroll
  for (int t = 0; t < TW; ++t)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      accv* p = first + (t * NT + nt) * owners;
      if (!live) continue;
      acc[t][nt] = *p;
      if (ATOMIC) *p = accv{};   // clean for the next call
    }
  // The other shards, added in shard order per tile. NT <= 4: kMergeLoads tiles (64 VGPRs, free
  // after the main loop; 32 cost Qwen3 o_proj N = 16's finisher 2 more round trips of 16 shards)
  // loaded per round trip, several shards' at once when a shard has fewer, else a shard in parts;
  // not a round trip per shard and tile. NT = 8 (registers and SGPRs at their limits in fp8_linear's
  // kernels): one tile at a time, as before.
  // (Twice kTiles per wave: 128 VGPRs, so that a round trip still brings two shards' tiles at NT = 4.)
  constexpr int kMergeLoads = 64 * (TW / kTiles) / kAccs, kTileCount = TW * NT;
  constexpr int kPart = kMergeLoads < kTileCount ? kMergeLoads : kTileCount;
  constexpr int kShardsPer = kMergeLoads / kPart;
  if (!ATOMIC && NT >= 8) {
#pragma unroll
    for (int j = 0; j < kTileCount; ++j)
      for (int sh = 1; sh < shards; ++sh)
        acc[j / NT][j % NT] += first[(int64_t)sh * (unit_floats / kAccs) + j * owners];
  } else if (!ATOMIC) {
    for (int sh = 1; sh < shards; sh += kShardsPer) {
#pragma unroll
      for (int j0 = 0; j0 < kTileCount; j0 += kPart) {
        accv v[kShardsPer][kPart];
#pragma unroll
        for (int s = 0; s < kShardsPer; ++s) {
          const accv* q = first + (int64_t)(sh + s) * (unit_floats / kAccs);
#pragma unroll
          for (int g = 0; g < kPart; ++g)
            if (sh + s < shards && j0 + g < kTileCount && live) v[s][g] = q[(j0 + g) * owners];
        }
        __builtin_amdgcn_sched_barrier(0);   // every load issued before the first add waits
#pragma unroll
        for (int s = 0; s < kShardsPer; ++s)
#pragma unroll
          for (int g = 0; g < kPart; ++g)
            if (sh + s < shards && j0 + g < kTileCount && live) acc[(j0 + g) / NT][(j0 + g) % NT] += v[s][g];
        wait_loads();   // (hipskinny/common.h: no wait before each of the next part's loads)
        __builtin_amdgcn_sched_barrier(0);   // and the next part's loads after these adds (registers)
      }
    }
  }
  return true;
}

}  // namespace splitk
}  // namespace hs
