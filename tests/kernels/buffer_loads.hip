// Raw buffer loads, as the gfx9 kernels use them (matmul_4bit's weights and x staging): one wave
// of 64 lanes loads from a raw buffer (stride 0) of `bytes` bytes at src, descriptor word 3
// `word3`, SGPR offset soff; lane l writes
//   out[4 l .. 4 l + 3]   buffer_load_dwordx4 at VGPR offset 16 l
//   out[256 + l]          buffer_load_ubyte   at VGPR offset l
//   out[320 + l]          buffer_load_dword   at VGPR offset 4 l
// An access wholly past `bytes` reads zero. The same code on every arch: the kernels use buffer
// loads on gfx942/gfx950 only, and the emulator refuses them on gfx11/gfx12 (not modeled there).
// Launch: grid 1, block 64.
#include "testing.h"

extern "C" __global__ void __launch_bounds__(64)
buffer_loads(const uint8_t* src, uint32_t* out, uint32_t bytes, uint32_t soff, uint32_t word3) {
  const auto buf = __builtin_amdgcn_make_buffer_rsrc(const_cast<uint8_t*>(src), 0, bytes, word3);
  const uint32_t l = threadIdx.x;
  const auto v = __builtin_amdgcn_raw_buffer_load_b128(buf, 16 * l, soff, 0);
  out[4 * l] = v[0];
  out[4 * l + 1] = v[1];
  out[4 * l + 2] = v[2];
  out[4 * l + 3] = v[3];
  out[256 + l] = __builtin_amdgcn_raw_buffer_load_b8(buf, l, soff, 0);
  out[320 + l] = __builtin_amdgcn_raw_buffer_load_b32(buf, 4 * l, soff, 0);
}
