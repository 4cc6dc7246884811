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
//            codes when nested (flags & kNested): scale = fmaf(code2[absmax[b]], absmax2[b >> 8], *offset)
//   absmax2  fp32 [ceil(blocks / 256)], code2 fp32 [256], offset fp32 [1] (nested; else unused)
//   code     fp32 [16], the codebook (one kernel for NF4 and FP4)
//   bias     null, or bias[n * bias_stride + m] in T (stride 0: one [M] row), added in fp32
//   y        [N, M] T, contiguous; one rounding of sum + bias
//   partials fp32 scratch, a slot of R * 16 * NT floats per segment: units + blocks slots
//            (hipskinny/splitk.h's Walk; blocks = ceil(M / R), R = 128 / S); unused
//            (may be null) when no row block is split (unit_len a multiple of K's groups)
//   counters ceil(M / R) uint32, zero before the launch and zero again after it
//   N (<= 16 * NT), M, K (a multiple of the blocksize, hence of 32), x_stride, bias_stride,
//   unit_len, block_len (multiples of 128: hipskinny/splitk.h's Walk), log2_bs (5..12), flags
//   Limits: M * K < 2^31 and M * K >> log2_bs < 2^30 blocks (weight and scale byte offsets are
//   32-bit; the op checks the first).
//
// Launch: matmul_4bit_splitk_<f16|bf16>_t<NT>[_s<S>], NT = 1, 2, 4, S = 2, 4 (NT <= 2) or 2, block
// (256, 1, 1), any grid, dynamic LDS 16 * NT * KC * 2 = 32 KiB (KC = 1024 / NT), plus 1088 static
// bytes (codebook and code2) -- just over half of gfx942's 64 KiB: one workgroup per CU there (two
// need <= 32 KiB in all). On gfx942/gfx950 also matmul_4bit_splitk_<f16|bf16>_t4_s2_direct: the same
// arguments and LDS, x read straight into registers (below); also requires 64 * x_stride * 2 < 2^31
// (one raw buffer over x, 32-bit offsets for its token tiles' rows; the op checks it).
//
// Work split, tile multiply, K order, x staging, shard reduction and bounds: hipskinny/splitk4.h
// (the skeleton shared with kernels/w4a16_linear_splitk.hip); this file is its weight policy: a
// lane's 16 bytes are 32 consecutive columns of its row, one block scale (a block is >= 32 columns)
// serves them all. Deterministic variant only. At four token tiles on gfx9 a wave owns 64 features
// (splitk4.h's kWaveTiles): each x read from LDS feeds twice the weights, LDS bytes per weight byte
// about 17 -> 14 (Llama-3 gate_up at N = 64 on gfx950; the codebook lookups are 8 of the 14). The
// _s2_direct kernels (splitk4.h's kDirectTiles) go further: each wave holds its unit's 64 features
// and reads x into registers, never staged, so LDS carries the lookups only (about 9 bytes per
// weight byte); the planner takes them wherever a four-tile plan has two slices, and for long calls
// in place of one (`_linear.splitk_plan`).
//
// Dequant per weight byte: one lookup address each nibble (codebook in LDS at nibble * 4: two
// shifts per dword and one mask per lookup, the mask an SDWA byte select on gfx9), one fp32
// multiply per weight (v_pk_mul_f32 on pairs on gfx9), one conversion per weight with the pair
// packed in place (v_cvt_pk_* on gfx950, SDWA / true16 halves on gfx942 / gfx11; bf16 elsewhere
// by integer RNE). About 100 (f16) / 150 (bf16) VALU per 16 weight bytes per row on gfx942, 85
// on gfx950, 145 / 180 on gfx1201, 180 / 230 on gfx11 (the half exchange).
//
// Bounds: as hipskinny/splitk4.h; K a multiple of 32 (of the blocksize), pieces past K decode to
// zero.
#include "hipskinny/codebook.h"
#include "hipskinny/common.h"
#include "hipskinny/splitk4.h"

namespace {

using namespace hs::splitk;

enum Flags : int { kNested = 1 };  // `flags` bits, copied into the manifest (launch_flags) for the planner

// Eight weights (one dword: bytes 0..3, high nibble first) as four dwords of T pairs.
template <typename T>
__device__ inline void decode(uint32_t w, float s, const float* code, uint32_t (&d)[4]) {
  float v[8];
  hs::codebook::values(code, w, v);
  // gfx9 multiplies a pair at once (v_pk_mul_f32).
  d[0] = pack2<T>((float2v){v[0], v[1]} * s);
  d[1] = pack2<T>((float2v){v[2], v[3]} * s);
  d[2] = pack2<T>((float2v){v[4], v[5]} * s);
  d[3] = pack2<T>((float2v){v[6], v[7]} * s);
}

// The weight policy of hipskinny/splitk4.h for bitsandbytes' format: per tile and piece the 16
// weight bytes and the block scale (nested: the absmax code and its absmax2, decoded per group).
template <typename T, bool NESTED, int TW>
struct Bnb4 {
  static constexpr int kTilesW = TW;
  const uint8_t* w;
  const void* absmax;
  const float* absmax2;
  const float* code;    // LDS
  const float* code2;   // LDS
  float offset;
  int K, log2_bs;
  uint32_t row_blocks;
  uint32_t w_bytes, blocks;   // of W and of the block scales (M * K / 2 and M * row_blocks)
  static constexpr int kNonTemporal = 2;   // raw buffer load aux: nt, as load16_stream's

