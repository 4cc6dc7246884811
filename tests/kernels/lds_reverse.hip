// LDS staging and the barrier: checks that __syncthreads orders LDS writes before reads
// across waves, and that the emulator's seeded schedule exposes a missing barrier.
//
// lds_reverse(x, y): block b stages x[256 b + t] in LDS, then thread t writes
// y[256 b + t] = tile[255 - t], a value another wave wrote.
// lds_reverse_missing_barrier(x, y): the same code without the barrier: a deliberate race.
// lds_reverse_u16(x, y): lds_reverse on 16-bit elements (ds_write_b16 / ds_read_u16), whose
// LDS bytes the emulator counts as bank dwords.
// Under a seeded emulator schedule (waves switched at random instruction boundaries) some
// read must happen before its write, so some seed gives a wrong result; the correct kernel
// is right under every schedule, also with strict LDS checking.
// Launch: block 256, grid = number of 256-element blocks.
#include "testing.h"

namespace {

constexpr int kBlock = 256;

template <bool kBarrier, typename T>
__device__ void reverse(const T* __restrict__ x, T* __restrict__ y) {
  __shared__ T tile[kBlock];
  const int t = threadIdx.x;
  const long base = static_cast<long>(blockIdx.x) * kBlock;
  tile[t] = x[base + t];
  if (kBarrier) __syncthreads();
  y[base + t] = tile[kBlock - 1 - t];
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kBlock) lds_reverse(const float* x, float* y) {
  reverse<true>(x, y);
}

extern "C" __global__ void __launch_bounds__(kBlock) lds_reverse_missing_barrier(const float* x, float* y) {
  reverse<false>(x, y);
}

extern "C" __global__ void __launch_bounds__(kBlock) lds_reverse_u16(const uint16_t* x, uint16_t* y) {
  reverse<true>(x, y);
}
