// The lane-split skeleton of the small-N kernel families (skinny_gemm, w4a16_linear, matmul_4bit,
// fp8_linear): a persistent workgroup of 256 threads whose waves stride over tiles of YTILE
// consecutive output rows x all N tokens; each wave reduces over the whole K across its lanes
// and one fixed xor butterfly (hs::reduce_scatter) leaves each output in its own lanes.
// x passes through LDS: staged once per workgroup when kc >= K, else once per K pass, with the
// barriers in loops whose trip counts are uniform over the workgroup (tile loop by workgroup,
// pass loop by K), so every wave reaches every barrier; waves without a tile only stage.
//
// A family supplies its weight-decoding policy as a Body (the arguments it was launched with),
// whose members are declared HS_BODY:
//   bool prologue(xs, staged_once)      before the tile loop (tables; x when staged once); true
//                                       when the skeleton must put a barrier after it
//   void stage(xs, k0, len)             x[:, k0 : k0 + len] into LDS (streamed passes)
//   Rows, rows(rows, m0)                a wave's row state for rows m0 .. m0 + YTILE - 1 (clamped
//                                       to M - 1 when read): addresses, cached scales
//   void pass(rows, acc, xs, k0, len, lane)  this lane's share of a pass into acc[N][YTILE]
//   void store(sum, n, row)             output (n, row) from its wave-wide sum (row < M; once each)
// and may hide the defaults of hs::lane_split::Body, which every body derives from:
//   using Acc = float                   a lane's accumulator per (n, r) (fp8_linear: see below)
//   float partial(rows, acc, n, r, lane)  this lane's share of output (n, r) for the butterfly
// The accumulators are the skeleton's own Acc[N][YTILE] array: as one plain float array they stay
// one promotable vector, as in a hand-written kernel (in a struct with the row state they cost
// skinny_gemm and w4a16_linear 2-56 more VGPRs on gfx942/gfx950). The reduction and
// the write are the skeleton's too, so every family's outputs are the same butterfly over the
// same lane partials for any grid, YTILE, kc or CU count.
//
// Moving a family onto it must leave its outputs bit for bit and cost no workgroup per CU the
// planner uses (compare the manifests). Register deltas of a few VGPRs either way are the
// backend's: with the IR otherwise equal, the LDS array's symbol name alone moved
// w4a16_linear's 30 better kernels back to their old counts. A plain float array can also be
// promoted to one vector whose 4-wide operations cost registers (fp8_linear's widening path on
// gfx942 bf16: 114 -> 196 VGPRs): that body's Acc is a float in a struct, which stays scalar.
#pragma once

#include "hipskinny/common.h"
#include "hipskinny/reduce.h"

namespace hs {
namespace lane_split {

// The skeleton and a body's members are inlined before the optimizer sees any of them
// (always_inline): a member optimized on its own first turns acc[][] behind its reference into
// scalar loop values, which the SLP vectorizer then regroups by pairs (w4a16_linear: 5 kernels up
// to 12 VGPRs and one wave per SIMD worse without it, 30 better with it).
#define HS_BODY __device__ __attribute__((always_inline)) inline

constexpr int kThreads = 256;
constexpr int kWaves = kThreads / kWave;

// The defaults of a body's optional members.
struct Body {
  using Acc = float;
  template <typename Rows, int N, int YTILE>
  HS_BODY float partial(const Rows&, const float (&acc)[N][YTILE], int n, int r, int) const {
    return acc[n][r];
  }
};

template <int N, int YTILE, typename Body>
HS_BODY void run(Body body, int M, int K, int kc) {
  extern __shared__ u32x4 xs[];
  static_assert(N * YTILE <= kWave, "one output per lane at the write");
  const int lane = threadIdx.x % kWave;
  const int wave = threadIdx.x / kWave;
  const int tiles = (M + YTILE - 1) / YTILE;
  const bool staged_once = kc >= K;

  if (body.prologue(xs, staged_once)) __syncthreads();
  for (int first = blockIdx.x * kWaves; first < tiles; first += gridDim.x * kWaves) {
    const int tile = first + wave;
    const bool active = tile < tiles;
    const int m0 = tile * YTILE;
    typename Body::Rows rows;
    body.rows(rows, m0);
    typename Body::Acc acc[N][YTILE];
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int r = 0; r < YTILE; ++r) acc[n][r] = typename Body::Acc{};

    for (int k0 = 0; k0 < K; k0 += kc) {
      const int len = min(kc, K - k0);
      if (!staged_once) {
        __syncthreads();  // every wave is done reading the previous pass
        body.stage(xs, k0, len);
        __syncthreads();
      }
      if (active) body.pass(rows, acc, xs, k0, len, lane);
    }

    if (active) {
      // Reduce-scatter: lane l ends with output j = l / (wave / P) summed over the wave.
      constexpr int P = pow2_at_least(N * YTILE);
      float v[P];
#pragma unroll
      for (int j = 0; j < P; ++j) v[j] = j < N * YTILE ? body.partial(rows, acc, j / YTILE, j % YTILE, lane) : 0.0f;
      const float sum = reduce_scatter<kWave / 2, P>(v, lane);
      constexpr int kLanes = kWave / P;
      const int j = lane / kLanes, n = j / YTILE, row = m0 + j % YTILE;
      if (lane % kLanes == 0 && j < N * YTILE && row < M) body.store(sum, n, row);
    }
  }
}

}  // namespace lane_split
}  // namespace hs
