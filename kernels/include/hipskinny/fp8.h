// FP8 e4m3 decoding shared by the FP8 kernel families: exact widening to 16-bit floats with
// integer operations (every arch, both flavours) and detection of the NaN encodings.
//
// An e4m3 byte's low 7 bits (exponent and mantissa) shifted into fp16 bits 13..7, with the
// sign on bit 15, are the same value times 2^-8 (OCP, bias 7) or 2^-7 (FNUZ, bias 8),
// subnormals included; callers multiply the power of two back once. NaN encodings (OCP
// 0x7F/0xFF, FNUZ 0x80) do not survive the shift: nan_bits finds them.
#pragma once

#include "hipskinny/common.h"

namespace hs {

// Bytes 0 and 1 (HI = false) or 2 and 3 of w as a pair of fp16 holding value * 2^-8 (OCP)
// or * 2^-7 (FNUZ): the byte's low 7 bits land on fp16 bits 13..7 and its sign on bit 15.
template <bool HI>
__device__ inline uint32_t widen_pair(uint32_t w) {
  const uint32_t q = __builtin_amdgcn_perm(0u, w, HI ? 0x0c030c02u : 0x0c010c00u) << 7;
  return q + (q & 0x40004000u);  // moves the sign from bit 14 to bit 15 of each half
}

// Accumulates a bit 7 per byte of w that is set exactly for the flavour's NaN encoding.
template <bool FNUZ>
__device__ inline uint32_t nan_bits(uint32_t w) {
  if constexpr (FNUZ) {  // 0x80: flip the low 7 bits, then a carry out of them needs bit 7 set too
    const uint32_t t = w ^ 0x7f7f7f7fu;
    return ((t & 0x7f7f7f7fu) + 0x01010101u) & t;
  } else {  // 0x7F / 0xFF: the low 7 bits all ones carry into bit 7
    return (w & 0x7f7f7f7fu) + 0x01010101u;
  }
}

// Four FP8 bytes as four fp16 (two dwords, bytes 0-1 then 2-3) of the same values times
// 2^-8 (OCP) / 2^-7 (FNUZ), NaN encodings as fp16 NaN: exact, for staging activations.
__device__ inline void widen_word(uint32_t w, bool fnuz, uint32_t& lo, uint32_t& hi) {
  const uint32_t nan = fnuz ? nan_bits<true>(w) : nan_bits<false>(w);
  lo = widen_pair<false>(w);
  hi = widen_pair<true>(w);
  lo = (nan & 0x80u) ? (lo & 0xffff0000u) | 0x7e00u : lo;
  lo = (nan & 0x8000u) ? (lo & 0x0000ffffu) | 0x7e000000u : lo;
  hi = (nan & 0x800000u) ? (hi & 0xffff0000u) | 0x7e00u : hi;
  hi = (nan & 0x80000000u) ? (hi & 0x0000ffffu) | 0x7e000000u : hi;
}

// Four FP8 bytes as two dwords of 16-bit pairs of T (bytes 0-1, then 2-3), exact (the
// fp16 values have 4 significant bits: bf16 holds them as the top half of their fp32).
template <typename T> __device__ void widen4(uint32_t w, uint32_t& lo, uint32_t& hi);

template <> __device__ inline void widen4<f16>(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = widen_pair<false>(w);
  hi = widen_pair<true>(w);
}

__device__ inline uint32_t f16_pair_to_bf16(uint32_t p) {
  const float a = (float)__builtin_bit_cast(_Float16, (uint16_t)p);
  const float b = (float)__builtin_bit_cast(_Float16, (uint16_t)(p >> 16));
  return __builtin_amdgcn_perm(__builtin_bit_cast(uint32_t, b), __builtin_bit_cast(uint32_t, a), 0x07060302u);
}

template <> __device__ inline void widen4<bf16>(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = f16_pair_to_bf16(widen_pair<false>(w));
  hi = f16_pair_to_bf16(widen_pair<true>(w));
}

// The hardware FP8 converter, where there is one, decodes one flavour: FNUZ on gfx942, OCP on
// gfx950 and gfx1201 (gfx11 has none). cvt4: four bytes of that flavour as four floats (exact;
// NaN encodings give NaN).
#if defined(__gfx942__) || defined(__gfx950__) || defined(__gfx1201__)
#define HS_FP8_CVT 1
#if defined(__gfx942__)
constexpr bool kCvtFnuz = true;
#else
constexpr bool kCvtFnuz = false;
#endif
__device__ inline void cvt4(uint32_t w, float (&f)[4]) {
  typedef float f32x2 __attribute__((ext_vector_type(2)));
  const f32x2 a = __builtin_amdgcn_cvt_pk_f32_fp8(w, false), b = __builtin_amdgcn_cvt_pk_f32_fp8(w, true);
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}
#else
#define HS_FP8_CVT 0
#endif

}  // namespace hs
