// bitsandbytes 4-bit (NF4/FP4) fused dequant + GEMM for decode: y[n, m] = sum_k x[n, k] *
// code[q(m, k)] * absmax(block(m, k)) (+ bias) for N = 1..8 tokens, fp16/bf16 x and y, fp32
// accumulation on every arch, one rounding to the output type.
//
// Weight format, bitsandbytes' own: W [M, K] stored row-major as M * K / 2 bytes, element
// 2j of the flat order in the high nibble of byte j, 2j + 1 in the low one; block b of
// `blocksize` consecutive flat elements has scale absmax[b], or, nested, code2[absmax8[b]] *
// absmax2[b / 256] + offset (decoded here, in fp32). code is the 16-entry fp32 codebook, so
// one kernel serves NF4 and FP4.
//
// Arguments:
//   x        [N, x_stride] fp16/bf16 (T); 16-byte aligned, x_stride a multiple of 16 bytes
//   w        the packed bytes (row m at m * K / 2); 16-byte aligned
//   absmax   fp32 [M * K / blocksize] (flat), or uint8 codes when nested
//   absmax2  fp32 [ceil(blocks / 256)], code2 fp32 [256], offset fp32 [1] (nested; else unused)
//   code     fp32 [16]
//   bias     null, or bias[n * bias_stride + m] in T (stride 0: one [M] row)
//   y        [N, M] contiguous, T
//   kc       K columns staged in LDS per pass: a multiple of 32; >= K (staged once) or a
//            multiple of 32 * wave size (streamed; a chunk's lane does not depend on the pass)
//   log2_bs  log2(blocksize), 5..12; K a multiple of the blocksize (so of 32)
//
// Launch: matmul_4bit_<f16|bf16>_n<N>_y<YTILE>, block (256, 1, 1), any grid, dynamic LDS
// N * kc * 2 bytes (x staged as it is, widened to fp32 when read), plus 1088 static bytes (the
// codebook and the nested map).
//
// dequantize_4bit_<f16|bf16> (the op's route for other shapes; arguments and rules at its
// definition): block (256, 1, 1), any grid, 1088 static LDS bytes.
//
// Work split as kernels/skinny_gemm.hip (hs::lane_split::run; this file is its body): a wave owns YTILE consecutive rows x all tokens;
// lane l takes the 32-column chunks (16 weight bytes) g with g % wave == l in increasing g;
// each chunk's sums are scaled by its block's absmax (a chunk never straddles a block) and
// added to the accumulator; a fixed xor butterfly reduces across lanes. Results are bitwise
// the same for any grid, YTILE, kc or CU count. The codebook (and code2) sit in LDS: lanes
// reading different entries hit different banks, equal entries broadcast.
#include "hipskinny/codebook.h"
#include "hipskinny/common.h"
#include "hipskinny/lane_split.h"
#include "hipskinny/loads.h"

namespace {

constexpr int kThreads = hs::lane_split::kThreads;
constexpr int kChunk = 32;   // weights per lane chunk (16 bytes)
enum Flags : int { kNested = 1 };  // `flags` bits, copied into the manifest (launch_flags) for the planner


// x[:, k0 : k0 + len] for the NP token rows into LDS as they are (16-bit, 16 bytes at a time).
// Up to 2 of a thread's chunks (rows of one column, or one row's two columns) are loaded before
// any is stored: a round trip per 2 chunks (4 cost registers).
template <int NP>
__device__ void stage_x(hs::u32x4* xs, const uint16_t* __restrict__ x, int64_t x_stride, int k0, int len, int kc) {
  hs::stage_columns<NP, 2, hs::u32x4>(
      threadIdx.x, kThreads, len >> 3, [&](int n, int c) { return hs::load16(x + n * x_stride + k0 + 8 * c); },
      [&](int n, int c, hs::u32x4 v) { xs[n * (kc >> 3) + c] = v; });
}

// Eight staged 16-bit x values as fp32 (exact).
template <typename T>
__device__ inline void widen8(hs::u32x4 q, float (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = hs::to_float<T>((uint16_t)q[i]);
    v[2 * i + 1] = hs::to_float<T>((uint16_t)(q[i] >> 16));
  }
}

// The lane-split body (hipskinny/lane_split.h): x staged as it is, the codebook (and the nested
// map) in LDS, each 32-column chunk scaled by its block's absmax.
template <typename T, int NP, int YTILE>
struct Matmul4bit : hs::lane_split::Body {
  const uint16_t* x;
  const uint8_t* w;
  const void* absmax;
  const float* absmax2;
  const float* code2_g;
  const float* code_g;
  const uint16_t* bias;
  uint16_t* y;
  int M, K;
  int64_t x_stride, bias_stride;
  int kc, log2_bs, flags;
  float offset;
  uint32_t row_blocks;  // absmax blocks per row
  uint32_t last2;       // nested: the last absmax2 entry
  bool two_entries;     // nested: row_blocks <= 256 (see chunks)
  int row_q;            // 16-byte LDS slots per staged token row
  float* code;    // LDS: the 16-entry codebook
  float* code2;   // LDS: the nested map's 256 entries

