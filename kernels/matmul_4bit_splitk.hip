// bitsandbytes 4-bit (NF4/FP4) fused dequant + GEMM for decode, larger N: y[n, m] = sum_k x[n, k] *
// T(code[q(m, k)] * scale(block(m, k))) (+ bias) for N = 9..64 tokens on the matrix units (MFMA on
// gfx942/gfx950, WMMA on gfx11/gfx12), fp16/bf16 x and y (T), fp32 accumulation, K split into
// shards across workgroups. Each weight is widened to T in registers right before the matrix
// instruction as the fp32 product code * scale rounded once to T (RNE, NaN stays NaN): the very
// values bitsandbytes' dequantize gives, so the only other rounding is the fp32 accumulation.
//
// Arguments:
//   x        [N, x_stride] T; 16-byte aligned, x_stride a multiple of 8 elements
//   w        bitsandbytes' packed bytes of W [M, K]: row m at byte m * K / 2, flat element 2j in the
//            HIGH nibble of byte j, 2j + 1 in the low one; 16-byte aligned
//   absmax   block scales, flat block b = (m * K + k) >> log2_bs: fp32 [M * K >> log2_bs], or uint8
//            codes when nested (flags & 1): scale = fmaf(code2[absmax[b]], absmax2[b >> 8], *offset)
//   absmax2  fp32 [ceil(blocks / 256)], code2 fp32 [256], offset fp32 [1] (nested; else unused)
//   code     fp32 [16], the codebook (one kernel for NF4 and FP4)
//   bias     null, or bias[n * bias_stride + m] in T (stride 0: one [M] row), added in fp32
//   y        [N, M] T, contiguous; one rounding of sum + bias
//   partials fp32 scratch, shards * ceil(M / 128) * 128 * 16 * NT floats; unused (may be null)
//            when shards == 1
//   counters ceil(M / 128) uint32, zero before the launch and zero again after it
//   N (<= 16 * NT), M, K (a multiple of the blocksize, hence of 32), x_stride, bias_stride,
//   shard_len (a multiple of 128; shards = ceil(K / shard_len)), log2_bs (5..12), flags
//   Limits: M * K >> log2_bs < 2^30 blocks (scale byte offsets are 32-bit).
//
// Launch: matmul_4bit_splitk_<f16|bf16>_t<NT>, NT = 1, 2, 4, block (256, 1, 1), any grid, dynamic
// LDS 16 * NT * KC * 2 = 32 KiB (KC = 1024 / NT), plus 1088 static bytes (codebook and code2) --
// just over half of gfx942's 64 KiB: one workgroup per CU there (two need <= 32 KiB in all).
//
// Work split, tile multiply, shard reduction: hipskinny/splitk.h, as kernels/skinny_gemm_splitk.hip
// (a unit is 128 features x all tokens x one K shard; each wave owns 128 / waves features; x is
// staged as T in LDS per pass of KC columns; the last-arriving workgroup of a row block sums the
// shards in shard order, so results are bitwise the same for any grid, CU count or schedule).
// Deterministic variant only. Within a shard the lane's raw weight bytes and block scales of the
// next 128-column group are loaded while the current one is decoded and multiplied (two groups'
// raw bytes in registers; weights are widened one matrix step at a time).
//
// K order (the same relabelling for A = x and B = W, so the products pair): a lane's 16 weight
// bytes are 32 consecutive columns of its row (row = lane % 16 of the tile), so one block scale
// serves them all. Per 128-column group, lane group g = lane / 16 loads, per tile, piece j at
// columns 32 * groups * j + 32 g (wave64: one piece, j = 0; gfx1201: two). Step s = 0..3 of piece
// j takes the piece's dword s: columns 32 * groups * j + 32 g + 8 s .. + 7 as the lane's 8
// fragment elements, so its x is LDS chunk 4 * groups * j + 4 g + s of the lane's token row.
// gfx11 WMMA needs all 16 columns of a step in both 16-lane halves: half h decodes its dword s
// (columns 64 j + 32 h + 8 s), the halves swap their decoded dwords (v_permlanex16), fragment
// elements 0..7 are half 0's columns and 8..15 half 1's, read from x chunks 8 j + s and 8 j + 4 + s.
//
// Dequant per weight byte: one lookup address each nibble (codebook in LDS at nibble * 4: two
// shifts per dword and one mask per lookup, the mask an SDWA byte select on gfx9), one fp32
// multiply per weight (v_pk_mul_f32 on pairs on gfx9), one conversion per weight with the pair
// packed in place (v_cvt_pk_* on gfx950, SDWA / true16 halves on gfx942 / gfx11; bf16 elsewhere
// by integer RNE). About 100 (f16) / 150 (bf16) VALU per 16 weight bytes per row on gfx942, 85
// on gfx950, 145 / 180 on gfx1201, 180 / 230 on gfx11 (the half exchange).
//
// Bounds: rows past M are clamped to M - 1 for loading and never written; tokens past N are zero
// in LDS and never written; a group may reach past K (K is only a multiple of 32): pieces whose
// first column is >= K load the row's last piece instead (in bounds) and decode to zero (their x
// is zero in LDS too).
#include "hipskinny/common.h"
#include "hipskinny/splitk.h"

