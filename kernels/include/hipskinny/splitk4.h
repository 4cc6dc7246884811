// The split-K skeleton of the packed 4-bit families (matmul_4bit_splitk: bitsandbytes NF4/FP4;
// w4a16_linear_splitk: AWQ/GPTQ int4), parameterized by the one thing they differ in: how a lane's 16
// weight bytes and their scales are loaded and widened to T in registers right before the matrix
// instruction. Everything else is here once: the work split, the K order of the fragments, x
// staged in LDS (optionally gathered through an act-order permutation) or, for a policy of
// kDirectTiles per wave on gfx9 (DIRECT), read straight into registers, the group loop with its
// loads issued groups ahead, the shard reduction (hipskinny/splitk.h) and the write-out.
//
// Work split, tile multiply, shard reduction: hipskinny/splitk.h, as kernels/skinny_gemm_splitk.hip
// (a row block is 128 / S features x all tokens, S slices; a unit is a run of the row blocks'
// 128-column groups, its part of one row block a segment (a shard of it); each wave owns 16 * TW
// features (the policy's kTilesW tiles: kWaveTiles below) and, with S slices, every S-th group of
// the segment; x is staged as T in LDS per
// pass of KC = 1024 / NT columns (32 KiB); the last-arriving workgroup of a row block sums the
// shards in shard order, so results are bitwise the same for any grid, CU count or schedule).
// Within a segment the lane's raw weight bytes and scales of the next groups are
// loaded while the current one is widened and multiplied (three groups ahead at NT = 1, one
// otherwise; weights are widened one matrix step at a time).
//
// K order (the same relabelling for A = x and B = W, so the products pair): a lane's 16 weight
// bytes are 32 consecutive columns of its row (row = lane % 16 of the tile), so one scale serves
// them all (the families' blocks / groups are multiples of 32 columns). Per 128-column group, lane
// group g = lane / 16 loads, per tile, piece j at columns 32 * groups * j + 32 g (wave64: one
// piece, j = 0; gfx1201: two). Step s = 0..3 of piece j takes the piece's dword s: columns
// 32 * groups * j + 32 g + 8 s .. + 7 as the lane's 8 fragment elements, so its x is LDS chunk
// 4 * groups * j + 4 g + s of the lane's token row. gfx11 WMMA needs all 16 columns of a step in
// both 16-lane halves: half h decodes its dword s (columns 64 j + 32 h + 8 s), the halves swap
// their decoded dwords (v_permlanex16), fragment elements 0..7 are half 0's columns and 8..15
// half 1's, read from x chunks 8 j + s and 8 j + 4 + s.
//
// The weight policy W (a small struct the family defines) provides:
//   Row row(int64_t m)                       where row m's bytes and scales live
//   kTilesW                                  its tiles per wave: kTiles or kWaveTiles<NT, LG>
//   void load(Raw&, const Row (&)[kTilesW], int k0, int K, int lane)
//                                            issue the loads of the group at column k0: per tile
//                                            and piece, the 16 bytes at column
//                                            min(k0 + 32 g + 32 groups j, K - 32) and its scale(s)
//   void scales(Scales&, const Raw&, const bool (&valid)[kPieces])
//                                            per group, the raw scales made ready for decode;
//                                            zero for the pieces that are not valid (past K)
//   void decode(const Raw&, const Scales&, int t, int j, int s, uint32_t (&d)[4])
//                                            the 8 weights of dword s of piece j of tile t as four
//                                            dwords of T pairs (columns 2i, 2i + 1 in dword i)
//
// Bounds: rows past M are clamped to M - 1 for loading and never written; tokens past N are zero
// in LDS and never written; a group may reach past K (K is only a multiple of 32): pieces whose
// first column is >= K load the row's last piece instead (in bounds) and decode to zero with
// scale zero (their x is zero in LDS too).
#pragma once

#include "hipskinny/common.h"
#include "hipskinny/splitk.h"

