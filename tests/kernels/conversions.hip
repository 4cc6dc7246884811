// Conversions: checks the emulator's float <-> float and int <-> float conversion
// instructions (whatever clang emits for the standard HIP conversions) against
// numpy / ml_dtypes, on inputs that cover RNE ties, overflow, NaN, +-inf, -0 and
// denormals (f32 and f16).
//
// cvt_f32(x, f16_bits, f16_back, bf16_bits, n), per element i < n:
//   f16_bits[i]  = bits of __float2half(x[i])        f32 -> f16: RNE, overflow to +-inf, f16 denormals kept
//   f16_back[i]  = __half2float(that half)            f16 -> f32: exact
//   bf16_bits[i] = bits of __float2bfloat16(x[i])     f32 -> bf16 by the HIP header's integer RNE
//                                                     (NaN: truncated, low bit set if payload would vanish)
// cvt_f16(h, f, n):    f[i] = __half2float(h[i]) for raw f16 bit patterns (denormals, inf, NaN)
// cvt_int(si, ui, fi, fu, from_i32, from_u32, to_i32, to_u32, n):
//   from_i32[i] = (float)si[i], from_u32[i] = (float)ui[i]    RNE above 2^24
//   to_i32[i] = (int)fi[i], to_u32[i] = (unsigned)fu[i]       truncation toward zero; the inputs are in
//                                                             range (out-of-range is undefined in C++)
// Launch: block 64, grid ceil(n / 64).
#include <hip/hip_bf16.h>
#include <hip/hip_fp16.h>

#include "testing.h"

extern "C" __global__ void __launch_bounds__(64)
cvt_f32(const float* __restrict__ x, unsigned short* __restrict__ f16_bits, float* __restrict__ f16_back,
        unsigned short* __restrict__ bf16_bits, int n) {
  const int i = blockIdx.x * 64 + threadIdx.x;
  if (i >= n) return;
  const __half h = __float2half(x[i]);
  f16_bits[i] = __half_as_ushort(h);
  f16_back[i] = __half2float(h);
  // Not __bfloat16_as_ushort: in HIP 6.2 it converts the value (via float) instead of the bits.
  bf16_bits[i] = __builtin_bit_cast(unsigned short, __float2bfloat16(x[i]));
}

extern "C" __global__ void __launch_bounds__(64)
cvt_f16(const unsigned short* __restrict__ h, float* __restrict__ f, int n) {
  const int i = blockIdx.x * 64 + threadIdx.x;
  if (i < n) f[i] = __half2float(__ushort_as_half(h[i]));
}

extern "C" __global__ void __launch_bounds__(64)
cvt_int(const int* __restrict__ si, const unsigned* __restrict__ ui, const float* __restrict__ fi,
        const float* __restrict__ fu, float* __restrict__ from_i32, float* __restrict__ from_u32,
        int* __restrict__ to_i32, unsigned* __restrict__ to_u32, int n) {
  const int i = blockIdx.x * 64 + threadIdx.x;
  if (i >= n) return;
  from_i32[i] = static_cast<float>(si[i]);
  from_u32[i] = static_cast<float>(ui[i]);
  to_i32[i] = static_cast<int>(fi[i]);
  to_u32[i] = static_cast<unsigned>(fu[i]);
}