  HS_BODY bool prologue(hs::u32x4* xs, bool staged_once) const {
    if (threadIdx.x < 16) code[threadIdx.x] = code_g[threadIdx.x];
    if (flags & kNested) code2[threadIdx.x] = code2_g[threadIdx.x];   // kThreads == 256 entries
    if (staged_once) stage_x<NP>(xs, x, x_stride, 0, K, kc);
    return true;
  }
  HS_BODY void stage(hs::u32x4* xs, int k0, int len) const { stage_x<NP>(xs, x, x_stride, k0, len, kc); }

  // A wave's rows (uniform: their addresses and nested absmax2 candidates sit in SGPRs).
  struct Rows {
    const uint8_t* w[YTILE];   // row r's packed bytes
    uint32_t b[YTILE];         // its first block (flat index; M * K < 2^31, so blocks < 2^26)
    uint32_t b2[YTILE];        // nested: the first block of the absmax2 entry after its first one
    float a2[YTILE][2];        // nested: those two entries' absmax2
  };
  HS_BODY void rows(Rows& rows, int m0) const {
    const bool nested = (flags & kNested) != 0;
#pragma unroll
    for (int r = 0; r < YTILE; ++r) {
      const uint32_t m = __builtin_amdgcn_readfirstlane(min(m0 + r, M - 1));
      rows.w[r] = w + (int64_t)m * (K / 2);
      rows.b[r] = m * row_blocks;
      rows.b2[r] = ((rows.b[r] >> 8) + 1) << 8;
      if (nested && two_entries) {
        rows.a2[r][0] = absmax2[rows.b[r] >> 8];
        rows.a2[r][1] = absmax2[min((rows.b[r] >> 8) + 1, last2)];
      }
    }
  }

  // How a chunk's block scale is found (uniform per launch, one copy of the chunk loop each).
  enum Scales { kPlain, kNestedTwo, kNestedLoad };

  HS_BODY void pass(Rows& rows, float (&acc)[NP][YTILE], const hs::u32x4* xs, int k0, int len, int lane) const {
    if (!(flags & kNested)) chunks<kPlain>(rows, acc, xs, k0, len, lane);
    else if (two_entries) chunks<kNestedTwo>(rows, acc, xs, k0, len, lane);
    else chunks<kNestedLoad>(rows, acc, xs, k0, len, lane);
  }

  // A lane's chunks of the pass. Each chunk's scale is loaded with its weights and decoded after
  // its sums, so neither waits for the other: a lane's chunks are a wave's worth of columns apart,
  // in one block only for the largest blocksizes, so each loads its own (plain absmax, or the
  // nested code). Nested, a row of at most 256 blocks spans at most two absmax2 entries, both read
  // per row (kNestedTwo); longer rows load the chunk's entry too (kNestedLoad).
  template <int S>
  HS_BODY void chunks(const Rows& rows, float (&acc)[NP][YTILE], const hs::u32x4* xs, int k0, int len,
                      int lane) const {
    const int full = len / kChunk;
    for (int c = lane; c < full; c += hs::kWave) {
      const int k = k0 + kChunk * c;
      const uint32_t kb = (uint32_t)k >> log2_bs;
      hs::u32x4 wv[YTILE];
      float raw[YTILE];      // plain: the scale; nested: the chunk's absmax2
      uint32_t q[YTILE];     // nested: the absmax code
#pragma unroll
      for (int r = 0; r < YTILE; ++r) {
        const uint32_t b = rows.b[r] + kb;
        wv[r] = hs::load16_stream(rows.w[r] + (uint32_t)(k / 2));
        if constexpr (S == kPlain) {
          raw[r] = static_cast<const float*>(absmax)[b];
        } else {
          q[r] = static_cast<const uint8_t*>(absmax)[b];
          if constexpr (S == kNestedLoad) raw[r] = absmax2[b >> 8];
          else raw[r] = b < rows.b2[r] ? rows.a2[r][0] : rows.a2[r][1];
        }
      }
      float s[NP][YTILE];
#pragma unroll
      for (int n = 0; n < NP; ++n)
#pragma unroll
        for (int r = 0; r < YTILE; ++r) s[n][r] = 0.0f;
      // Eight weights (one dword) at a time: their codebook values for every row, then each
      // token's x for those columns (one 16-byte LDS read, widened to fp32).
#pragma unroll
      for (int d = 0; d < 4; ++d) {
        float v[YTILE][8];
#pragma unroll
        for (int r = 0; r < YTILE; ++r) hs::codebook::values(code, wv[r][d], v[r]);
#pragma unroll
        for (int n = 0; n < NP; ++n) {
          float xv[8];
          widen8<T>(xs[n * row_q + 4 * c + d], xv);
#pragma unroll
          for (int r = 0; r < YTILE; ++r)
#pragma unroll
            for (int e = 0; e < 8; ++e) s[n][r] = __builtin_fmaf(xv[e], v[r][e], s[n][r]);
        }
        // One dword's lookups live at a time (left to itself the scheduler may hoist the next
        // dword's: spills on gfx11/12 at N = 7, 8, and on gfx9 a wave per SIMD lost to registers).
        __builtin_amdgcn_sched_barrier(0);
      }
#pragma unroll
      for (int r = 0; r < YTILE; ++r) {
        const float sc = S == kPlain ? raw[r] : __builtin_fmaf(code2[q[r]], raw[r], offset);
#pragma unroll
        for (int n = 0; n < NP; ++n) acc[n][r] = __builtin_fmaf(s[n][r], sc, acc[n][r]);
      }
    }
  }