namespace hs {
namespace splitk {

constexpr int kPieces = 4 / kGroups;        // 16-byte pieces per lane and tile in a 128-column group

// 16-row tiles per wave (splitk.h's Layout) a family may take: four at four token tiles and one
// slice on wave64, so that each x operand read from LDS feeds 64 features, not 32 (x's reads were
// 8 LDS bytes per weight byte there, near half of matmul_4bit's LDS traffic); the unit's four waves
// then form two row groups of two slices (occupancy 2 on gfx9: 230 VGPRs). Elsewhere kTiles.
// (matmul_4bit takes it; w4a16_linear keeps kTiles: at four tiles per wave its f16 kernel spills
// SGPRs, and its N = 64 rows are not LDS-bound.) A DIRECT kernel (`run`; gfx9, four token tiles)
// takes kDirectTiles<LG>: every wave holds all 128 / S features of the unit and takes every fourth
// group (four slices of one row group), its x read straight from memory into registers
// (`XDirect`), not staged in LDS, so LDS carries the family's own lookups only; x's bytes from
// cache per weight are what staging reads (16 * NT / features of the unit). (matmul_4bit builds
// it at two slices: 64 features, 64 accumulators per lane.)
template <int NT, int LG>
constexpr int kWaveTiles = (hs::kWave == 64 && NT == 4 && LG == 0) ? 2 * kTiles : kTiles;
template <int LG>
constexpr int kDirectTiles = (4 * kTiles) >> LG;

#if defined(__gfx950__)
#define HS_CVT_PK 1                         // v_cvt_pk_f16_f32 / v_cvt_pk_bf16_f32
#else
#define HS_CVT_PK 0
#endif

typedef float float2v __attribute__((ext_vector_type(2)));

// T(p.x) in bits 15:0, T(p.y) in bits 31:16; p holds fp32 products, each rounded once to T (RNE).
template <typename T> __device__ uint32_t pack2(float2v p);

template <> __device__ inline uint32_t pack2<hs::f16>(float2v p) {
#if HS_CVT_PK
  return __builtin_bit_cast(uint32_t, __builtin_convertvector(p, hs::half2v));
#elif defined(__gfx942__)
  // The second conversion writes the high half in place (SDWA), sparing v_pack_b32_f16.
  uint32_t d;
  asm("v_cvt_f16_f32_e32 %0, %1" : "=v"(d) : "v"(p.x));
  asm("v_cvt_f16_f32_sdwa %0, %1 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:DWORD" : "+v"(d) : "v"(p.y));
  return d;
#else
  // (gfx11's true16 conversions write the halves in place; gfx1201 packs with v_pack_b32_f16.)
  // The barrier keeps the multiply and the conversion apart: fused into v_fma_mix{lo,hi}_f16
  // their rounding would be the instruction's (one rounding of the exact product in the
  // emulator's model), not the fp32 product then fp16.
  asm("" : "+v"(p));
  return __builtin_bit_cast(uint32_t, __builtin_convertvector(p, hs::half2v));
#endif
}

template <> __device__ inline uint32_t pack2<hs::bf16>(float2v p) {
#if HS_CVT_PK
  return __builtin_bit_cast(uint32_t, __builtin_convertvector(p, hs::bf162v));
#else
  // RNE by integer add. Exact for every finite and infinite value; a NaN survives it because its
  // inputs were made the canonical quiet NaN (the family's policy does that): the product is
  // then a NaN whose mantissa cannot carry into the exponent.
  // (Elements copied out first: clang-22's __builtin_bit_cast of a vector element p.y reads p.x.)
  const float px = p.x, py = p.y;
  uint32_t u = __builtin_bit_cast(uint32_t, px), v = __builtin_bit_cast(uint32_t, py);
  u += 0x7fffu + ((u >> 16) & 1u);
  v += 0x7fffu + ((v >> 16) & 1u);
  return __builtin_amdgcn_perm(v, u, 0x07060302u);
#endif
}

// Whether pack2<T> needs canonical NaN inputs.
template <typename T> constexpr bool kCanonical = !HS_CVT_PK && __is_same(T, hs::bf16);

// Any NaN as the canonical quiet NaN (see pack2<bf16>); integer compare, which the compiler
// does not fold away as it may a float one.
__device__ inline float canonical(float v) {
  const uint32_t u = __builtin_bit_cast(uint32_t, v);
  return (u & 0x7fffffffu) > 0x7f800000u ? __builtin_bit_cast(float, 0x7fc00000u) : v;
}

// The B fragment of one step from the lane's four decoded dwords.
__device__ inline frag w_frag(const uint32_t (&d)[4], int lane) {
#if HS_WMMA11
  // Elements 0..7 are half 0's columns, 8..15 half 1's: take the other half's from lane l ^ 16.
  // (fi and bound_ctrl set: no lane keeps its old value, so the compiler need not copy d first.)
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __builtin_amdgcn_permlanex16(d[i], d[i], 0x76543210u, 0xfedcba98u, true, true);
  const bool upper = lane >= 16;
  return upper ? u32x8{o[0], o[1], o[2], o[3], d[0], d[1], d[2], d[3]}
               : u32x8{d[0], d[1], d[2], d[3], o[0], o[1], o[2], o[3]};
#else
  (void)lane;
  return frag{d[0], d[1], d[2], d[3]};
#endif
}

// x of one 128-column group as the lane reads it: slot<KC>(n, c) for n = 16 nt + l (l = lane % 16)
// and c = c0 + o (c0 a multiple of 16, o < 16) is n * KC / 8 + c0 + (o ^ l): a per-lane base
// (row l, chunk c0), a constant per token tile and o ^ l, one xor(-add) per step.
struct XGroup {
  const char* base;   // xs + l * KC / 8 + c0 chunks, in bytes
  uint32_t swz;       // 16 * l (gfx11) or 16 * (4 g ^ l): the lane's part of o ^ l, in bytes
};

template <int KC>
__device__ inline hs::u32x4 x_chunk(const XGroup& xg, int nt, uint32_t o) {
  return *reinterpret_cast<const hs::u32x4*>(xg.base + (xg.swz ^ (16u * o)) + nt * 16 * (KC / 8) * 16);
}

// The A fragment (x) of token tile nt matching step s of piece j.
template <int KC>
__device__ inline frag x_frag(const XGroup& xg, int nt, int j, int s) {
#if HS_WMMA11
  const hs::u32x4 lo = x_chunk<KC>(xg, nt, 8 * j + s), hi = x_chunk<KC>(xg, nt, 8 * j + 4 + s);
  return u32x8{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#else
  return x_chunk<KC>(xg, nt, 4 * kGroups * j + s);   // + 4 g, in swz
#endif
}

// acc += x[:, k0 : k0 + 128] . W[rows, k0 : k0 + 128]^T for this wave's tiles from the group's raw
// operands; c0 is the group's first LDS chunk. A group reaching past K (the last one, when K is
// not a multiple of 128) gives its pieces there scale zero: their bytes (the row's last piece,
// re-read in bounds) decode to zero. One select per tile and piece in every group, rather than a
// second copy of the group for the tail: with two copies the accumulators have two uses and the
// compiler copies all of them at the end of every group.
template <typename T, int NT, int KC, int TW, class W>
__device__ inline void group(accv (&acc)[TW][NT], const W& wt, const typename W::Raw& r, const hs::u32x4* xs,
                             int k0, int c0, int K, int lane) {
  bool valid[kPieces];
#pragma unroll
  for (int j = 0; j < kPieces; ++j) valid[j] = k0 + 32 * (lane >> 4) + 32 * kGroups * j < K;
  typename W::Scales sc;
  wt.scales(sc, r, valid);
  const int l = lane & 15;
  XGroup xg;
  xg.base = reinterpret_cast<const char*>(xs + l * (KC / 8) + c0);
  xg.swz = HS_WMMA11 ? 16u * l : 16u * ((4 * (lane >> 4)) ^ l);
#pragma unroll
  for (int j = 0; j < kPieces; ++j) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      frag b[TW];
#pragma unroll
      for (int t = 0; t < TW; ++t) {
        uint32_t d[4];
        wt.decode(r, sc, t, j, s, d);
        b[t] = w_frag(d, lane);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const frag a = x_frag<KC>(xg, nt, j, s);
#pragma unroll
        for (int t = 0; t < TW; ++t) acc[t][nt] = mma<T>(a, b[t], acc[t][nt]);
#if !HS_GFX9
        // wave32 holds 8 accumulators per tile: keep just one x piece live next to them.
        if (NT > 2) __builtin_amdgcn_sched_barrier(0);
#endif
      }
      // One step's decode, x reads and matrix instructions together: hoisting every step's
      // decode ahead would hold a group's worth of widened weights.
      __builtin_amdgcn_sched_barrier(0);
    }
  }
}

#if HS_GFX9
// x of one 128-column group in registers (DIRECT, wave64: one piece per tile): step s, token
// tile nt is x[16 nt + l, k0 + 32 g + 8 s .. + 7] (l = lane % 16, g = lane / 16), the lane's 8
// fragment elements of that step, as staged x would give them. One copy: each step's x is
// refilled with the next group's as soon as the step's matrix instructions have read it, so it
// is loaded a group ahead in a quarter of the registers a second copy would take.
template <int NT>
struct XDirect {
  hs::u32x4 v[4][NT];
};

// Where the lane's x of the group at column k0 lives in `xb`, a raw buffer over x's N rows: per
// token tile, row_at[nt] ((16 nt + l) x_stride + 32 g elements, in bytes: the same in every group)
// plus, for a lane whose 32 columns start at or past K (a group reaching past K; K is a multiple
// of 32, so a lane's columns are all in or all out), 2^31 -- past the buffer, so it reads zero
// (there the weights decode to zero, but x's bytes past K may be any value, NaN too). Token rows
// past N read zero too: their offset alone is past the buffer (whether or not the hardware counts
// the SGPR offset, 2 k0, in its range check).
template <int NT>
__device__ inline void x_offsets(uint32_t (&at)[NT], const uint32_t (&row_at)[NT], int k0, int K, bool live, int lane) {
  const uint32_t past = live && k0 + 32 * (lane >> 4) < K ? 0u : 0x80000000u;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) at[nt] = row_at[nt] + past;
}

