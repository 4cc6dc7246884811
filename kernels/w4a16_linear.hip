// AWQ / GPTQ int4 (w4a16) fused dequant + GEMM for decode: y[n, m] = sum_k x[n, k'] * s[m, g(k)] *
// (q[m, k] - z[m, g(k)]) (+ bias) for N = 1..8 tokens, fp16/bf16 x, scales and y, fp32 accumulation
// on every arch, one rounding to the output type. k' = perm[k] (act-order) or k; g(k) = k >> log2_g.
//
// Weight format (frontend/w4a16.py, Prepared): qweight uint32 [M, K/8], word (m, j) holds columns
// 8j..8j+7 of row m in ExLlama-shuffle order, nibble i = k 8j + ORDER[i], ORDER = (0,2,4,6,1,3,5,7):
//   bits 0..15  = k0 k2 k4 k6 (nibbles 0..3),  bits 16..31 = k1 k3 k5 k7 (nibbles 4..7)
// so nibble i (low half) and nibble i + 4 (high half) are the adjacent-K pair (k_{2i}, k_{2i+1}):
// one mask over both halves yields a packed pair in x's column order.
//
// Arguments:
//   x        [N, x_stride] fp16/bf16 (T); without perm 16-byte aligned, x_stride a multiple of 8
//   w        qweight (row m at word m * K / 8); 16-byte aligned
//   scales   T [M, K/G]: scales[m * (K >> log2_g) + g]
//   zeros    null (symmetric, z = 8) or uint8 [M, K/G] true zero points 0..16
//   perm     null, or int32 [K]: column k multiplies x[n, perm[k]] (applied while staging x; an
//            entry outside [0, K) reads x[n, K - 1]: a GPU perm is never checked)
//   bias     null, or bias[n * bias_stride + m] in T (stride 0: one [M] row), added in fp32
//   y        [N, M] contiguous, T
//   K        a multiple of 32 and of G
//   kc       K columns staged in LDS per pass: a multiple of 32; >= K (staged once) or a
//            multiple of 32 * wave size (streamed; a chunk's lane does not depend on the pass)
//   log2_g   log2(G), G a power of two in 32..K dividing K
//
// Launch: w4a16_linear_<f16|bf16>_n<N>_y<YTILE>, block (256, 1, 1), any grid (persistent: up to 4
// workgroups per CU), dynamic LDS
//   f16:  N * kc * 2 bytes                      (x as it is)
//   bf16: N * kc * 2 + N * (kc / 32) * 4 bytes  (x, then each token's fp32 sum of every staged
//                                                32-column chunk; = N * kc * 17 / 8)
// (the bf16 size is also fine for f16). No static LDS.
//
// w4a16_linear_dequantize_<f16|bf16> (the op's route for N > 8 and for shapes the fused kernels do not
// take; arguments and rules at its definition): block (256, 1, 1), any grid, no LDS.
//
// Work split as kernels/matmul_4bit.hip: a wave owns YTILE consecutive rows x all tokens; lane l
// takes the 32-column chunks (16 weight bytes, 4 words) c with c % wave == l in increasing c; a
// chunk's products are summed in fp32 (v_dot2), scaled by its group's scale once (a chunk never
// straddles a group: G >= 32; with G >= 128 and passes starting at multiples of 128 a lane quad's
// chunks share one group, whose scale and zero point its first lane loads and hands to the others,
// hs::int4::from_quad_leader) and added to the accumulator; a fixed xor butterfly
// (hs::reduce_scatter) reduces across lanes, one lane writes each output. Results are bitwise
// the same for any grid, YTILE, kc or CU count. Barriers sit in loops with workgroup-uniform trip
// counts; waves without a tile only stage.
//
// Dequant (quant_specs.md 2.3, 2.4):
//   fp16: 1024.0 = 0x6400 has ulp 1, so OR-ing a nibble into mantissa bits 0..3 gives exactly
//     1024 + q, into bits 4..7 exactly 1024 + 16 q. Per word w:
//       (w & 0x000F000F) | 0x64006400 = (1024 + k0, 1024 + k1)        (nibbles 0, 4)
//       (w & 0x00F000F0) | 0x64006400 = (1024 + 16 k2, 1024 + 16 k3)  (nibbles 1, 5)
//     and the same after w >> 8 for (k4, k5), (k6, k7). Finished with packed fp16 ops to exact
//     (q - z) (integers in -16..15): lo + (-(1024 + z)) [0xE400 | z], hi * 1/16 + (-(64 + z))
//     [0xD400 + 16 z] (one v_pk_fma: hi / 16 = 64 + q exactly, so the fma's one rounding is of an
//     exact small integer). Symmetric: z = 8 (-1032 = 0xE408, -72 = 0xD480). Then v_dot2 with the
//     x dword holding the same two columns.
//   bf16: 128.0 = 0x4300 has ulp 1 (7 mantissa bits); the 16x trick would leave the binade, so
//     (w >> 4i & 0x000F000F) | 0x43004300 = (128 + k_{2i}, 128 + k_{2i+1}) for i = 0..3 (three
//     shifts). dot2 of x with (128 + q) in fp32, then the chunk sum gets the activation-sum
//     correction once: t - (128 + z) * sum_x (one fma), sum_x = the token's fp32 sum over the
//     chunk's 32 x values, computed once per staged pass into LDS (one LDS read per token and
//     chunk instead of 16 dot2 per token, chunk and row).
//   gfx942 bf16 (no bf16 dot): the pairs would only be widened again, so the nibbles go straight
//     to fp32 q with v_cvt_f32_ubyte0..3 of w & 0x0F0F0F0F and (w >> 4) & 0x0F0F0F0F, x is
//     widened exactly, v_pk_fma_f32 accumulates even / odd columns, and the correction is
//     t - z * sum_x (same LDS sums).
//   The 0x64006400 / 0x43004300 constant sits in a VGPR on gfx9 so each mask-and-OR is one
//   v_and_or_b32 (gfx9 VOP3 takes no literal); gfx11/12 use the literal.
//
// Exactness / accumulation: every product x * (q - z) (fp16) or x * (128 + q) (bf16) is exact in
// fp32; a chunk's 32 products are summed in fp32 by v_dot2 (gfx942 bf16: two interleaved fp32
// fma chains of 16, then added); then acc = fma(chunk, scale, acc) per chunk, the butterfly adds the lanes,
// the bias is added in fp32 and the result rounded once. bf16 adds the correction's rounding and
// cancellation: the chunk sum t is ~143 |x| in magnitude (gfx942: ~15 |x|), so its rounding
// errors are relative to 143 * sum |x|, not to sum |x (q - z)|: per chunk about
// (16 * 143 + 10 * 144) * 2^-24 * |s| * sum |x| at most. sum_x: eight values per thread in order, then a fixed
// quad tree (exact bf16 inputs, fp32 sums). Nothing is ever summed in half precision.
//
// Bounds: rows past M are clamped to M - 1 for loading and never written; every row < M is
// written by exactly one lane. K a multiple of 32, so there are no partial chunks. Weight and
// scale indices are 32-bit (loads from the base pointer + a 32-bit offset): M * K / 8 < 2^32.
#include "hipskinny/common.h"
#include "hipskinny/int4.h"
#include "hipskinny/lane_split.h"

