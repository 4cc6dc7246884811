// Atomics across workgroups: checks that the emulator's global atomics are atomic when
// many workgroups (and the waves inside them) update the same words.
//
// atomics(x, sum, counter, tickets, maxv, n), per element i < n:
//   atomicAdd(sum, x[i])               float add on memory (global_atomic_add_f32)
//   tickets[i] = atomicAdd(counter, 1) returning unsigned add: the tickets are 0..n-1, each once
//   float atomic max of x[i] into maxv  atomicCAS loop on the float's bits (returning cmpswap)
// The caller zeroes sum and counter and sets maxv to -inf. The sum's order is whatever the
// schedule gives; the test bounds its error by the (n - 1)-addition fp32 bound.
// Launch: block 64, grid ceil(n / 64).
#include "testing.h"

namespace {

__device__ void atomic_max_f32(float* addr, float v) {
  unsigned* bits = reinterpret_cast<unsigned*>(addr);
  unsigned old = __hip_atomic_load(bits, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  while (__uint_as_float(old) < v) {
    const unsigned seen = atomicCAS(bits, old, __float_as_uint(v));
    if (seen == old) break;
    old = seen;
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(64)
atomics(const float* __restrict__ x, float* sum, unsigned* counter, unsigned* __restrict__ tickets,
        float* maxv, int n) {
  const int i = blockIdx.x * 64 + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  atomicAdd(sum, v);
  tickets[i] = atomicAdd(counter, 1u);
  atomic_max_f32(maxv, v);
}