namespace {

using namespace hs::splitk;

constexpr int kNested = 1;                  // flags
constexpr int kPieces = 4 / kGroups;        // 16-byte pieces per lane and tile in a 128-column group

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
  // emulator's model), not bitsandbytes' fp32 product then fp16.
  asm("" : "+v"(p));
  return __builtin_bit_cast(uint32_t, __builtin_convertvector(p, hs::half2v));
#endif
}

template <> __device__ inline uint32_t pack2<hs::bf16>(float2v p) {
#if HS_CVT_PK
  return __builtin_bit_cast(uint32_t, __builtin_convertvector(p, hs::bf162v));
#else
  // RNE by integer add. Exact for every finite and infinite value; a NaN survives it because its
  // inputs were made the canonical quiet NaN (codebook at set-up, scale per piece): the product
  // is then a NaN whose mantissa cannot carry into the exponent.
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

// Codebook byte offsets (nibble * 4) of byte B of w: hi holds the high nibbles, lo the low ones,
// given as prepared by decode.
template <int B>
__device__ inline uint32_t nibble_offset(uint32_t prepared) {
#if HS_GFX9
  // One SDWA and per lookup on the shifted word: its byte B masked to the nibble's bits.
  uint32_t a;
  asm("v_and_b32_sdwa %0, 60, %1 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:BYTE_%c2"
      : "=v"(a) : "v"(prepared), "i"(B));
  return a;
#else
  return (prepared >> (8 * B)) & 0xffu;   // prepared is masked already
#endif
}

// Eight weights (one dword: bytes 0..3, high nibble first) as four dwords of T pairs.
template <typename T>
__device__ inline void decode(uint32_t w, float s, const float* code, uint32_t (&d)[4]) {
#if HS_GFX9
  // The nibbles' codebook byte offsets: bits 4..7 (2..5) of each byte of w >> 2 (w << 2).
  const uint32_t hi = w >> 2, lo = w << 2;
#else
  // Every nibble as a codebook byte offset at once, then one extraction per lookup; opaque so
  // that the masks are not folded back into each lookup.
  uint32_t hi = (w >> 2) & 0x3c3c3c3cu, lo = (w << 2) & 0x3c3c3c3cu;
  asm("" : "+v"(hi), "+v"(lo));
#endif
  const char* cb = reinterpret_cast<const char*>(code);
  const auto lookup = [&](uint32_t off) { return *reinterpret_cast<const float*>(cb + off); };
  // High nibble = the lower column. gfx9 multiplies a pair at once (v_pk_mul_f32).
  d[0] = pack2<T>((float2v){lookup(nibble_offset<0>(hi)), lookup(nibble_offset<0>(lo))} * s);
  d[1] = pack2<T>((float2v){lookup(nibble_offset<1>(hi)), lookup(nibble_offset<1>(lo))} * s);
  d[2] = pack2<T>((float2v){lookup(nibble_offset<2>(hi)), lookup(nibble_offset<2>(lo))} * s);
  d[3] = pack2<T>((float2v){lookup(nibble_offset<3>(hi)), lookup(nibble_offset<3>(lo))} * s);
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

// Where a lane's row of one tile lives: its packed bytes and its first block's flat index.
struct Row {
  const uint8_t* w;
  uint32_t block;
};

// The lane's raw operands of one 128-column group: per tile and piece the 16 weight bytes and
// the block scale (nested: the absmax code and its absmax2, decoded at use).
struct Raw {
  hs::u32x4 w[kTiles][kPieces];
  float s[kTiles][kPieces];
  uint32_t q[kTiles][kPieces];
};

// Issues the loads of the group at k0. A piece past K (K is only a multiple of 32) loads the
// row's last piece instead: always in bounds, and group<TAIL> zeroes its weights.
// Block byte offsets are 32-bit (blocks < 2^30), so those loads take the tables' bases in SGPRs.
template <bool NESTED>
__device__ inline void load_group(Raw& r, const Row (&row)[kTiles], const void* __restrict__ absmax,
                                  const float* __restrict__ absmax2, int k0, int K, int log2_bs, int lane) {
#pragma unroll
  for (int j = 0; j < kPieces; ++j) {
    const uint32_t k = min(k0 + 32 * (lane >> 4) + 32 * kGroups * j, K - 32);
    const uint32_t kb = k >> log2_bs;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const uint32_t blk = row[t].block + kb;
      r.w[t][j] = hs::load16_stream(row[t].w + (k >> 1));
      if constexpr (NESTED) {
        r.q[t][j] = static_cast<const uint8_t*>(absmax)[blk];
        r.s[t][j] = *reinterpret_cast<const float*>(reinterpret_cast<const char*>(absmax2) + ((blk >> 8) << 2));
      } else {
        r.s[t][j] = *reinterpret_cast<const float*>(static_cast<const char*>(absmax) + (blk << 2));
      }
    }
  }
}

// acc += x[:, k0 : k0 + 128] . W[rows, k0 : k0 + 128]^T for this wave's tiles from the group's raw
// operands; c0 is the group's first LDS chunk. TAIL: the group reaches past K, whose pieces
// there decode to zero.
template <typename T, bool NESTED, bool TAIL, int NT, int KC>
__device__ inline void group(accv (&acc)[kTiles][NT], const Raw& r, const hs::u32x4* xs, const float* code,
                             const float* code2, float offset, int k0, int c0, int K, int lane) {
  float sc[kTiles][kPieces];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int j = 0; j < kPieces; ++j) {
      if constexpr (NESTED) sc[t][j] = __builtin_fmaf(code2[r.q[t][j]], r.s[t][j], offset);
      else sc[t][j] = r.s[t][j];
      if constexpr (kCanonical<T>) sc[t][j] = canonical(sc[t][j]);
    }
  const int l = lane & 15;
  XGroup xg;
  xg.base = reinterpret_cast<const char*>(xs + l * (KC / 8) + c0);
  xg.swz = HS_WMMA11 ? 16u * l : 16u * ((4 * (lane >> 4)) ^ l);
#pragma unroll
  for (int j = 0; j < kPieces; ++j) {
    const bool valid = !TAIL || k0 + 32 * (lane >> 4) + 32 * kGroups * j < K;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      frag b[kTiles];
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        uint32_t d[4];
        decode<T>(r.w[t][j][s], sc[t][j], code, d);
        if (!valid) {
#pragma unroll
          for (int i = 0; i < 4; ++i) d[i] = 0u;
        }
        b[t] = w_frag(d, lane);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const frag a = x_frag<KC>(xg, nt, j, s);
#pragma unroll
        for (int t = 0; t < kTiles; ++t) acc[t][nt] = mma<T>(a, b[t], acc[t][nt]);
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

// x[:, k0 : k0 + len] for 16 * NT token rows into LDS; zero past N and past len. The pass is
// always 2048 chunks, 8 per thread, in rounds of 2 NT whole rows: a thread keeps its chunk column
// c, so only the row (a uniform step) changes between its rounds and all 8 loads go out at once.
// (The 4-bit weights give each pass 4x less work than 16-bit ones, so its staging shows.)
template <int NT, int KC>
__device__ void stage(hs::u32x4* xs, const uint16_t* __restrict__ x, int64_t x_stride, int N, int k0, int len) {
  constexpr int kRowChunks = KC / 8;
  constexpr int kRowsPerRound = kThreads / kRowChunks;
  constexpr int kRounds = 16 * NT / kRowsPerRound;
  static_assert(kRowsPerRound * kRowChunks == kThreads && kRowsPerRound <= 16, "whole rows per round");
  const int c = threadIdx.x % kRowChunks, n0 = threadIdx.x / kRowChunks;
  const bool in_k = 8 * c < len;
  const uint16_t* src = x + n0 * x_stride + k0 + 8 * c;
  const int64_t step = kRowsPerRound * x_stride;
  hs::u32x4 v[kRounds];
#pragma unroll
  for (int r = 0; r < kRounds; ++r, src += step) {
    v[r] = hs::u32x4{0u, 0u, 0u, 0u};
    if (in_k && n0 + kRowsPerRound * r < N) v[r] = hs::load16(src);
  }
#pragma unroll
  for (int r = 0; r < kRounds; ++r) xs[slot<KC>(n0 + kRowsPerRound * r, c)] = v[r];
}

// y[:, m_block : m_block + 128] (+ bias) from the finished sums, through LDS (x's area) for
// coalesced rows, as skinny_gemm_splitk's write_out.
template <typename T, int NT>
__device__ void write_out(const accv (&acc)[kTiles][NT], float* lds, const uint16_t* __restrict__ bias,
                          uint16_t* __restrict__ y, int N, int M, int64_t bias_stride, int m_block, int lane,
                          int wave) {
  constexpr int kRound = NT < 4 ? NT : 4;   // token tiles per LDS round
#pragma unroll
  for (int c = 0; c < NT; c += kRound) {
    __syncthreads();
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int nt = c; nt < c + kRound; ++nt)
#pragma unroll
        for (int r = 0; r < kAccs; ++r)
          lds[(16 * (nt - c) + result_row(lane, r)) * kRows + wave * 16 * kTiles + 16 * t + (lane & 15)] = acc[t][nt][r];
    __syncthreads();
    const int rows = min(N - 16 * c, 16 * kRound);
#pragma unroll 1
    for (int i = threadIdx.x; i < rows * kRows; i += kThreads) {
      const int n = 16 * c + i / kRows, m = m_block + i % kRows;
      if (m >= M) continue;
      float v = lds[i];
      if (bias != nullptr) v += hs::to_float<T>(bias[n * bias_stride + m]);
      y[(int64_t)n * M + m] = hs::from_float<T>(v);
    }
  }
}

template <typename T, int NT, bool NESTED>
__device__ void splitk(const uint16_t* __restrict__ x, const uint8_t* __restrict__ w, const void* __restrict__ absmax,
                       const float* __restrict__ absmax2, const float* __restrict__ offset_p,
                       const uint16_t* __restrict__ bias, uint16_t* __restrict__ y, float* __restrict__ partials,
                       uint32_t* __restrict__ counters, const float* code, const float* code2, int N, int M, int K,
                       int64_t x_stride, int64_t bias_stride, int shard_len, int log2_bs) {
  constexpr int KC = 1024 / NT;                        // columns per LDS pass: 32 KiB of x
  constexpr int kGroupsPerPass = KC / 128;
  extern __shared__ hs::u32x4 xs[];

  const int lane = threadIdx.x % hs::kWave;
  const int wave = threadIdx.x / hs::kWave;
  const int shards = (K + shard_len - 1) / shard_len;
  const int blocks = (M + kRows - 1) / kRows;
  const int units = blocks * shards;
  const float offset = NESTED ? *offset_p : 0.0f;
  const uint32_t row_blocks = (uint32_t)K >> log2_bs;

  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const int block = u / shards, shard = u % shards;
    const int m_base = block * kRows + wave * 16 * kTiles;
    const int ks = shard * shard_len, ke = min(K, ks + shard_len);
    const bool active = m_base < M;   // wave-uniform; idle waves still stage x
    Row row[kTiles];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const int64_t m = min(m_base + 16 * t + (lane & 15), M - 1);
      row[t].w = w + m * (K / 2);
      row[t].block = (uint32_t)m * row_blocks;
    }

    accv acc[kTiles][NT];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[t][nt] = accv{};

    // The shard's 128-column groups, staged KC columns per pass. Each group's raw operands are
    // loaded one group ahead (across passes too), so their latency overlaps a group's decode
    // and matrix work; only the raw bytes of two groups are ever in registers.
    const int groups = (ke - ks + 127) / 128;
    Raw next;
    if (active) load_group<NESTED>(next, row, absmax, absmax2, ks, K, log2_bs, lane);
#pragma unroll 1
    for (int g = 0; g < groups; ++g) {
      const int k0 = ks + 128 * g;
      if (g % kGroupsPerPass == 0) {
        __syncthreads();   // every wave is done with the previous pass (or unit); tables are written
        stage<NT, KC>(xs, x, x_stride, N, k0, min(KC, ke - k0));
        __syncthreads();
      }
      if (!active) continue;
      const Raw cur = next;
      if (g + 1 < groups) load_group<NESTED>(next, row, absmax, absmax2, k0 + 128, K, log2_bs, lane);
      const int c0 = 16 * (g % kGroupsPerPass);
      if (k0 + 128 > K)
        group<T, NESTED, true, NT, KC>(acc, cur, xs, code, code2, offset, k0, c0, K, lane);
      else
        group<T, NESTED, false, NT, KC>(acc, cur, xs, code, code2, offset, k0, c0, K, lane);
    }

    if (shards > 1 && !finish_shards<NT, false>(acc, xs, partials, counters, u, block, shards)) continue;
    write_out<T, NT>(acc, reinterpret_cast<float*>(xs), bias, y, N, M, bias_stride, block * kRows, lane, wave);
  }
}

