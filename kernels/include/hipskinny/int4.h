// The int4 (AWQ / GPTQ, w4a16) pieces shared by the kernel families that read the prepared layout
// of frontend/w4a16.py (w4a16_linear, w4a16_linear_splitk, fused_moe): staging x in LDS (with act-order and bf16 chunk sums) and
// one 32-column chunk of a lane's work, the magic-number dequant plus the dot products.
// kernels/w4a16_linear.hip explains the layout, the dequant and the exactness argument.
#pragma once

#include "hipskinny/common.h"
#include "hipskinny/loads.h"
#include "hipskinny/reduce.h"

namespace hs {
namespace int4 {

constexpr int kChunk = 32;   // K columns per lane chunk: 16 weight bytes, 4 shuffled words
typedef float f32x2 __attribute__((ext_vector_type(2)));

template <typename T> constexpr bool kBf16 = false;
template <> constexpr bool kBf16<hs::bf16> = true;

// x rows row(0..NP-1)[k0 : k0 + len] into LDS, 8 columns (one 16-byte slot) per thread and step,
// rows kc columns apart: as they are without perm, else gathered x[perm[k]] element by element.
// perm is not trusted (one on the GPU is never checked): an entry outside [0, K) (K the row's
// length, kmax = K - 1) reads column K - 1, one unsigned min per element.
// bf16 also stores each 32-column chunk's fp32 sum (xsum, kc / 32 per row): a chunk is the 4
// slots of one lane quad, summed by a fixed tree: 8 values in order per lane, then quad xor 1,
// xor 2. len and kc are multiples of 32.
// Slot k..k+7 of row xr gathered through perm (p0, p1: perm[k .. k + 7]), entries clamped to kmax.
__device__ inline hs::u32x4 gather8(const uint16_t* xr, hs::u32x4 p0, hs::u32x4 p1, uint32_t kmax) {
  const auto at = [kmax](uint32_t i) { return (int)min(i, kmax); };
  const uint32_t e[8] = {xr[at(p0[0])], xr[at(p0[1])], xr[at(p0[2])], xr[at(p0[3])],
                         xr[at(p1[0])], xr[at(p1[1])], xr[at(p1[2])], xr[at(p1[3])]};
  return hs::u32x4{e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16};
}

// Slot c of token row n into LDS; bf16 also its chunk's sum (the quad's leader stores it).
template <typename T>
__device__ inline void put_slot(hs::u32x4* xs, float* xsum, int kc, int n, int c, hs::u32x4 v) {
  xs[n * (kc >> 3) + c] = v;
  if constexpr (kBf16<T>) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s += hs::to_float<T>((uint16_t)v[i]);
      s += hs::to_float<T>((uint16_t)(v[i] >> 16));
    }
    s += hs::xor_lane<1>(s);
    s += hs::xor_lane<2>(s);
    if ((c & 3) == 0) xsum[n * (kc >> 5) + (c >> 2)] = s;
  }
}

template <typename T, int NP, int kThreads, typename Row>
__device__ void stage(hs::u32x4* xs, float* xsum, Row row, const int32_t* __restrict__ perm, int k0, int len,
                      int kc, uint32_t kmax, int rows = NP) {
  const int slots = len >> 3;
#pragma unroll 1  // rolled: keeps N row addresses out of the main loop's registers
  for (int n = 0; n < min(NP, rows); ++n) {
    const uint16_t* xr = row(n);
    for (int c = threadIdx.x; c < slots; c += kThreads) {
      const int k = k0 + 8 * c;
      const hs::u32x4 v = perm == nullptr ? hs::load16(xr + k)
                                          : gather8(xr, hs::load16(perm + k), hs::load16(perm + k + 4), kmax);
      put_slot<T>(xs, xsum, kc, n, c, v);
    }
  }
}

// `stage` with a thread's slot of up to kRows rows loaded (its perm entries once) before any is
// stored: a round trip per kRows rows of a slot, not per row (more registers: w4a16_linear's
// lane-split kernels; fused_moe keeps `stage`).
template <typename T, int NP, int kThreads, int kRows, typename Row>
__device__ void stage_batched(hs::u32x4* xs, float* xsum, Row row, const int32_t* __restrict__ perm, int k0,
                              int len, int kc, uint32_t kmax) {
  constexpr int kB = NP < kRows ? NP : kRows;
  const int slots = len >> 3;
#pragma unroll 1
  for (int c = threadIdx.x; c < slots; c += kThreads) {
    const int k = k0 + 8 * c;
    hs::u32x4 p0{}, p1{};
    if (perm != nullptr) {
      p0 = hs::load16(perm + k);
      p1 = hs::load16(perm + k + 4);
    }
    hs::rows_in_groups<NP, kB, hs::u32x4>(
        [&](int n) { return perm == nullptr ? hs::load16(row(n) + k) : gather8(row(n), p0, p1, kmax); },
        [&](int n, hs::u32x4 v) { put_slot<T>(xs, xsum, kc, n, c, v); });
  }
}

