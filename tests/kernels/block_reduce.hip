// Block reduction: checks cross-lane shuffles (__shfl_xor), LDS and __syncthreads by
// reducing each block's 256 floats to their sum and their max, compared to numpy.
//
// block_reduce(x, sums, maxes, n): block b reduces x[256 b .. 256 b + 255]; elements at or
// past n count as 0 (sum) and -inf (max), so the last block may be partial.
// Each wave reduces with __shfl_xor over its lanes, lane 0 of each wave leaves its partial in
// LDS, and after the barrier wave 0 reduces the partials the same way. Every element passes
// through log2(256) = 8 additions on every arch (6 + 2 on wave64, 5 + 3 on wave32), which is
// what the test's error bound is derived from.
// Launch: block 256, grid ceil(n / 256); sums and maxes have one element per block.
#include "testing.h"

namespace {

constexpr int kBlock = 256;
constexpr int kWaves = kBlock / kWave;

__device__ float wave_sum(float v) {
#pragma unroll
  for (int mask = kWave / 2; mask > 0; mask >>= 1) v += __shfl_xor(v, mask);
  return v;
}

__device__ float wave_max(float v) {
#pragma unroll
  for (int mask = kWave / 2; mask > 0; mask >>= 1) v = fmaxf(v, __shfl_xor(v, mask));
  return v;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
block_reduce(const float* __restrict__ x, float* __restrict__ sums, float* __restrict__ maxes, int n) {
  __shared__ float part_sum[kWaves];
  __shared__ float part_max[kWaves];
  const int i = blockIdx.x * kBlock + threadIdx.x;
  const bool in = i < n;
  const float v = in ? x[i] : 0.0f;
  float s = wave_sum(v);
  float m = wave_max(in ? v : -INFINITY);
  const int wave = threadIdx.x / kWave, lane = threadIdx.x % kWave;
  if (lane == 0) {
    part_sum[wave] = s;
    part_max[wave] = m;
  }
  __syncthreads();
  if (wave == 0) {
    s = wave_sum(lane < kWaves ? part_sum[lane] : 0.0f);
    m = wave_max(lane < kWaves ? part_max[lane] : -INFINITY);
    if (lane == 0) {
      sums[blockIdx.x] = s;
      maxes[blockIdx.x] = m;
    }
  }
}
