// AWQ / GPTQ int4 (w4a16) fused dequant + GEMM for decode, larger N: y[n, m] = sum_k x[n, perm[k]] *
// T(s[m, g(k)] * (q[m, k] - z[m, g(k)])) (+ bias) for N = 9..64 tokens on the matrix units (MFMA on
// gfx942/gfx950, WMMA on gfx11/gfx12), fp16/bf16 x, scales and y (T), fp32 accumulation, K split
// into shards across workgroups. Each weight is widened to T in registers right before the matrix
// instruction as s * (q - z) rounded once to T (the exact product: the value
// w4a16.dequantize_checkpoint gives, rounded to T, as the op's dequantize route writes it), so
// the only other rounding is the fp32 accumulation. k indexes the prepared (act-order sorted)
// columns; g(k) = k >> log2_g.
//
// Arguments:
//   x        [N, x_stride] T; without perm 16-byte aligned and x_stride a multiple of 8 elements
//   w        qweight uint32 [M, K/8] (frontend/w4a16.py, Prepared: ExLlama-shuffled words, see
//            hipskinny/int4.h); 16-byte aligned
//   scales   T [M, row_groups]: scales[m * row_groups + g]
//   zeros    null (symmetric, z = 8) or uint8 [M, row_groups] true zero points 0..16
//   perm     null, or int32 [K] (16-byte aligned): column k multiplies x[n, perm[k]] (act-order,
//            applied while x is staged; an entry outside [0, K) reads x[n, K - 1]: a GPU perm is
//            never checked)
//   bias     null, or bias[n * bias_stride + m] in T (stride 0: one [M] row), added in fp32
//   y        [N, M] T, contiguous; one rounding of sum + bias
//   partials fp32 scratch, a slot of R * 16 * NT floats per segment: units + blocks slots
//            (hipskinny/splitk.h's Walk; blocks = ceil(M / R), R = 128 / S); unused
//            (may be null) when no row block is split (unit_len a multiple of K's groups)
//   counters ceil(M / R) uint32, zero before the launch and zero again after it
//   N (<= 16 * NT), M, K (a multiple of 32), x_stride, bias_stride, unit_len, block_len (multiples of 128:
//   hipskinny/splitk.h's Walk), log2_g: g(k) = k >> log2_g (the group size's log2; 31 for
//   per-channel scales of any K, whose one group is then g = 0), row_groups = K / G.
//   Limits: M * K / 8 < 2^32 words (32-bit word offsets).
//
// Launch: w4a16_linear_splitk_<f16|bf16>_t<NT>[_s<S>], NT = 1, 2, 4, S = 4, 4, 2, block (256, 1, 1), any grid, dynamic LDS
// 16 * NT * KC * 2 = 32 KiB (KC = 1024 / NT), no static LDS.
//
// Work split, tile multiply, K order, x staging (with the act-order gather), shard reduction and
// bounds: hipskinny/splitk4.h, the skeleton shared with kernels/matmul_4bit_splitk.hip; this file
// is its weight policy. A lane's 16 weight bytes are 4 prepared words = 32 consecutive columns of
// its row, inside one group (G >= 32, a multiple of 32), so one scale and zero serve them all.
// Deterministic variant only: bitwise the same for any grid, CU count or schedule.
//
// Widening, per word (8 weights) and row:
//   fp16: hipskinny/int4.h's magic-number trick gives the exact (q - z) as packed fp16 pairs (two
//     v_and_or against 0x6400 and two packed finishing ops per 4 weights, one shift per word);
//     one v_pk_mul_f16 by the scale pair rounds s * (q - z) once (an fp16 multiply of exact
//     operands is the correctly rounded exact product).
//   bf16: the nibbles straight to fp32 (v_cvt_f32_ubyte of w & 0x0F0F0F0F and (w >> 4) &
//     0x0F0F0F0F: bytes hold k0 k4 k1 k5 and k2 k6 k3 k7), (q - z) exact in fp32, times s exact,
//     then hipskinny/splitk4.h's pack2 rounds each once (v_pk_* on pairs on gfx9).
//   Zero weights keep the product's sign (-0 for q == z under a negative scale), as the route's.
#include "hipskinny/common.h"
#include "hipskinny/int4.h"
#include "hipskinny/splitk4.h"