// fp16: the four adjacent-K pairs of one shuffled word as exact packed (q - z):
// zlo = -(1024 + z), zhi = -(64 + z) in both halves; magic = 0x64006400 (see magic_const).
__device__ inline void dequant_f16(uint32_t w, uint32_t magic, hs::half2v zlo, hs::half2v zhi, uint32_t (&p)[4]) {
  const hs::half2v r16 = {(_Float16)0.0625f, (_Float16)0.0625f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t wh = w >> (8 * h);
    const hs::half2v lo = __builtin_bit_cast(hs::half2v, (wh & 0x000F000Fu) | magic);
    const hs::half2v hi = __builtin_bit_cast(hs::half2v, (wh & 0x00F000F0u) | magic);
    p[2 * h] = __builtin_bit_cast(uint32_t, lo + zlo);
    p[2 * h + 1] = __builtin_bit_cast(uint32_t, __builtin_elementwise_fma(hi, r16, zhi));
  }
}

// bf16: the four adjacent-K pairs of one shuffled word as packed (128 + q); magic = 0x43004300.
__device__ inline void dequant_bf16(uint32_t w, uint32_t magic, uint32_t (&p)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) p[i] = ((w >> (4 * i)) & 0x000F000Fu) | magic;
}

// The exponent constant for the mask-and-OR. gfx9's VOP3 takes no literal and reads at most one
// SGPR, so v_and_or_b32 needs the constant in a VGPR (else the compiler splits it into v_and +
// v_or with literals: 13 instead of 9 VALU per fp16 word); gfx11/12 take the literal directly.
template <typename T>
__device__ inline uint32_t magic_const() {
  uint32_t v = kBf16<T> ? 0x43004300u : 0x64006400u;
#if HS_GFX9
  asm volatile("" : "+v"(v));
#endif
  return v;
}

// A lane's chunks are c = li + j * L with L a multiple of 4, so with G >= 128 the lanes of a quad
// hold one scale group's chunks 4t..4t+3: the quad's first lane alone loads the group's scale and
// zero point and hands them to the others (quad_perm [0,0,0,0]), so a group's bytes are requested
// once, not once per chunk. (G = 32, 64: every lane loads its own.)
__device__ inline uint32_t from_quad_leader(uint32_t v) {
  return (uint32_t)__builtin_amdgcn_update_dpp(0, (int)v, 0x00, 0xf, 0xf, false);
}