  HS_BODY void store(float sum, int n, int row) const {
    if (bias != nullptr) sum += hs::to_float<T>(bias[n * bias_stride + row]);
    y[(int64_t)n * M + row] = hs::from_float<T>(sum);
  }
};

// The kernel's arguments as __restrict__ parameters (noalias scopes once inlined).
template <typename T, int NP, int YTILE>
__device__ void matmul_4bit(const uint16_t* __restrict__ x, const uint8_t* __restrict__ w,
                            const void* __restrict__ absmax, const float* __restrict__ absmax2,
                            const float* __restrict__ code2_g, const float* __restrict__ offset_p,
                            const float* __restrict__ code_g, const uint16_t* __restrict__ bias,
                            uint16_t* __restrict__ y, int M, int K, int64_t x_stride, int64_t bias_stride, int kc,
                            int log2_bs, int flags) {
  __shared__ float code[16];
  __shared__ float code2[256];
  const float offset = (flags & kNested) ? *offset_p : 0.0f;
  const uint32_t row_blocks = (uint32_t)K >> log2_bs;
  hs::lane_split::run<NP, YTILE>(Matmul4bit<T, NP, YTILE>{{}, x, w, absmax, absmax2, code2_g, code_g, bias, y, M, K,
                                                          x_stride, bias_stride, kc, log2_bs, flags, offset,
                                                          row_blocks, ((uint32_t)M * row_blocks - 1) >> 8,
                                                          row_blocks <= 256, kc >> 3, code, code2},
                                 M, K, kc);
}

// The dequantize kernel of the route for shapes the fused kernels do not take (K not a
// multiple of the blocksize, or more tokens than they serve): W [M, K] as T into out [M, pitch]
// (pitch a multiple of 8 >= K; columns K..pitch zero), each weight T(code[q] * scale) with the
// fp32 product rounded once, as bitsandbytes' dequantize. A thread writes 8 consecutive columns
// (one 16-byte store) per step of a grid-stride loop over (row, 8-column group). When K is a
// multiple of 8 their 8 codes are one aligned dword in one block; otherwise each element finds
// its own byte, nibble and block (rows then start mid-byte and blocks straddle rows).
// One copy of the loop per (nested absmax, K a multiple of 8): uniform per launch, so no branch
// around a load inside it.
template <typename T, bool NESTED, bool K8>
__device__ void dequantize_groups(const uint8_t* __restrict__ w, const void* __restrict__ absmax,
                                  const float* __restrict__ absmax2, const float* code2, float offset,
                                  const float* code, uint16_t* __restrict__ out, int M, int K, int pitch,
                                  int log2_bs) {
  const auto scale = [&](uint32_t b) {
    return NESTED ? __builtin_fmaf(code2[static_cast<const uint8_t*>(absmax)[b]], absmax2[b >> 8], offset)
                  : static_cast<const float*>(absmax)[b];
  };
  // 32-bit indices (M * K < 2^31, checked by the op); the row and 8-column group by hs::RowCol.
  const uint32_t groups = (uint32_t)pitch >> 3, total = (uint32_t)M * groups;
  const uint32_t step = gridDim.x * kThreads;
  uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  hs::RowCol at(i, step, groups);
  for (; i < total; i = total - i > step ? i + step : total, at.advance()) {
    const uint32_t m = at.row;
    const int k = 8 * (int)at.col;
    const uint32_t e = m * (uint32_t)K + (uint32_t)k;
    uint16_t v[8];
    if constexpr (K8) {
      const uint32_t q = *reinterpret_cast<const uint32_t*>(w + (e >> 1));
      const float s = scale(e >> log2_bs);
      float c[8];
      hs::codebook::values(code, q, c);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = hs::from_float<T>(c[j] * s);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t f = e + j;
        const uint32_t byte = w[f >> 1];
        const uint32_t nib = (f & 1) ? (byte & 15u) : (byte >> 4);
        v[j] = k + j < K ? hs::from_float<T>(code[nib] * scale(f >> log2_bs)) : (uint16_t)0;
      }
    }
    *reinterpret_cast<hs::u32x4*>(out + (uint64_t)m * (uint32_t)pitch + k) =
        hs::u32x4{v[0] | (uint32_t)v[1] << 16, v[2] | (uint32_t)v[3] << 16, v[4] | (uint32_t)v[5] << 16,
                  v[6] | (uint32_t)v[7] << 16};
  }
}