template <typename T, int NT>
__device__ void matmul_4bit_splitk(const uint16_t* __restrict__ x, const uint8_t* __restrict__ w,
                                   const void* __restrict__ absmax, const float* __restrict__ absmax2,
                                   const float* __restrict__ code2_g, const float* __restrict__ offset,
                                   const float* __restrict__ code_g, const uint16_t* __restrict__ bias,
                                   uint16_t* __restrict__ y, float* __restrict__ partials,
                                   uint32_t* __restrict__ counters, int N, int M, int K, int64_t x_stride,
                                   int64_t bias_stride, int shard_len, int log2_bs, int flags) {
  // The codebook and the nested map in LDS: lanes reading different entries hit different banks,
  // equal entries broadcast. Written before the first pass's barrier.
  __shared__ float code[16];
  __shared__ float code2[256];
  const bool nested = (flags & kNested) != 0;
  if (threadIdx.x < 16) {
    const float c = code_g[threadIdx.x];
    code[threadIdx.x] = kCanonical<T> ? canonical(c) : c;
  }
  if (nested) code2[threadIdx.x] = code2_g[threadIdx.x];   // kThreads == 256 entries
  if (nested)
    splitk<T, NT, true>(x, w, absmax, absmax2, offset, bias, y, partials, counters, code, code2, N, M, K, x_stride,
                        bias_stride, shard_len, log2_bs);
  else
    splitk<T, NT, false>(x, w, absmax, absmax2, offset, bias, y, partials, counters, code, code2, N, M, K, x_stride,
                         bias_stride, shard_len, log2_bs);
}

}  // namespace