// One 32-column chunk c of a lane for Y weight rows x NP staged token rows: acc[n][r] +=
// scale[r] * sum over the chunk of x[n, k] * (q[r, k] - z[r]), the chunk summed in fp32 first.
// wv[r]: the chunk's 4 shuffled words of row r; xs: staged rows row_q 16-byte slots apart; xsum:
// bf16's chunk sums, row_s apart (unused for fp16).
template <typename T, int NP, int Y>
__device__ inline void chunk(float (&acc)[NP][Y], const hs::u32x4 (&wv)[Y], const float (&sc)[Y],
                             const uint32_t (&z)[Y], const hs::u32x4* xs, int row_q, const float* xsum, int row_s,
                             int c, uint32_t magic) {
  float t[NP][Y];
#pragma unroll
  for (int n = 0; n < NP; ++n)
#pragma unroll
    for (int r = 0; r < Y; ++r) t[n][r] = 0.0f;

  if constexpr (!kBf16<T>) {
    hs::half2v zlo[Y], zhi[Y];
#pragma unroll
    for (int r = 0; r < Y; ++r) {
      // -(1024 + z) = 0xE400 | z, -(64 + z) = 0xD400 + 16 z (ulp 1/16 at 64), both halves
      zlo[r] = __builtin_bit_cast(hs::half2v, (0xE400u | z[r]) * 0x00010001u);
      zhi[r] = __builtin_bit_cast(hs::half2v, (0xD400u + 16u * z[r]) * 0x00010001u);
    }
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      uint32_t q[Y][4];
#pragma unroll
      for (int r = 0; r < Y; ++r) dequant_f16(wv[r][d], magic, zlo[r], zhi[r], q[r]);
#pragma unroll
      for (int n = 0; n < NP; ++n) {
        const hs::u32x4 xv = xs[n * row_q + 4 * c + d];
#pragma unroll
        for (int r = 0; r < Y; ++r)
#pragma unroll
          for (int i = 0; i < 4; ++i) t[n][r] = hs::dot2<T>(q[r][i], xv[i], t[n][r]);
      }
    }
#pragma unroll
    for (int n = 0; n < NP; ++n)
#pragma unroll
      for (int r = 0; r < Y; ++r) acc[n][r] = __builtin_fmaf(t[n][r], sc[r], acc[n][r]);
  } else {
#if defined(__gfx942__)
    // No bf16 dot on gfx942: the nibbles go straight to fp32 q (v_cvt_f32_ubyte of the masked
    // bytes: w & 0x0F0F0F0F holds k0 k4 k1 k5 in bytes 0..3, (w >> 4) & 0x0F0F0F0F holds k2 k6 k3
    // k7), x is widened exactly, v_pk_fma_f32 accumulates even and odd columns side by side; the
    // correction is then z * sum_x.
    f32x2 t2[NP][Y];
#pragma unroll
    for (int n = 0; n < NP; ++n)
#pragma unroll
      for (int r = 0; r < Y; ++r) t2[n][r] = f32x2{0.0f, 0.0f};
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      f32x2 q[Y][4];
#pragma unroll
      for (int r = 0; r < Y; ++r) {
        uint32_t lo = wv[r][d] & 0x0F0F0F0Fu, hi = (wv[r][d] >> 4) & 0x0F0F0F0Fu;
        // Opaque: the compiler would otherwise narrow each byte extract to a 4-bit one and lose
        // the single v_cvt_f32_ubyteN.
        asm("" : "+v"(lo), "+v"(hi));
        q[r][0] = f32x2{(float)(lo & 0xffu), (float)((lo >> 16) & 0xffu)};   // k0 k1
        q[r][1] = f32x2{(float)(hi & 0xffu), (float)((hi >> 16) & 0xffu)};   // k2 k3
        q[r][2] = f32x2{(float)((lo >> 8) & 0xffu), (float)(lo >> 24)};     // k4 k5
        q[r][3] = f32x2{(float)((hi >> 8) & 0xffu), (float)(hi >> 24)};     // k6 k7
      }
#pragma unroll
      for (int n = 0; n < NP; ++n) {
        const hs::u32x4 xv = xs[n * row_q + 4 * c + d];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const f32x2 xf = {__builtin_bit_cast(float, xv[i] << 16), __builtin_bit_cast(float, xv[i] & 0xffff0000u)};
#pragma unroll
          for (int r = 0; r < Y; ++r) t2[n][r] = __builtin_elementwise_fma(xf, q[r][i], t2[n][r]);
        }
      }
    }
#pragma unroll
    for (int n = 0; n < NP; ++n) {
      const float sx = xsum[n * row_s + c];
#pragma unroll
      for (int r = 0; r < Y; ++r) {
        // sum x (q - z) = sum x q - z sum x, one rounding
        const float ch = __builtin_fmaf(-(float)z[r], sx, t2[n][r].x + t2[n][r].y);
        acc[n][r] = __builtin_fmaf(ch, sc[r], acc[n][r]);
      }
    }
#else
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      uint32_t q[Y][4];
#pragma unroll
      for (int r = 0; r < Y; ++r) dequant_bf16(wv[r][d], magic, q[r]);
#pragma unroll
      for (int n = 0; n < NP; ++n) {
        const hs::u32x4 xv = xs[n * row_q + 4 * c + d];
#pragma unroll
        for (int r = 0; r < Y; ++r)
#pragma unroll
          for (int i = 0; i < 4; ++i) t[n][r] = hs::dot2<T>(q[r][i], xv[i], t[n][r]);
      }
    }
#pragma unroll
    for (int n = 0; n < NP; ++n) {
      const float sx = xsum[n * row_s + c];
#pragma unroll
      for (int r = 0; r < Y; ++r) {
        // sum x (q - z) = sum x (128 + q) - (128 + z) sum x, one rounding
        const float ch = __builtin_fmaf(-(float)(128u + z[r]), sx, t[n][r]);
        acc[n][r] = __builtin_fmaf(ch, sc[r], acc[n][r]);
      }
    }
#endif
  }
}

}  // namespace int4
}  // namespace hs
