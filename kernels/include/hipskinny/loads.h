// Partial and guarded 16-byte loads shared by the kernel families: row tails that must not
// read past column K, zero-extended so the tail chunk joins the full-chunk arithmetic.
#pragma once

#include "hipskinny/common.h"

namespace hs {

// The first `count` (1..7) elements at p, zero-extended to a 16-byte chunk; nothing at or
// past p + count is read.
__device__ inline u32x4 load_partial(const uint16_t* p, int count) {
  uint32_t d[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int e = 0; e < 8; ++e)
    if (e < count) d[e >> 1] |= (uint32_t)p[e] << (16 * (e & 1));
  return u32x4{d[0], d[1], d[2], d[3]};
}

// The 8 elements row[k .. k + 7] (streamed, as weights are), or zero when k >= K; for rows
// whose length K is a multiple of 8, so a chunk is either wholly inside or wholly past it.
__device__ inline u32x4 load16_stream_or_zero(const uint16_t* row, int k, int K) {
  return k < K ? load16_stream(row + k) : u32x4{0u, 0u, 0u, 0u};
}

// Rows n = 0 .. N - 1 of a staged chunk's columns c = c0, c0 + step, .. < count, at most kLoads
// values in registers at once: load(n, c) for a group, then store(n, c, value) for each, so a
// group's loads share one round trip. Fewer rows than kLoads: the rows of several columns per
// group (a thread staging two columns of 4 rows waits once, not twice); more: a column's rows in
// groups of kLoads.
template <int N, int kLoads, typename V, typename Load, typename Store>
__device__ inline void stage_columns(int c0, int step, int count, Load load, Store store) {
  constexpr int kRowsPer = N < kLoads ? N : kLoads;
  constexpr int kCols = N < kLoads ? kLoads / N : 1;
#pragma unroll 1
  for (int c = c0; c < count; c += kCols * step) {
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += kRowsPer) {
      V v[kCols][kRowsPer];
#pragma unroll
      for (int u = 0; u < kCols; ++u)
#pragma unroll
        for (int j = 0; j < kRowsPer; ++j)
          if (n0 + j < N && c + u * step < count) v[u][j] = load(n0 + j, c + u * step);
#pragma unroll
      for (int u = 0; u < kCols; ++u)
#pragma unroll
        for (int j = 0; j < kRowsPer; ++j)
          if (n0 + j < N && c + u * step < count) store(n0 + j, c + u * step, v[u][j]);
    }
  }
}

// Rows n = 0 .. N - 1 of one chunk column, kB at a time: `stage_columns` over a single column
// (kB <= N), for callers that loop over the columns themselves.
template <int N, int kB, typename V, typename Load, typename Store>
__device__ inline void rows_in_groups(Load load, Store store) {
  stage_columns<N, kB, V>(0, 1, 1, [&](int n, int) { return load(n); }, [&](int n, int, V v) { store(n, v); });
}

}  // namespace hs
