// Cross-lane reductions shared by the kernel families: a fixed xor butterfly, so every sum is
// the same tree of the same lane partials however many values share it (bitwise reproducible).
#pragma once

#include "hipskinny/common.h"

namespace hs {

// v from lane (lane ^ D). Permutations only (every source lane exists).
template <int D>
__device__ inline float xor_lane(float v) {
  const int i = __builtin_bit_cast(int, v);
  int r;
  if constexpr (D == 1) {
    r = __builtin_amdgcn_update_dpp(0, i, 0xB1, 0xf, 0xf, true);  // quad_perm [1,0,3,2]
  } else if constexpr (D == 2) {
    r = __builtin_amdgcn_update_dpp(0, i, 0x4E, 0xf, 0xf, true);  // quad_perm [2,3,0,1]
#if HS_GFX9
  } else if constexpr (D == 4) {  // row_half_mirror (lane ^ 7), then quad_perm [3,2,1,0] (^ 3)
    r = __builtin_amdgcn_update_dpp(0, __builtin_amdgcn_update_dpp(0, i, 0x141, 0xf, 0xf, true), 0x1B, 0xf, 0xf, true);
  } else if constexpr (D == 8) {  // row_mirror (lane ^ 15), then row_half_mirror (^ 7)
    r = __builtin_amdgcn_update_dpp(0, __builtin_amdgcn_update_dpp(0, i, 0x140, 0xf, 0xf, true), 0x141, 0xf, 0xf, true);
  } else if constexpr (D == 16) {
    r = __builtin_amdgcn_ds_swizzle(i, 0x401f);  // bit mode, xor_mask 16 within 32 lanes
  } else {
    static_assert(D == 32, "wave64 lanes");
    r = __builtin_amdgcn_ds_bpermute(4 * ((int)(threadIdx.x % kWave) ^ 32), i);
#else
  } else if constexpr (D == 4 || D == 8) {
    r = __builtin_amdgcn_update_dpp(0, i, 0x160 + D, 0xf, 0xf, true);  // row_xmask:D
  } else {
    static_assert(D == 16, "wave32 lanes");
    r = __builtin_amdgcn_permlanex16(i, i, 0x76543210u, 0xfedcba98u, false, false);  // other row, same lane
#endif
  }
  return __builtin_bit_cast(float, r);
}

// Sum P values over the wave, leaving value j in lanes [j * wave / P, (j + 1) * wave / P).
// Every step pairs lane l with l ^ D for D = wave/2, ..., 1 (the xor butterfly); the
// first log2(P) steps also halve the values each lane keeps (it keeps the half its bit
// D selects and sends the other). Each output is therefore the same butterfly tree over
// the same lane partials whatever P is, so the result does not depend on N or YTILE.
// The smallest power of two >= n: the number of values reduce_scatter takes for n outputs.
constexpr int pow2_at_least(int n) { return n <= 1 ? 1 : 2 * pow2_at_least((n + 1) / 2); }

template <int D, int P>
__device__ inline float reduce_scatter(float* v, int lane) {
  if constexpr (D == 0) {
    return v[0];
  } else if constexpr (P > 1) {
    constexpr int H = P / 2;
    const bool upper = (lane & D) != 0;
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const float send = upper ? v[i] : v[i + H];
      const float keep = upper ? v[i + H] : v[i];
      v[i] = keep + xor_lane<D>(send);
    }
    return reduce_scatter<D / 2, H>(v, lane);
  } else {
    v[0] = v[0] + xor_lane<D>(v[0]);
    return reduce_scatter<D / 2, 1>(v, lane);
  }
}

}  // namespace hs