template <int NT>
__device__ inline void load_x_step(hs::u32x4 (&v)[NT], __amdgpu_buffer_rsrc_t xb, const uint32_t (&at)[NT], int k0,
                                   int s) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) v[nt] = __builtin_amdgcn_raw_buffer_load_b128(xb, at[nt] + 16u * s, 2u * (uint32_t)k0, 0);
}

// group() with x in registers: per step, each tile's weights are widened and multiplied by every
// token tile's x (no LDS read, so a tile's decoded dwords live for NT matrix instructions only);
// then the step's x is refilled from the next group (column k0n, offsets `at_next`). A group that
// is not `live` (a wave with none of the segment's groups runs one anyway: see `run`) adds zeros:
// its x reads zero and its scales are zero.
template <typename T, int NT, int TW, class W>
__device__ inline void group_direct(accv (&acc)[TW][NT], const W& wt, const typename W::Raw& r, XDirect<NT>& xr,
                                    int k0, int K, bool live, int lane, __amdgpu_buffer_rsrc_t xb,
                                    const uint32_t (&at_next)[NT], int k0n) {
  static_assert(kPieces == 1, "wave64");
  bool valid[kPieces];
  valid[0] = live && k0 + 32 * (lane >> 4) < K;
  typename W::Scales sc;
  wt.scales(sc, r, valid);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      uint32_t d[4];
      wt.decode(r, sc, t, 0, s, d);
      const frag b = w_frag(d, lane);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[t][nt] = mma<T>(xr.v[s][nt], b, acc[t][nt]);
    }
    load_x_step<NT>(xr.v[s], xb, at_next, k0n, s);
    __builtin_amdgcn_sched_barrier(0);
  }
}
#endif