  // Where a lane's row of one tile lives, as 32-bit offsets from the uniform bases (the loads take
  // the scalar-base + 32-bit-offset form): its packed bytes and its first block's flat index.
  struct Row {
    uint32_t w, block;
  };
  struct Raw {
    hs::u32x4 w[TW][kPieces];
    float s[TW][kPieces];
    uint32_t q[TW][kPieces];
  };
  struct Scales {
    float s[TW][kPieces];
  };

  __device__ inline Row row(int64_t m) const { return Row{(uint32_t)m * (uint32_t)(K / 2), (uint32_t)m * row_blocks}; }

  // Nested: the absmax2 of flat block blk, by a 32-bit byte offset from the table's base.
  __device__ inline float absmax2_of(uint32_t blk) const {
    return *reinterpret_cast<const float*>(reinterpret_cast<const char*>(absmax2) + ((blk >> 8) << 2));
  }

  // A group inside K (every one but a last partial one) on gfx9: raw buffer loads whose VGPR
  // offsets (the lane's row and its part of the group) are the same in every group and whose
  // SGPR offsets are the group's first column and block. Otherwise, and elsewhere, per-lane
  // addresses, clamped: a piece past K loads the row's last piece instead (in bounds; `scales`
  // zeroes its scale). Block offsets are 32-bit (blocks < 2^30).
  __device__ inline void load(Raw& r, const Row (&rows)[TW], int k0, int K_, int lane) const {
#if HS_GFX9
    if (k0 + 128 <= K_) {
      const auto w_buf = hs::buffer(w, w_bytes);
      const auto s_buf = hs::buffer(absmax, NESTED ? blocks : 4 * blocks);
      const uint32_t kb = (uint32_t)k0 >> log2_bs;   // k0 is a multiple of 128: the lane's part adds
#pragma unroll
      for (int j = 0; j < kPieces; ++j) {
        const uint32_t c = 32 * (lane >> 4) + 32 * kGroups * j;   // < 128
#pragma unroll
        for (int t = 0; t < TW; ++t) {
          r.w[t][j] = __builtin_amdgcn_raw_buffer_load_b128(w_buf, rows[t].w + (c >> 1), k0 >> 1, kNonTemporal);
          const uint32_t blk = rows[t].block + (c >> log2_bs);
          if constexpr (NESTED) {
            r.q[t][j] = __builtin_amdgcn_raw_buffer_load_b8(s_buf, blk, kb, 0);
            r.s[t][j] = absmax2_of(kb + blk);
          } else {
            r.s[t][j] = __builtin_bit_cast(float, __builtin_amdgcn_raw_buffer_load_b32(s_buf, 4 * blk, 4 * kb, 0));
          }
        }
      }
      return;
    }
#endif
#pragma unroll
    for (int j = 0; j < kPieces; ++j) {
      const uint32_t k = min(k0 + 32 * (lane >> 4) + 32 * kGroups * j, K_ - 32);
      const uint32_t kb = k >> log2_bs;
#pragma unroll
      for (int t = 0; t < TW; ++t) {
        const uint32_t blk = rows[t].block + kb;
        r.w[t][j] = hs::load16_stream(w + (rows[t].w + (k >> 1)));
        if constexpr (NESTED) {
          r.q[t][j] = static_cast<const uint8_t*>(absmax)[blk];
          r.s[t][j] = absmax2_of(blk);
        } else {
          r.s[t][j] = *reinterpret_cast<const float*>(static_cast<const char*>(absmax) + (blk << 2));
        }
      }
    }
  }

  // A piece past K gets scale zero: code * 0 is zero for the finite codebooks (NF4, FP4). An
  // inf or NaN entry would make it NaN there, where the same byte of the row's real last piece
  // already makes the row's outputs non-finite.
  __device__ inline void scales(Scales& sc, const Raw& r, const bool (&valid)[kPieces]) const {
#pragma unroll
    for (int t = 0; t < TW; ++t)
#pragma unroll
      for (int j = 0; j < kPieces; ++j) {
        float s;
        if constexpr (NESTED) s = __builtin_fmaf(code2[r.q[t][j]], r.s[t][j], offset);
        else s = r.s[t][j];
        if constexpr (kCanonical<T>) s = canonical(s);
        sc.s[t][j] = valid[j] ? s : 0.0f;
      }
  }

