// Shared device helpers for hipskinny kernels: wave size, 16-byte vector loads,
// fp32-accumulating dot products of packed 16-bit pairs, wave-wide sums.
//
// Arch differences live only here (and in the per-family tile choices):
//   gfx942/gfx950  wave64, DPP row_shr + row_bcast, v_dot2c_f32_f16
//                  (bf16: v_dot2c_f32_bf16 on gfx950, exact fp32 widening on gfx942)
//   gfx11/gfx12    wave32, DPP16 row_shr + v_readlane, v_dot2{acc,}_f32_f16 / v_dot2_f32_bf16
#pragma once

#include <hip/hip_runtime.h>
#include <stdint.h>

#if defined(__gfx942__) || defined(__gfx950__)
#define HS_GFX9 1
#define HS_WAVE 64
#elif defined(__gfx1100__) || defined(__gfx1151__) || defined(__gfx1201__)
#define HS_GFX9 0
#define HS_WAVE 32
#else
#error "hipskinny kernels are built for gfx942, gfx950, gfx1100, gfx1151 and gfx1201 only"
#endif

namespace hs {

constexpr int kWave = HS_WAVE;

// This wave's index in its workgroup, as a scalar. threadIdx.x / kWave is the same on every lane
// of a wave, but the compiler cannot prove it: a branch on anything derived from it would be
// lowered as divergent (exec-masked), with copies of every value it changes at the merge.
__device__ inline int wave_index() { return __builtin_amdgcn_readfirstlane(threadIdx.x / kWave); }

typedef _Float16 half2v __attribute__((ext_vector_type(2)));
typedef __bf16 bf162v __attribute__((ext_vector_type(2)));
typedef uint32_t u32x4 __attribute__((ext_vector_type(4)));

// Element tags: the kernels move raw 16-bit patterns and only interpret them
// inside dot2/to_float/from_float, so no HIP half/bf16 class is needed.
struct f16 { uint16_t bits; };
struct bf16 { uint16_t bits; };

// 16 bytes = 8 elements, streamed once (weights): non-temporal so they do not
// evict the activations every workgroup re-reads from cache.
__device__ inline u32x4 load16_stream(const void* p) {
  return __builtin_nontemporal_load(reinterpret_cast<const u32x4*>(p));
}
__device__ inline u32x4 load16(const void* p) { return *reinterpret_cast<const u32x4*>(p); }

#if HS_GFX9
// A raw buffer resource (stride 0) over the `bytes` bytes at p, for loads that take a
// loop-invariant VGPR offset and a uniform SGPR one (no per-load address arithmetic; a global load
// wants its 64-bit address or an offset computed in the same block). Loads past `bytes` return
// zero. Word 3 sets DATA_FORMAT 32, as CK does on gfx9 (the untyped loads ignore it, but 0 marks
// the resource invalid).
__device__ inline __amdgpu_buffer_rsrc_t buffer(const void* p, uint32_t bytes) {
  return __builtin_amdgcn_make_buffer_rsrc(const_cast<void*>(p), 0, bytes, 0x00020000);
}
#endif

// A grid-stride loop's position in a row-major [rows, cols] index space: the row and column
// follow the stride by additions (two divisions per thread, at the start; none per step).
struct RowCol {
  uint32_t row, col, step_row, step_col, cols;

  __device__ inline RowCol(uint32_t i, uint32_t step, uint32_t cols_)
      : row(i / cols_), col(i - (i / cols_) * cols_), step_row(step / cols_), step_col(step - (step / cols_) * cols_),
        cols(cols_) {}
  __device__ inline void advance() {
    col += step_col;
    row += step_row;
    if (col >= cols) {
      col -= cols;
      ++row;
    }
  }
};

// Wait until every vector-memory load this wave issued has returned. Where loads and their uses
// sit under the same condition in separate blocks, the compiler's wait insertion cannot tell that
// a use always follows its load and may assume a load still in flight when the registers are
// reused, waiting before each later load; one explicit wait where all of them have been used
// clears that (it costs nothing there).
__device__ inline void wait_loads() {
#if HS_GFX9
  __builtin_amdgcn_s_waitcnt(0x0f70);   // vmcnt(0): bits 3:0 and 15:14; expcnt, lgkmcnt at their maximum
#elif defined(__gfx1201__)
  // (no builtin for s_wait_loadcnt in clang-22, and one in inline asm is invisible to the pass)
#else
  __builtin_amdgcn_s_waitcnt(0x03f7);   // gfx11 vmcnt(0): bits 15:10; expcnt, lgkmcnt at their maximum
#endif
}

// A workgroup barrier that orders LDS only. __syncthreads() fences every address space, which on
// gfx11/gfx12 (WGP mode: a workgroup spans two CUs' caches) makes each wave wait for all its
// global loads at the barrier; with this one, loads issued before it (a prefetch) stay in flight.
__device__ inline void lds_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup", "local");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup", "local");
}