namespace {

using namespace hs::splitk;

using hs::int4::kBf16;

// The weight policy of hipskinny/splitk4.h for the prepared int4 layout: per tile and piece 16
// bytes (4 words) and the group's scale and zero point.
template <typename T>
struct Int4 {
  static constexpr int kTilesW = kTiles;   // (two tiles per wave: see splitk4.h's kWaveTiles)
  const uint32_t* w;
  const uint16_t* scale_p;
  const uint8_t* zero_p;
  uint32_t words, row_groups;   // per row: K / 8, K / G
  int log2_g;
  uint32_t magic;               // fp16: int4.h's magic_const, made once (gfx9: a VGPR for the whole loop)

  // 32-bit element offsets of a lane's row from the uniform base pointers: the loads take the
  // scalar-base + 32-bit-offset form.
  struct Row {
    uint32_t w, g;
  };
  struct Raw {
    hs::u32x4 w[kTiles][kPieces];
    uint32_t s[kTiles][kPieces];   // the scale's 16 bits
    uint32_t z[kTiles][kPieces];
  };
  // fp16: the scale pair and the finishing constants -(1024 + z), -(64 + z) as half2 (int4.h);
  // bf16: the scale and z as fp32.
  struct Scales {
    uint32_t a[kTiles][kPieces], b[kTiles][kPieces], c[kTiles][kPieces];
  };

  __device__ inline Row row(int64_t m) const { return Row{(uint32_t)m * words, (uint32_t)m * row_groups}; }

  // A piece past K loads the row's last piece instead (in bounds; `scales` zeroes its scale).
  __device__ inline void load(Raw& r, const Row (&rows)[kTiles], int k0, int K, int lane) const {
    const uint8_t* zero_bytes = zero_p != nullptr ? zero_p : reinterpret_cast<const uint8_t*>(scale_p);
#pragma unroll
    for (int j = 0; j < kPieces; ++j) {
      const uint32_t k = min(k0 + 32 * (lane >> 4) + 32 * kGroups * j, K - 32);
      const uint32_t g = k >> log2_g;
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        r.w[t][j] = hs::load16_stream(w + (rows[t].w + (k >> 3)));
        r.s[t][j] = scale_p[rows[t].g + g];
        // Without zero points the byte comes from the scale table (in bounds, a cache hit) and
        // `scales` replaces it by 8: a load under a branch would make the pipeline wait for every
        // load, and a select here for this one.
        r.z[t][j] = zero_bytes[rows[t].g + g];
      }
    }
  }

  // A piece past K gets scale zero: (q - z) * 0 is exactly zero.
  __device__ inline void scales(Scales& sc, const Raw& r, const bool (&valid)[kPieces]) const {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int j = 0; j < kPieces; ++j) {
        uint32_t z = zero_p != nullptr ? r.z[t][j] : 8u;
        if constexpr (!kBf16<T>) {
          // Both halves by v_perm; z opaque, else the compiler turns the pair into a multiply by
          // 0x00010001 folded into a 64-bit mad with a literal (which the emulator does not take).
          asm("" : "+v"(z));
          const auto both = [](uint32_t h) { return __builtin_amdgcn_perm(h, h, 0x05040100u); };
          sc.a[t][j] = valid[j] ? both(r.s[t][j]) : 0u;
          // -(1024 + z) = 0xE400 | z, -(64 + z) = 0xD400 + 16 z (ulp 1/16 at 64)
          sc.b[t][j] = both(0xE400u | z);
          sc.c[t][j] = both(0xD400u + 16u * z);
        } else {
          float s = hs::to_float<T>((uint16_t)r.s[t][j]);
          if constexpr (kCanonical<T>) s = canonical(s);
          sc.a[t][j] = valid[j] ? __builtin_bit_cast(uint32_t, s) : 0u;
          sc.b[t][j] = __builtin_bit_cast(uint32_t, (float)z);
        }
      }
  }

  __device__ inline void decode(const Raw& r, const Scales& sc, int t, int j, int s, uint32_t (&d)[4]) const {
    const uint32_t wd = r.w[t][j][s];
    if constexpr (!kBf16<T>) {
      uint32_t p[4];
      hs::int4::dequant_f16(wd, magic, __builtin_bit_cast(hs::half2v, sc.b[t][j]),
                      __builtin_bit_cast(hs::half2v, sc.c[t][j]), p);
      const hs::half2v ss = __builtin_bit_cast(hs::half2v, sc.a[t][j]);
#pragma unroll
      for (int i = 0; i < 4; ++i) d[i] = __builtin_bit_cast(uint32_t, __builtin_bit_cast(hs::half2v, p[i]) * ss);
    } else {
      uint32_t lo = wd & 0x0F0F0F0Fu, hi = (wd >> 4) & 0x0F0F0F0Fu;
      // Opaque: the compiler would otherwise narrow each byte extract to a 4-bit one and lose the
      // single v_cvt_f32_ubyteN.
      asm("" : "+v"(lo), "+v"(hi));
      const float sf = __builtin_bit_cast(float, sc.a[t][j]), zf = __builtin_bit_cast(float, sc.b[t][j]);
      const float2v s2 = {sf, sf}, z2 = {zf, zf};
      const float2v q[4] = {{(float)(lo & 0xffu), (float)((lo >> 16) & 0xffu)},     // k0 k1
                            {(float)(hi & 0xffu), (float)((hi >> 16) & 0xffu)},     // k2 k3
                            {(float)((lo >> 8) & 0xffu), (float)(lo >> 24)},        // k4 k5
                            {(float)((hi >> 8) & 0xffu), (float)(hi >> 24)}};       // k6 k7
#pragma unroll
      for (int i = 0; i < 4; ++i) d[i] = pack2<T>((q[i] - z2) * s2);
    }
  }
};

