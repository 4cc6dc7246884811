// Memory instructions with AGPR data (gfx90a and later: the acc bit), as LLVM emits them once
// matrix accumulators fill the VGPRs (matmul_4bit_splitk's _direct kernels load weights and x
// into AGPRs). One wave; lane l:
//   global_load_dwordx4 a[0:3]  <- src[4 l .. 4 l + 3]
//   buffer_load_dword   a8      <- src[256 + l]            (raw buffer over src's 2 KiB)
//   ds_write_b128 LDS[16 l]     <- a[0:3];  ds_read_b128 a[4:7] <- LDS[16 (63 - l)]  (lane 63 - l's)
//   global_store_dwordx4 out[4 l .. 4 l + 3] <- a[4:7];  global_store_dword out[256 + l] <- a8
// so out[4 l + i] = src[4 (63 - l) + i] and out[256 + l] = src[256 + l]. RDNA has no AGPRs: there
// the body is empty (the test runs gfx942/gfx950 only).
// Launch: grid 1, block 64.
#include "testing.h"

extern "C" __global__ void __launch_bounds__(64) agpr_memory(const uint32_t* src, uint32_t* out) {
#if defined(__gfx942__) || defined(__gfx950__)
  __shared__ uint32_t lds[256];
  const uint32_t l = threadIdx.x;
  typedef __attribute__((address_space(3))) uint32_t lds_u32;
  const uint32_t mine = (uint32_t)(uintptr_t)(lds_u32*)(lds + 4 * l);
  const uint32_t theirs = (uint32_t)(uintptr_t)(lds_u32*)(lds + 4 * (63 - l));
  const auto buf = __builtin_amdgcn_make_buffer_rsrc(const_cast<uint32_t*>(src), 0, 2048, 0x00020000);
  asm volatile(
      "global_load_dwordx4 a[0:3], %[p], off\n\t"
      "buffer_load_dword a8, %[boff], %[rsrc], 0 offen\n\t"
      "s_waitcnt vmcnt(0)\n\t"
      "ds_write_b128 %[mine], a[0:3]\n\t"
      "s_waitcnt lgkmcnt(0)\n\t"
      "s_barrier\n\t"
      "ds_read_b128 a[4:7], %[theirs]\n\t"
      "s_waitcnt lgkmcnt(0)\n\t"
      "global_store_dwordx4 %[q], a[4:7], off\n\t"
      "global_store_dword %[q2], a8, off\n\t"
      "s_waitcnt vmcnt(0)"
      :
      : [p] "v"(src + 4 * l), [boff] "v"(4 * (256 + l)), [rsrc] "s"(buf), [mine] "v"(mine), [theirs] "v"(theirs),
        [q] "v"(out + 4 * l), [q2] "v"(out + 256 + l)
      : "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "memory");
#else
  (void)src;
  (void)out;
#endif
}