// x[:, k0 : k0 + len] for 16 * NT token rows into LDS; zero past N and past len. The pass is
// always 2048 chunks, 8 per thread, in rounds of 2 NT whole rows: a thread keeps its chunk column
// c, so only the row (a uniform step) changes between its rounds and all 8 loads go out at once.
// (The 4-bit weights give each pass 4x less work than 16-bit ones, so its staging shows.)
// PERM (a family that takes act-order) and perm not null: column k of the pass is x[n, perm[k]],
// gathered element by element with the chunk's 8 indices loaded once; x then needs no alignment.
// perm is not trusted (one on the GPU is never checked): an entry outside [0, K) reads column
// K - 1, one unsigned min per index.
// (A uniform branch here rather than a template parameter of the whole kernel: one copy of the
// main loop per variant, not two.)
template <int NT, int KC, bool PERM>
__device__ void stage(hs::u32x4* xs, const uint16_t* __restrict__ x, const int32_t* __restrict__ perm,
                      int64_t x_stride, int N, int k0, int len, int K) {
  constexpr int kRowChunks = KC / 8;
  constexpr int kRowsPerRound = kThreads / kRowChunks;
  constexpr int kRounds = 16 * NT / kRowsPerRound;
  static_assert(kRowsPerRound * kRowChunks == kThreads && kRowsPerRound <= 16, "whole rows per round");
  const int c = threadIdx.x % kRowChunks, n0 = threadIdx.x / kRowChunks;
  const bool in_k = 8 * c < len;
  const int64_t step = kRowsPerRound * x_stride;
  hs::u32x4 v[kRounds];
  if (PERM && perm != nullptr) {
    hs::u32x4 p0 = {0u, 0u, 0u, 0u}, p1 = {0u, 0u, 0u, 0u};
    if (in_k) {
      const uint32_t kmax = (uint32_t)K - 1u;
      p0 = hs::load16(perm + k0 + 8 * c);
      p1 = hs::load16(perm + k0 + 8 * c + 4);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        p0[i] = min(p0[i], kmax);
        p1[i] = min(p1[i], kmax);
      }
    }
    const uint16_t* src = x + n0 * x_stride;
#pragma unroll
    for (int r = 0; r < kRounds; ++r, src += step) {
      v[r] = hs::u32x4{0u, 0u, 0u, 0u};
      if (in_k && n0 + kRowsPerRound * r < N) {
        const uint32_t e[8] = {src[p0[0]], src[p0[1]], src[p0[2]], src[p0[3]],
                               src[p1[0]], src[p1[1]], src[p1[2]], src[p1[3]]};
        v[r] = hs::u32x4{e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16};
      }
    }
  } else {
    (void)perm;
    (void)K;
#if HS_GFX9
    if constexpr (!PERM && kRowChunks >= hs::kWave) {
      // A wave's lanes share a row: each round's row is a raw buffer of the pass's len columns,
      // none past N, so rows past N and columns past len read zero with no per-lane test, and the
      // lane's offset (its chunk) is the same in every round and pass. (Not with act-order: next
      // to the gathered path this costs the sliced kernels SGPR spills.)
      const int n0w = __builtin_amdgcn_readfirstlane(n0);
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
        const int n = n0w + kRowsPerRound * r;
        const auto row = hs::buffer(x + n * x_stride + k0, n < N ? 2u * len : 0u);
        v[r] = __builtin_amdgcn_raw_buffer_load_b128(row, 16u * c, 0, 0);
      }
      // slot<KC>(n, c) in bytes, n uniform: 16 (c ^ (n & 15)) touches bits 4..7 only, under the
      // row's (a multiple of 2 KC bytes), so one xor with a uniform value per round and the
      // round's rows as the store's constant offset.
      const uint32_t lane_at = (uint32_t)n0w * 2u * KC + 16u * c;
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
        const uint32_t at = (lane_at ^ (16u * ((n0w + kRowsPerRound * r) & 15))) + 2u * KC * kRowsPerRound * r;
        *reinterpret_cast<hs::u32x4*>(reinterpret_cast<char*>(xs) + at) = v[r];
      }
      return;
    }
