// Device helpers for the AWQ / GPTQ int4 (w4a16) families: the prepared word's nibbles as 16-bit
// values by the magic-number trick (quant_specs.md 2.3). Shared by kernels/w4a16.hip (fused
// lane-split kernel) and kernels/w4a16_splitk.hip (fused split-K kernel).
//
// Prepared word (frontend/w4a16.py): 8 consecutive K columns in ExLlama-shuffle order, nibble i =
// column ORDER[i], ORDER = (0,2,4,6,1,3,5,7): nibble i (low half) and nibble i + 4 (high half)
// are the adjacent-K pair (k_{2i}, k_{2i+1}), so one mask over both halves yields a packed pair in
// column order.
#pragma once

#include "hipskinny/common.h"

namespace hs {

// The exponent constant for the mask-and-OR. gfx9's VOP3 takes no literal and reads at most one
// SGPR, so v_and_or_b32 needs the constant in a VGPR (else the compiler splits it into v_and +
// v_or with literals: 13 instead of 9 VALU per fp16 word); gfx11/12 take the literal directly.
__device__ inline uint32_t magic_const(uint32_t v) {
#if HS_GFX9
  asm volatile("" : "+v"(v));
#endif
  return v;
}

// fp16: the four adjacent-K pairs of one shuffled word as exact packed (q - z):
// zlo = -(1024 + z), zhi = -(64 + z) in both halves.
// magic: 0x64006400, held in a VGPR on gfx9 (magic_const).
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

}  // namespace hs