// acc + a.lo*b.lo + a.hi*b.hi for one dword of each operand. The products of two
// 16-bit floats are exact in fp32 (11+11 or 8+8 significant bits), so the only
// rounding is fp32 accumulation.
template <typename T> __device__ float dot2(uint32_t a, uint32_t b, float acc);

template <> __device__ inline float dot2<f16>(uint32_t a, uint32_t b, float acc) {
  return __builtin_amdgcn_fdot2(__builtin_bit_cast(half2v, a), __builtin_bit_cast(half2v, b), acc, false);
}

template <> __device__ inline float dot2<bf16>(uint32_t a, uint32_t b, float acc) {
#if defined(__gfx942__)
  // No bf16 dot on gfx942: a bf16 is the top half of an fp32, so widening is a shift/mask.
  float alo = __builtin_bit_cast(float, a << 16), ahi = __builtin_bit_cast(float, a & 0xffff0000u);
  float blo = __builtin_bit_cast(float, b << 16), bhi = __builtin_bit_cast(float, b & 0xffff0000u);
  return __builtin_fmaf(ahi, bhi, __builtin_fmaf(alo, blo, acc));
#else
  return __builtin_amdgcn_fdot2_f32_bf16(__builtin_bit_cast(bf162v, a), __builtin_bit_cast(bf162v, b), acc, false);
#endif
}

template <typename T> __device__ float to_float(uint16_t v);
template <> __device__ inline float to_float<f16>(uint16_t v) { return (float)__builtin_bit_cast(_Float16, v); }
template <> __device__ inline float to_float<bf16>(uint16_t v) { return __builtin_bit_cast(float, (uint32_t)v << 16); }

// fp32 -> 16-bit with round-to-nearest-even; NaN stays NaN (quieted).
template <typename T> __device__ uint16_t from_float(float v);
template <> __device__ inline uint16_t from_float<f16>(float v) { return __builtin_bit_cast(uint16_t, (_Float16)v); }
template <> __device__ inline uint16_t from_float<bf16>(float v) {
  uint32_t u = __builtin_bit_cast(uint32_t, v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

// DPP controls (ISA "DPP_CTRL" encodings).
constexpr int kRowShr = 0x110;    // + n: lane i reads lane i-n of its 16-lane row
#if HS_GFX9
constexpr int kRowBcast15 = 0x142;  // lane 15 of each row feeds the next row
constexpr int kRowBcast31 = 0x143;  // lane 31 feeds rows 2 and 3
#endif

template <int CTRL, int ROW_MASK = 0xf>
__device__ inline float dpp_add(float v) {
  // Lanes whose source is outside the row (bound_ctrl) or whose row is masked
  // off read 0, so adding the moved value is a no-op for them.
  int moved = __builtin_amdgcn_update_dpp(0, __builtin_bit_cast(int, v), CTRL, ROW_MASK, 0xf, true);
  return v + __builtin_bit_cast(float, moved);
}

// Sum of v over the whole wave, returned wave-uniform. The tree is fixed, so the
// result is bitwise reproducible: an inclusive scan inside each 16-lane row
// (row_shr 1,2,4,8 leaves the row total in lane 15), then the row totals combine.
__device__ inline float wave_sum(float v) {
  v = dpp_add<kRowShr + 1>(v);
  v = dpp_add<kRowShr + 2>(v);
  v = dpp_add<kRowShr + 4>(v);
  v = dpp_add<kRowShr + 8>(v);
#if HS_GFX9
  v = dpp_add<kRowBcast15, 0xa>(v);  // lane 31 = rows 0+1, lane 63 = rows 2+3
  v = dpp_add<kRowBcast31, 0xc>(v);  // lane 63 = all four rows
  return __builtin_bit_cast(float, __builtin_amdgcn_readlane(__builtin_bit_cast(int, v), 63));
#else
  float r0 = __builtin_bit_cast(float, __builtin_amdgcn_readlane(__builtin_bit_cast(int, v), 15));
  float r1 = __builtin_bit_cast(float, __builtin_amdgcn_readlane(__builtin_bit_cast(int, v), 31));
  return r0 + r1;
#endif
}

}  // namespace hs