template <typename T, int NT, int LG>
__device__ void w4a16_linear_splitk(const uint16_t* __restrict__ x, const uint32_t* __restrict__ w,
                             const uint16_t* __restrict__ scales, const uint8_t* __restrict__ zeros,
                             const int32_t* __restrict__ perm, const uint16_t* __restrict__ bias,
                             uint16_t* __restrict__ y, float* __restrict__ partials, uint32_t* __restrict__ counters,
                             int N, int M, int K, int64_t x_stride, int64_t bias_stride, int unit_len, int block_len, int log2_g,
                             int row_groups) {
  // One copy of the main loop: symmetric weights (no zeros) take z = 8 by a uniform branch per
  // load (two copies, zeros as a template parameter, spill SGPRs on gfx950).
  const Int4<T> wt{w, scales, zeros, (uint32_t)(K >> 3), (uint32_t)row_groups, log2_g,
                     kBf16<T> ? 0u : hs::int4::magic_const<hs::f16>()};   // (bf16 decodes in fp32)
  run<T, NT, LG, true>(wt, x, perm, bias, y, partials, counters, N, M, K, x_stride, bias_stride, unit_len, block_len);
}

}  // namespace

#define HS_W4A16_SPLITK(T, TAG, NT, LG, SUFFIX)                                                              \
  extern "C" __global__ void __launch_bounds__(kThreads) w4a16_linear_splitk_##TAG##_t##NT##SUFFIX(           \
      const uint16_t* __restrict__ x, const uint32_t* __restrict__ w, const uint16_t* __restrict__ scales,    \
      const uint8_t* __restrict__ zeros, const int32_t* __restrict__ perm, const uint16_t* __restrict__ bias,  \
      uint16_t* __restrict__ y, float* __restrict__ partials, uint32_t* __restrict__ counters, int N, int M,   \
      int K, int64_t x_stride, int64_t bias_stride, int unit_len, int block_len, int log2_g, int row_groups) { \
    w4a16_linear_splitk<T, NT, LG>(x, w, scales, zeros, perm, bias, y, partials, counters, N, M, K, x_stride,   \
                                   bias_stride, unit_len, block_len, log2_g, row_groups);                    \
  }
// (_s<S>: S slices per unit, hipskinny/splitk.h: two or four at one and two token tiles, two at four.)
#define HS_W4A16_SPLITK_ALL(T, TAG)                                                                           \
  HS_W4A16_SPLITK(T, TAG, 1, 0, ) HS_W4A16_SPLITK(T, TAG, 2, 0, ) HS_W4A16_SPLITK(T, TAG, 4, 0, )             \
  HS_W4A16_SPLITK(T, TAG, 1, 1, _s2) HS_W4A16_SPLITK(T, TAG, 2, 1, _s2)                                 \
  HS_W4A16_SPLITK(T, TAG, 1, 2, _s4) HS_W4A16_SPLITK(T, TAG, 2, 2, _s4) HS_W4A16_SPLITK(T, TAG, 4, 1, _s2)

HS_W4A16_SPLITK_ALL(hs::f16, f16)
HS_W4A16_SPLITK_ALL(hs::bf16, bf16)