#define HS_4BIT_SPLITK(T, TAG, NT)                                                                          \
  extern "C" __global__ void __launch_bounds__(kThreads) matmul_4bit_splitk_##TAG##_t##NT(                   \
      const uint16_t* __restrict__ x, const uint8_t* __restrict__ w, const void* __restrict__ absmax,        \
      const float* __restrict__ absmax2, const float* __restrict__ code2, const float* __restrict__ offset,  \
      const float* __restrict__ code, const uint16_t* __restrict__ bias, uint16_t* __restrict__ y,          \
      float* __restrict__ partials, uint32_t* __restrict__ counters, int N, int M, int K, int64_t x_stride, \
      int64_t bias_stride, int shard_len, int log2_bs, int flags) {                                         \
    matmul_4bit_splitk<T, NT>(x, w, absmax, absmax2, code2, offset, code, bias, y, partials, counters, N, M, K, \
                              x_stride, bias_stride, shard_len, log2_bs, flags);                            \
  }
#define HS_4BIT_SPLITK_ALL(T, TAG) HS_4BIT_SPLITK(T, TAG, 1) HS_4BIT_SPLITK(T, TAG, 2) HS_4BIT_SPLITK(T, TAG, 4)

HS_4BIT_SPLITK_ALL(hs::f16, f16)
HS_4BIT_SPLITK_ALL(hs::bf16, bf16)