namespace {

constexpr int kThreads = hs::lane_split::kThreads;
constexpr int kChunk = hs::int4::kChunk;

// The lane-split body (hipskinny/lane_split.h): x (and, bf16, its chunk sums) in LDS, int4 words
// decoded per 32-column chunk.
template <typename T, int NP, int YTILE>
struct W4a16 : hs::lane_split::Body {
  const uint16_t* x;
  const uint32_t* w;
  const uint16_t* scales;
  const uint8_t* zeros;
  const int32_t* perm;
  const uint16_t* bias;
  uint16_t* y;
  int M, K;
  int64_t x_stride, bias_stride;
  int kc, log2_g;
  float* xsum;          // bf16 only: each token's fp32 sum of every staged 32-column chunk
  int row_groups;
  // G >= 128 and passes starting at multiples of 128: a lane quad's 4 chunks share one scale group,
  // whose scale (and zero point) its first lane alone loads.
  bool grouped;
  bool leader;
  uint32_t magic;       // hs::int4::magic_const, made once (an asm statement the compiler cannot hoist)

  HS_BODY void stage(hs::u32x4* xs, int k0, int len) const {
    const auto x_row = [&](int n) { return x + n * x_stride; };
    hs::int4::stage_batched<T, NP, kThreads, 2>(xs, xsum, x_row, perm, k0, len, kc, K - 1u);
  }
  HS_BODY bool prologue(hs::u32x4* xs, bool staged_once) const {
    if (staged_once) stage(xs, 0, K);
    return staged_once;
  }

