// Lookups in a 16-entry fp32 codebook held in LDS (bitsandbytes NF4/FP4), eight weights (one
// dword of packed nibbles) at a time. A lookup's address is the table plus nibble * 4 bytes (the
// base folds into the LDS instruction's offset), so the cost per weight is what turns its nibble
// into that byte offset: lanes reading different entries hit different banks, equal entries
// broadcast (16 consecutive dwords: conflict-free).
#pragma once

#include "hipskinny/common.h"

namespace hs {
namespace codebook {

// A dword's nibbles made ready for offset<B>: hi for the high nibbles, lo for the low ones.
struct Nibbles {
  uint32_t hi, lo;
};

__device__ inline Nibbles prepare(uint32_t w) {
#if HS_GFX9
  // Shifted only: offset<B> masks byte B of each with one SDWA and (bits 4..7 of w's byte B end up
  // at bits 2..5 of hi's, bits 0..3 at 2..5 of lo's).
  return Nibbles{w >> 2, w << 2};
#else
  // Every nibble as a byte offset at once (two operations per four bytes), then one extraction
  // per lookup; opaque so that the masks are not folded back into each extraction.
  uint32_t hi = (w >> 2) & 0x3c3c3c3cu, lo = (w << 2) & 0x3c3c3c3cu;
  asm("" : "+v"(hi), "+v"(lo));
  return Nibbles{hi, lo};
#endif
}

// The byte offset (nibble * 4) held in byte B of a prepared word.
template <int B>
__device__ inline uint32_t offset(uint32_t prepared) {
#if HS_GFX9
  uint32_t a;
  asm("v_and_b32_sdwa %0, 60, %1 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:BYTE_%c2"
      : "=v"(a) : "v"(prepared), "i"(B));
  return a;
#else
  return (prepared >> (8 * B)) & 0xffu;   // masked by prepare
#endif
}

__device__ inline float lookup(const float* code, uint32_t off) {
  return *reinterpret_cast<const float*>(reinterpret_cast<const char*>(code) + off);
}

// The eight codebook values of a dword, in column order (byte b's high nibble is column 2b).
__device__ inline void values(const float* code, uint32_t w, float (&v)[8]) {
  const Nibbles p = prepare(w);
  v[0] = lookup(code, offset<0>(p.hi));
  v[1] = lookup(code, offset<0>(p.lo));
  v[2] = lookup(code, offset<1>(p.hi));
  v[3] = lookup(code, offset<1>(p.lo));
  v[4] = lookup(code, offset<2>(p.hi));
  v[5] = lookup(code, offset<2>(p.lo));
  v[6] = lookup(code, offset<3>(p.hi));
  v[7] = lookup(code, offset<3>(p.lo));
}

}  // namespace codebook
}  // namespace hs