  __device__ inline void decode(const Raw& r, const Scales& sc, int t, int j, int s, uint32_t (&d)[4]) const {
    ::decode<T>(r.w[t][j][s], sc.s[t][j], code, d);
  }
};

template <typename T, int NT, int LG, bool DIRECT>
__device__ void matmul_4bit_splitk(const uint16_t* __restrict__ x, const uint8_t* __restrict__ w,
                                   const void* __restrict__ absmax, const float* __restrict__ absmax2,
                                   const float* __restrict__ code2_g, const float* __restrict__ offset,
                                   const float* __restrict__ code_g, const uint16_t* __restrict__ bias,
                                   uint16_t* __restrict__ y, float* __restrict__ partials,
                                   uint32_t* __restrict__ counters, int N, int M, int K, int64_t x_stride,
                                   int64_t bias_stride, int unit_len, int block_len, int log2_bs, int flags) {
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
  const uint32_t row_blocks = (uint32_t)K >> log2_bs;
  const uint32_t w_bytes = (uint32_t)M * (uint32_t)(K / 2), blocks = (uint32_t)M * row_blocks;
  constexpr int TW = DIRECT ? kDirectTiles<LG> : kWaveTiles<NT, LG>;
  if (nested) {
    const Bnb4<T, true, TW> wt{w, absmax, absmax2, code, code2, *offset, K, log2_bs, row_blocks, w_bytes, blocks};
    run<T, NT, LG, false, DIRECT>(wt, x, nullptr, bias, y, partials, counters, N, M, K, x_stride, bias_stride, unit_len, block_len);
  } else {
    const Bnb4<T, false, TW> wt{w, absmax, absmax2, code, code2, 0.0f, K, log2_bs, row_blocks, w_bytes, blocks};
    run<T, NT, LG, false, DIRECT>(wt, x, nullptr, bias, y, partials, counters, N, M, K, x_stride, bias_stride, unit_len, block_len);
  }
}

}  // namespace

#define HS_4BIT_SPLITK_KERNEL(T, TAG, NT, LG, DIRECT, SUFFIX)                                               \
  extern "C" __global__ void __launch_bounds__(kThreads) matmul_4bit_splitk_##TAG##_t##NT##SUFFIX(           \
      const uint16_t* __restrict__ x, const uint8_t* __restrict__ w, const void* __restrict__ absmax,        \
      const float* __restrict__ absmax2, const float* __restrict__ code2, const float* __restrict__ offset,  \
      const float* __restrict__ code, const uint16_t* __restrict__ bias, uint16_t* __restrict__ y,          \
      float* __restrict__ partials, uint32_t* __restrict__ counters, int N, int M, int K, int64_t x_stride, \
      int64_t bias_stride, int unit_len, int block_len, int log2_bs, int flags) {                          \
    matmul_4bit_splitk<T, NT, LG, DIRECT>(x, w, absmax, absmax2, code2, offset, code, bias, y, partials, counters, \
                                          N, M, K, x_stride, bias_stride, unit_len, block_len, log2_bs, flags); \
  }
#define HS_4BIT_SPLITK(T, TAG, NT, LG, SUFFIX) HS_4BIT_SPLITK_KERNEL(T, TAG, NT, LG, false, SUFFIX)
// (_s<S>: S slices per unit, hipskinny/splitk.h: two or four at one and two token tiles, two at four.)
#define HS_4BIT_SPLITK_ALL(T, TAG)                                                                          \
  HS_4BIT_SPLITK(T, TAG, 1, 0, ) HS_4BIT_SPLITK(T, TAG, 2, 0, ) HS_4BIT_SPLITK(T, TAG, 4, 0, )             \
  HS_4BIT_SPLITK(T, TAG, 1, 1, _s2) HS_4BIT_SPLITK(T, TAG, 1, 2, _s4) HS_4BIT_SPLITK(T, TAG, 2, 2, _s4)

HS_4BIT_SPLITK_ALL(hs::f16, f16)
HS_4BIT_SPLITK_ALL(hs::bf16, bf16)
// Four tiles, two slices on gfx9: _direct only (below).
HS_4BIT_SPLITK(hs::f16, f16, 2, 1, _s2)
#if !HS_GFX9
HS_4BIT_SPLITK(hs::f16, f16, 4, 1, _s2)
#endif
HS_4BIT_SPLITK(hs::bf16, bf16, 2, 1, _s2)
#if !HS_GFX9
HS_4BIT_SPLITK(hs::bf16, bf16, 4, 1, _s2)
#endif
#if HS_GFX9
// _t4_s2_direct: x read into registers, every wave all 64 features of its unit (hipskinny/splitk4.h's
// kDirectTiles); faster than staging x on every row measured. (At one slice, 128 features, the 128
// accumulators per lane need the AGPRs: one wave per SIMD and values moved between the register
// files -- slower than two slices at the same units' length.)
HS_4BIT_SPLITK_KERNEL(hs::f16, f16, 4, 1, true, _s2_direct)
HS_4BIT_SPLITK_KERNEL(hs::bf16, bf16, 4, 1, true, _s2_direct)
#endif