  // 32-bit element offsets from the (uniform) base pointers: the loads take the scalar-base +
  // 32-bit-offset form, no 64-bit address arithmetic per chunk.
  struct Rows {
    uint32_t w[YTILE], g[YTILE];
  };
  HS_BODY void rows(Rows& rows, int m0) const {
#pragma unroll
    for (int r = 0; r < YTILE; ++r) {
      const uint32_t m = min(m0 + r, M - 1);
      rows.w[r] = m * (uint32_t)(K >> 3);
      rows.g[r] = m * (uint32_t)row_groups;
    }
  }

  HS_BODY void pass(Rows& rows, float (&acc)[NP][YTILE], const hs::u32x4* xs, int k0, int len, int lane) const {
    const int full = len / kChunk;
    for (int c = lane; c < full; c += hs::kWave) {
      const int k = k0 + kChunk * c;
      const uint32_t g = (uint32_t)k >> log2_g;
      hs::u32x4 wv[YTILE];
      float sc[YTILE];
      uint32_t z[YTILE], sraw[YTILE];
#pragma unroll
      for (int r = 0; r < YTILE; ++r) {
        wv[r] = hs::load16_stream(w + (rows.w[r] + ((uint32_t)k >> 3)));
        sraw[r] = 0u;
        z[r] = 8u;
      }
      if (leader) {   // see hs::int4::from_quad_leader
#pragma unroll
        for (int r = 0; r < YTILE; ++r) {
          sraw[r] = scales[rows.g[r] + g];
          if (zeros != nullptr) z[r] = zeros[rows.g[r] + g];
        }
      }
      if (grouped) {
#pragma unroll
        for (int r = 0; r < YTILE; ++r) {
          sraw[r] = hs::int4::from_quad_leader(sraw[r]);
          z[r] = hs::int4::from_quad_leader(z[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < YTILE; ++r) sc[r] = hs::to_float<T>((uint16_t)sraw[r]);
      hs::int4::chunk<T, NP, YTILE>(acc, wv, sc, z, xs, kc >> 3, xsum, kc >> 5, c, magic);
    }
  }

  HS_BODY void store(float sum, int n, int row) const {
    if (bias != nullptr) sum += hs::to_float<T>(bias[n * bias_stride + row]);
    y[(int64_t)n * M + row] = hs::from_float<T>(sum);
  }
};

// The kernel's arguments as __restrict__ parameters (noalias scopes once inlined), as before the skeleton.
template <typename T, int NP, int YTILE>
__device__ void w4a16_linear(const uint16_t* __restrict__ x, const uint32_t* __restrict__ w,
                             const uint16_t* __restrict__ scales, const uint8_t* __restrict__ zeros,
                             const int32_t* __restrict__ perm, const uint16_t* __restrict__ bias,
                             uint16_t* __restrict__ y, int M, int K, int64_t x_stride, int64_t bias_stride, int kc,
                             int log2_g) {
  extern __shared__ hs::u32x4 xs[];
  float* xsum = reinterpret_cast<float*>(xs + NP * (kc >> 3));
  const bool grouped = log2_g >= 7 && (kc & 127) == 0;
  const bool leader = !grouped || (threadIdx.x & 3) == 0;
  hs::lane_split::run<NP, YTILE>(W4a16<T, NP, YTILE>{{}, x, w, scales, zeros, perm, bias, y, M, K, x_stride, bias_stride,
                                                     kc, log2_g, xsum, K >> log2_g, grouped, leader,
                                                     hs::int4::magic_const<T>()},
                                 M, K, kc);
}

// The dequantize kernel of the route (N > 8, and K or group sizes the fused kernels do not take):
// W [M, K] as T into out [M, K] in the CHECKPOINT's column order, so that skinny_gemm's kernels
// multiply plain x: out[m, perm[k]] = T(s[m, g] * (q[m, k] - z[m, g])) for prepared column k
// (perm null: out[m, k]), g = k / G. The product is exact in fp32 (a 5-bit integer times a
// 16-bit scale's 11 or 8 significant bits) and rounded once to T: the value
// w4a16.dequantize_checkpoint gives, rounded to T (with the prepared scales).
//
// Arguments: w, scales, zeros, perm as the fused kernel's (zeros null: z = 8; perm null: identity);
// out [M, K] T, 16-byte aligned; K a multiple of 8; G (any, not only powers of two) a multiple of
// 8 dividing K, so a word's 8 columns share one group. One thread per word (8 columns, one
// 16-byte store without perm, 8 scattered 2-byte stores with it) in a grid-stride loop over
// M * K / 8 words, 32-bit word indices (M * K / 8 < 2^32, checked by the op). Each output element is
// written exactly once when perm is a permutation of 0..K-1. A GPU perm is never checked: an
// entry outside [0, K) writes column K - 1 (one unsigned min per store), never outside the row.
// The loop of one variant (zero points or not, act-order or not: uniform per launch, so the loop
// holds no branch around a load and a word's loads all go out before any of them is waited for).
template <typename T, bool ZEROS, bool PERM>
__device__ void dequantize_words(const uint32_t* __restrict__ w, const uint16_t* __restrict__ scales,
                                 const uint8_t* __restrict__ zeros, const int32_t* __restrict__ perm,
                                 uint16_t* __restrict__ out, int M, int K, int G) {
  const uint32_t words = (uint32_t)(K >> 3), groups = (uint32_t)(K / G), total = (uint32_t)M * words;
  const uint32_t magic = hs::int4::magic_const<T>();
  const uint32_t step = gridDim.x * kThreads;
  // The word's row and column by hs::RowCol; its group by a shift when G is a power of two (the
  // usual 32..128), else a division.
  const bool pow2 = (G & (G - 1)) == 0;
  const int log2_g = __builtin_ctz((uint32_t)G);
  uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  hs::RowCol at(i, step, words);
  // i + step may pass 2^32 when total is near it: the loop ends before adding past total.
  for (; i < total; i = total - i > step ? i + step : total, at.advance()) {
    const uint32_t m = at.row, j = at.col;
    const uint32_t gi = m * groups + (groups == 1 ? 0u : pow2 ? (8 * j) >> log2_g : (8 * j) / (uint32_t)G);
    const uint16_t sbits = scales[gi];
    const int z = ZEROS ? (int)zeros[gi] : 8;
    const uint32_t q = w[i];
    hs::u32x4 p0, p1;
    if constexpr (PERM) {
      p0 = hs::load16(perm + 8 * j);
      p1 = hs::load16(perm + 8 * j + 4);
    }
    // Column pairs (2c, 2c + 1) sit in nibbles c and c + 4: one dword of the output each.
    uint32_t d[4];
    if constexpr (std::is_same<T, hs::f16>::value) {
      // The fused kernels' exact packed (q - z) pairs (hipskinny/int4.h), times the scale in fp16:
      // the exact product rounded once, as T(fp32 product) would round it.
      const hs::half2v s2 = __builtin_bit_cast(hs::half2v, (uint32_t)sbits * 0x10001u);
      const _Float16 zl = (_Float16)(-1024 - z), zh = (_Float16)(-64 - z);
      uint32_t p[4];
      hs::int4::dequant_f16(q, magic, hs::half2v{zl, zl}, hs::half2v{zh, zh}, p);
#pragma unroll
      for (int c = 0; c < 4; ++c) d[c] = __builtin_bit_cast(uint32_t, __builtin_bit_cast(hs::half2v, p[c]) * s2);
    } else {
      const float s = hs::to_float<T>(sbits);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        uint32_t v[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float p = (float)((int)((q >> (4 * c + 16 * h)) & 15u) - z) * s;
          asm("" : "+v"(p));   // the fp32 product, then one rounding (not a fused mixed-precision op)
          v[h] = hs::from_float<T>(p);
        }
        d[c] = v[0] | v[1] << 16;
      }
    }
    uint16_t* row = out + (uint64_t)m * (uint32_t)K;
    if constexpr (!PERM) {
      *reinterpret_cast<hs::u32x4*>(row + 8 * j) = hs::u32x4{d[0], d[1], d[2], d[3]};
    } else {
      const uint32_t kmax = (uint32_t)K - 1u;
      const uint32_t dst[8] = {p0[0], p0[1], p0[2], p0[3], p1[0], p1[1], p1[2], p1[3]};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        row[min(dst[2 * c], kmax)] = (uint16_t)d[c];
        row[min(dst[2 * c + 1], kmax)] = (uint16_t)(d[c] >> 16);
      }
    }
  }
}

template <typename T>
__device__ void dequantize(const uint32_t* __restrict__ w, const uint16_t* __restrict__ scales,
                           const uint8_t* __restrict__ zeros, const int32_t* __restrict__ perm,
                           uint16_t* __restrict__ out, int M, int K, int G) {
  if (zeros != nullptr) {
    if (perm != nullptr) dequantize_words<T, true, true>(w, scales, zeros, perm, out, M, K, G);
    else dequantize_words<T, true, false>(w, scales, zeros, perm, out, M, K, G);
  } else {
    if (perm != nullptr) dequantize_words<T, false, true>(w, scales, zeros, perm, out, M, K, G);
    else dequantize_words<T, false, false>(w, scales, zeros, perm, out, M, K, G);
  }
}

}  // namespace


#define HS_W4A16(T, TAG, NP, YT)                                                                          \
  extern "C" __global__ void __launch_bounds__(kThreads) w4a16_linear_##TAG##_n##NP##_y##YT(       \
      const uint16_t* __restrict__ x, const uint32_t* __restrict__ w, const uint16_t* __restrict__ scales, \
      const uint8_t* __restrict__ zeros, const int32_t* __restrict__ perm, const uint16_t* __restrict__ bias, \
      uint16_t* __restrict__ y, int M, int K, int64_t x_stride, int64_t bias_stride, int kc, int log2_g) {   \
    w4a16_linear<T, NP, YT>(x, w, scales, zeros, perm, bias, y, M, K, x_stride, bias_stride, kc, log2_g);         \
  }
