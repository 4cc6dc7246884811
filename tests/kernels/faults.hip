// Faults: kernels with deliberate bugs the emulator must catch instead of computing
// something. Each kernel says what the emulator must report.
#include "testing.h"

// oob_read(x, y, n): y[i] = x[i + 1] for i < n, so thread n - 1 reads x[n], one element
// past the end of x. The launch must raise EmulatorFault naming the kernel, the pc, the
// lane and the address. Launch: block 64, grid ceil(n / 64).
extern "C" __global__ void __launch_bounds__(64) oob_read(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * 64 + threadIdx.x;
  if (i < n) y[i] = x[i + 1];
}

// runaway(flag, out): spins while flag[0] == 0 (volatile: every iteration loads it), then
// writes out[t] = 1. With flag 0 it never ends: the emulator must stop it after
// max_wave_steps with an error that says "runaway". With flag 1 it finishes.
// Launch: block 64, grid 1.
extern "C" __global__ void __launch_bounds__(64) runaway(volatile int* flag, int* out) {
  while (flag[0] == 0) {
  }
  out[threadIdx.x] = 1;
}

// lds_uninit(y): threads 0..127 write tile[t]; after the barrier every thread reads tile[t],
// so threads 128..255 read LDS nobody wrote (garbage on hardware). With strict_lds the
// emulator must fault; by default it runs. Launch: block 256, grid 1.
extern "C" __global__ void __launch_bounds__(256) lds_uninit(float* y) {
  __shared__ float tile[256];
  const int t = threadIdx.x;
  if (t < 128) tile[t] = 1.0f + t;
  __syncthreads();
  y[t] = tile[t];
}