template <typename T>
__device__ void dequantize(const uint8_t* __restrict__ w, const void* __restrict__ absmax,
                           const float* __restrict__ absmax2, const float* __restrict__ code2_g,
                           const float* __restrict__ offset_p, const float* __restrict__ code_g,
                           uint16_t* __restrict__ out, int M, int K, int pitch, int log2_bs, int flags) {
  __shared__ float code[16];
  __shared__ float code2[256];
  const bool nested = (flags & kNested) != 0;
  if (threadIdx.x < 16) code[threadIdx.x] = code_g[threadIdx.x];
  if (nested) code2[threadIdx.x] = code2_g[threadIdx.x];
  __syncthreads();
  const float offset = nested ? *offset_p : 0.0f;
  const bool k8 = (K & 7) == 0;
  if (nested) {
    if (k8) dequantize_groups<T, true, true>(w, absmax, absmax2, code2, offset, code, out, M, K, pitch, log2_bs);
    else dequantize_groups<T, true, false>(w, absmax, absmax2, code2, offset, code, out, M, K, pitch, log2_bs);
  } else {
    if (k8) dequantize_groups<T, false, true>(w, absmax, absmax2, code2, offset, code, out, M, K, pitch, log2_bs);
    else dequantize_groups<T, false, false>(w, absmax, absmax2, code2, offset, code, out, M, K, pitch, log2_bs);
  }
}

}  // namespace

#define HS_4BIT(T, TAG, NP, YT)                                                                             \
  extern "C" __global__ void __launch_bounds__(kThreads) matmul_4bit_##TAG##_n##NP##_y##YT(                 \
      const uint16_t* __restrict__ x, const uint8_t* __restrict__ w, const void* __restrict__ absmax,       \
      const float* __restrict__ absmax2, const float* __restrict__ code2, const float* __restrict__ offset, \
      const float* __restrict__ code, const uint16_t* __restrict__ bias, uint16_t* __restrict__ y, int M,    \
      int K, int64_t x_stride, int64_t bias_stride, int kc, int log2_bs, int flags) {                       \
    matmul_4bit<T, NP, YT>(x, w, absmax, absmax2, code2, offset, code, bias, y, M, K, x_stride, bias_stride, \
                           kc, log2_bs, flags);                                                             \
  }
#define HS_4BIT_Y3(T, TAG, NP) HS_4BIT(T, TAG, NP, 1) HS_4BIT(T, TAG, NP, 2) HS_4BIT(T, TAG, NP, 4)
#define HS_4BIT_Y2(T, TAG, NP) HS_4BIT(T, TAG, NP, 1) HS_4BIT(T, TAG, NP, 2)
#define HS_4BIT_ALL(T, TAG)                                                                       \
  HS_4BIT_Y3(T, TAG, 1) HS_4BIT_Y3(T, TAG, 2) HS_4BIT_Y3(T, TAG, 3) HS_4BIT_Y3(T, TAG, 4)       \
  HS_4BIT_Y2(T, TAG, 5) HS_4BIT_Y2(T, TAG, 6) HS_4BIT_Y2(T, TAG, 7) HS_4BIT_Y2(T, TAG, 8)

HS_4BIT_ALL(hs::f16, f16)
HS_4BIT_ALL(hs::bf16, bf16)

#define HS_DEQUANTIZE(T, TAG)                                                                                \
  extern "C" __global__ void __launch_bounds__(kThreads) dequantize_4bit_##TAG(                              \
      const uint8_t* __restrict__ w, const void* __restrict__ absmax, const float* __restrict__ absmax2,       \
      const float* __restrict__ code2, const float* __restrict__ offset, const float* __restrict__ code,     \
      uint16_t* __restrict__ out, int M, int K, int pitch, int log2_bs, int flags) {                          \
    dequantize<T>(w, absmax, absmax2, code2, offset, code, out, M, K, pitch, log2_bs, flags);                \
  }
HS_DEQUANTIZE(hs::f16, f16)
HS_DEQUANTIZE(hs::bf16, bf16)