#endif
    const uint16_t* src = x + n0 * x_stride + k0 + 8 * c;
#pragma unroll
    for (int r = 0; r < kRounds; ++r, src += step) {
      v[r] = hs::u32x4{0u, 0u, 0u, 0u};
      if (in_k && n0 + kRowsPerRound * r < N) v[r] = hs::load16(src);
    }
  }
#pragma unroll
  for (int r = 0; r < kRounds; ++r) xs[slot<KC>(n0 + kRowsPerRound * r, c)] = v[r];
}

// The whole kernel body over the persistent grid's units, for weights described by the policy wt.
// x [N, x_stride] T (16-byte aligned, x_stride a multiple of 8, unless gathered through perm),
// perm null or int32 [K] (PERM only: 16-byte aligned), bias (null, or bias[n * bias_stride + m]), y [N, M] T,
// partials / counters as hipskinny/splitk.h's finish_shards; K a multiple of 32; unit_len and
// block_len (a unit's run of groups, a row block's stride: hipskinny/splitk.h's Walk) multiples of
// 128; 2^LG slices (hipskinny/splitk.h: at most 8 / NT). Dynamic LDS 32 KiB.
template <typename T, int NT, int LG, bool PERM, bool DIRECT = false, class W>
__device__ void run(const W& wt, const uint16_t* __restrict__ x, const int32_t* __restrict__ perm,
                    const uint16_t* __restrict__ bias, uint16_t* __restrict__ y, float* __restrict__ partials,
                    uint32_t* __restrict__ counters, int N, int M, int K, int64_t x_stride, int64_t bias_stride,
                    int unit_len, int block_len) {
  constexpr int KC = 1024 / NT;                        // columns per LDS pass: 32 KiB of x
  constexpr int kGroupsPerPass = KC / 128;
  extern __shared__ hs::u32x4 xs[];

  const int lane = threadIdx.x % hs::kWave;
  constexpr int TW = W::kTilesW;
  typedef Layout<LG, TW> Lay;
  const Lay L(hs::wave_index());
  const Walk walk((M + Lay::kUnitRows - 1) / Lay::kUnitRows, K, unit_len, block_len);
#if HS_GFX9
  static_assert(!DIRECT || (HS_GFX9 && NT == 4 && TW == kDirectTiles<LG> && Lay::kRowGroups == 1), "DIRECT: gfx9, four slices");
  if constexpr (DIRECT) __syncthreads();   // the family's tables (written before `run`): no pass barrier
#endif

  walk.each([&](const Segment& sg) {
    const int block = sg.block;
    const int m_base = block * Lay::kUnitRows + L.row_group * 16 * TW;
    const int ks = 128 * sg.g0, ke = min(K, 128 * sg.g1);
    const bool active = m_base < M;   // wave-uniform; idle waves still stage x
    typename W::Row row[TW];
#pragma unroll
    for (int t = 0; t < TW; ++t) row[t] = wt.row(min(m_base + 16 * t + (lane & 15), M - 1));

    accv acc[TW][NT];
#pragma unroll
    for (int t = 0; t < TW; ++t)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[t][nt] = accv{};

#if HS_GFX9
    if constexpr (DIRECT) {
      // x straight into registers: the first group's before the loop, each next one's step by step
      // inside it; the weights a group ahead (splitk.h's `pipelined`). Every wave is a slice of the
      // one row group and walks its own groups (slice, slice + 4, ...; no barrier inside the loop),
      // at least one: a wave with none runs a dead one (zeros) rather than a branch around the
      // group, at whose merge the compiler would copy the accumulators.
      const int groups = (ke - ks + 127) / 128;
      const int mine = max(1, (groups - L.slice + Lay::kSlices - 1) >> Lay::kLogSlices);
      // x's N rows as a raw buffer and the lane's byte offset in it per token tile (see x_offsets;
      // the op checks that 16 NT rows of x_stride span under 2^31 bytes).
      const auto xb = hs::buffer(x, 2u * (uint32_t)N * (uint32_t)x_stride);
      uint32_t x_row_at[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        x_row_at[nt] = 2u * (uint32_t)(16 * nt + (lane & 15)) * (uint32_t)x_stride + 64u * (uint32_t)(lane >> 4);
      XDirect<NT> xr;
      uint32_t at[NT];
      int k0x = ks + 128 * L.loaded(0, groups);
      x_offsets<NT>(at, x_row_at, k0x, K, L.group(0) < groups, lane);
#pragma unroll
      for (int s = 0; s < 4; ++s) load_x_step<NT>(xr.v[s], xb, at, k0x, s);
      pipelined<2, typename W::Raw, true>(
          mine,
          [&](int i, typename W::Raw& r) {   // (groups clamped)
            wt.load(r, row, ks + 128 * L.loaded(i, groups), K, lane);
          },
          [&](int i, const typename W::Raw& cur) {
            const int k0 = k0x;
            k0x = ks + 128 * L.loaded(i + 1, groups);
            x_offsets<NT>(at, x_row_at, k0x, K, L.group(i + 1) < groups, lane);
            group_direct<T, NT>(acc, wt, cur, xr, k0, K, L.group(i) < groups, lane, xb, at, k0x);
          });
      // The last group's refills (re-reads, clamped) are in flight: wait for them here, at once
      // (see `pipelined`'s SETTLE).
      asm volatile("" : : "v"(xr.v[3][NT - 1].x));
    } else
#endif
    {
      // The segment's 128-column groups, staged KC columns per pass; this wave's (every slices-th,
      // from its slice on: step i takes group i * slices + slice, a pass holding whole steps) each
      // loaded kDepth - 1 steps ahead (across passes too: splitk.h's `pipelined`), so their latency
      // overlaps the decode and matrix work of the groups before. One token tile (N <= 16) keeps
      // four groups' raw bytes in registers: its accumulators are few, and its shards are long
      // (the planner caps their fp32 partials); more tiles keep two.
      constexpr int kDepth = NT == 1 ? 4 : 2;
      const int groups = (ke - ks + 127) / 128;
      pipelined<kDepth, typename W::Raw, (NT > 1)>(
          Lay::steps(groups),
          [&](int i, typename W::Raw& r) {   // (rows and groups clamped)
            wt.load(r, row, ks + 128 * L.loaded(i, groups), K, lane);
          },
          [&](int i, const typename W::Raw& cur) {
            const int g0 = Lay::step_first(i), g = L.group(i);
            if (g0 % kGroupsPerPass == 0) {
              __syncthreads();   // every wave is done with the previous pass (or unit); tables are written
              stage<NT, KC, PERM>(xs, x, perm, x_stride, N, ks + 128 * g0, min(KC, ke - ks - 128 * g0), K);
              __syncthreads();
            }
            if (!active || g >= groups) return;
            group<T, NT, KC>(acc, wt, cur, xs, ks + 128 * g, 16 * (g % kGroupsPerPass), K, lane);
          });
    }

    reduce_slices<NT>(acc, xs, L, lane);
    if (walk.shards(sg) > 1 && !finish_shards<NT, false>(acc, xs, partials, counters, walk, sg, N, L)) return;
    const Epilogue out{nullptr, 0, nullptr, 0, 1.0f, bias, bias_stride, y, std::is_same<T, hs::bf16>::value};
    write_out<NT>(acc, reinterpret_cast<float*>(xs), out, N, M, block * Lay::kUnitRows, lane, L);
  });
}

}  // namespace splitk
}  // namespace hs
