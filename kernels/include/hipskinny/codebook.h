// Lookups in a bitsandbytes 16-entry fp32 codebook (NF4/FP4) held in LDS as a table of pairs: entry
// b is {code[b >> 4], code[b & 15]}, the two values of a packed byte b in column order (the high
// nibble is the first column). One lookup per byte -- one LDS read of 8 bytes and one VALU
// operation for its address -- where a table of 16 took one read and one to two operations per
// nibble: the lookups were most of the 4-bit kernels' LDS instructions and a third of their VALU.
// 2 KiB; 256 consecutive 8-byte entries, so lanes reading different entries hit different bank
// pairs and equal entries broadcast.
#pragma once

#include "hipskinny/common.h"

namespace hs {
namespace codebook {

typedef float pair __attribute__((ext_vector_type(2)));

constexpr int kEntries = 256;

// The table from the 16-entry codebook in global memory, one entry per thread of a 256-thread
// workgroup (CANONICAL: every NaN entry as the canonical quiet NaN). The caller's barrier
// publishes it.
template <bool CANONICAL = false>
__device__ inline void fill(pair* table, const float* __restrict__ code) {
  static_assert(kEntries == 256, "one entry per thread");
  const uint32_t b = threadIdx.x;
  float hi = code[b >> 4], lo = code[b & 15u];
  if constexpr (CANONICAL) {
    hi = canonical(hi);
    lo = canonical(lo);
  }
  table[b] = pair{hi, lo};
}

// Codebook entry q (0..15): entry q of the table holds {code[0], code[q]}.
__device__ inline float value(const pair* table, uint32_t q) { return table[q].y; }

// The byte offset of byte B of w's entry (B * 8): one operation (an SDWA byte select on gfx9).
template <int B>
__device__ inline uint32_t offset(uint32_t w) {
#if HS_GFX9
  uint32_t a;
  asm("v_lshlrev_b32_sdwa %0, 3, %1 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:BYTE_%c2"
      : "=v"(a) : "v"(w), "i"(B));
  return a;
#else
  return ((w >> (8 * B)) & 0xffu) << 3;
#endif
}

__device__ inline pair lookup(const pair* table, uint32_t off) {
  return *reinterpret_cast<const pair*>(reinterpret_cast<const char*>(table) + off);
}

// The four pairs of a dword of packed nibbles: p[b] holds columns 2b, 2b + 1.
__device__ inline void pairs(const pair* table, uint32_t w, pair (&p)[4]) {
  p[0] = lookup(table, offset<0>(w));
  p[1] = lookup(table, offset<1>(w));
  p[2] = lookup(table, offset<2>(w));
  p[3] = lookup(table, offset<3>(w));
}

// The eight codebook values of a dword, in column order (byte b's high nibble is column 2b).
__device__ inline void values(const pair* table, uint32_t w, float (&v)[8]) {
  pair p[4];
  pairs(table, w, p);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    v[2 * b] = p[b].x;
    v[2 * b + 1] = p[b].y;
  }
}

}  // namespace codebook
}  // namespace hs