#define HS_W4A16_Y3(T, TAG, NP) HS_W4A16(T, TAG, NP, 1) HS_W4A16(T, TAG, NP, 2) HS_W4A16(T, TAG, NP, 4)
#define HS_W4A16_Y2(T, TAG, NP) HS_W4A16(T, TAG, NP, 1) HS_W4A16(T, TAG, NP, 2)
#define HS_W4A16_ALL(T, TAG)                                                                          \
  HS_W4A16_Y3(T, TAG, 1) HS_W4A16_Y3(T, TAG, 2) HS_W4A16_Y3(T, TAG, 3) HS_W4A16_Y3(T, TAG, 4)       \
  HS_W4A16_Y2(T, TAG, 5) HS_W4A16_Y2(T, TAG, 6) HS_W4A16_Y2(T, TAG, 7) HS_W4A16_Y2(T, TAG, 8)

HS_W4A16_ALL(hs::f16, f16)
HS_W4A16_ALL(hs::bf16, bf16)

#define HS_W4A16_DEQUANTIZE(T, TAG)                                                                          \
  extern "C" __global__ void __launch_bounds__(kThreads) w4a16_linear_dequantize_##TAG(                             \
      const uint32_t* __restrict__ w, const uint16_t* __restrict__ scales, const uint8_t* __restrict__ zeros, \
      const int32_t* __restrict__ perm, uint16_t* __restrict__ out, int M, int K, int G) {                   \
    dequantize<T>(w, scales, zeros, perm, out, M, K, G);                                                     \
  }
HS_W4A16_DEQUANTIZE(hs::f16, f16)
HS_W4A16_DEQUANTIZE(hs::bf16, bf16)
