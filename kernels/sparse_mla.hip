// Sparse MLA decode (DeepSeek V4 "MODEL1" and V3.2 FP8 KV caches), one launch, deterministic:
//   o[t, h] = sum_j exp(s_j - M) V_j / (sum_j exp(s_j - M) + exp(sink_h - M)),  s_j = scale <q[t, h], K_j>
// over the valid slots j of token t's two ragged lists (one softmax over both), V_j = K_j[0:512].
// Semantics: reference/sparse_mla_spec.md sections 2, 4, 5; frontend/ops/sparse_mla.py has the
// float64 reference.
//
// Work split: workgroup (t, head group hb, split s), flattened into blockIdx.x as (t * HB + hb) * S
// + s; a group is 16 heads (sparse_mla_<layout>), or 64 on gfx9 / 32 on gfx11/gfx12 in the wide
// kernels (sparse_mla_<layout>_wide: Shape below), which read each gathered row once for all of
// them. Token t's positions 0 .. L-1 (L = len0 + len1: list 0, then list 1) are cut into S
// contiguous chunks of whole 32-row tiles; a split walks its chunk tile by tile with an online
// softmax. q's head rows are read once per workgroup into per-wave registers (through LDS when
// they fit the tile buffer, else straight into the matrix fragments); their loads, both first
// tiles' index entries and the sinks share one round trip, tile 0's scales share its rows'. Per
// tile, with the gather double-buffered (LDS tile + registers):
//   unpack   the tile's 16-byte chunks, loaded into registers during the previous tile's matrix
//            work, into LDS as bf16: FP8 decoded exactly (hipskinny/fp8.h: the hardware converter
//            where it decodes the row's flavour, else integer widening) times the row's
//            power-of-two scale (exact: 4 significant bits); rope lanes copied; rows past the
//            chunk or whose slot is outside [0, rows) are zeros and flagged. Meanwhile 32
//            threads resolve the next tile's rows (addresses, scales: one index load per row,
//            issued a tile ahead); after the barrier every thread issues its next-tile loads
//   QK       S[heads x 32 rows] on the matrix units (hipskinny/splitk.h's tile multiply, heads
//            as A rows from q fragments held in registers, K rows as B columns from LDS); the
//            waves of a 16-head tile take its matrix steps in turn (slices) for both row tiles,
//            partial sums to LDS; head tiles wholly past H are skipped
//   softmax  kThreads / heads threads per head, a few rows each: the slices summed in order,
//            times scale, invalid rows -inf; new max m, alpha = exp(m_old - m), p = exp(s - m)
//            (0 for invalid rows), l = l alpha + sum p in fp32; p to LDS as bf16, alpha to LDS
//   PV       acc = acc alpha + P . V: wave w owns 512 / waves output lanes of every head (each V
//            fragment from LDS serves all head tiles)
// After the chunk: S = 1 finishes in place; otherwise the split's (m, l, acc) go to its scratch
// slot in fp32, and the last split to arrive for (t, hb) (self-cleaning counters) merges all S
// slots in split order: M = max m_s, w_s = exp(m_s - M), l = sum w_s l_s, acc = sum w_s acc_s
// (every slot's m and l loaded at once, two slots' acc in flight: the merge's round trips are
// 3 + S / 2, ops/sparse_mla.py's chain_trips, which the split count minimizes).
// Finish: the sink, o = acc / Z, lse = M + log(l) (natural log, sink excluded, +inf with no valid
// row), rows h >= H skipped. Results do not depend on the grid order, CU count or schedule.
//
// NaN in a valid gathered row reaches the outputs of its token (every head): p and the products
// carry it. Empty lists and sigma = +inf give exactly 0.
//
// Cache layouts (base pointer + block stride in bytes + block size; slot = block * bs + offset):
//   v4   token data at block + off * 576: 448 FP8 (lanes 0..447), 64 bf16 (lanes 448..511);
//        UE8M0 exponents at block + bs * 576 + off * 8, byte c for lanes 64c..64c+63 (c < 7);
//        QK over 512 lanes, PV over the same 512
//   v32  token at block + off * 656: 512 FP8, 4 fp32 scales (one per 128 lanes), 64 bf16 rope;
//        QK over 576 lanes, PV over the first 512
// FP8 flavour per list: flags kFnuz0 (list 0) / kFnuz1 (list 1) set = FNUZ, else OCP.
//
// Arguments (block (256, 1, 1), or the wide kernels' Shape::kThreads; grid T * HB * S, static LDS only):
//   sparse_mla_<v4|v32>[_wide](q, c0, idx0, ptr0, c1, idx1, ptr1, sink, out, lse, part, counters,
//                       q_st, q_sh, bstride0, bs0, rows0, n0, bstride1, bs1, rows1, n1, scale, o_st,
//                       o_sh, T, H, S, flags)
//   q bf16 with element strides (t, h), lanes contiguous, 16-byte aligned rows; caches 16-byte
//   aligned with block strides a multiple of 16; list 1 absent: ptr1 = null (len1 = 0); n0 / n1:
//   the index arrays' lengths, which clip each token's range [ptr[t], ptr[t + 1]) to [0, n) (lists
//   on the device are never checked by the host: whatever they hold, no read leaves idx); sink
//   fp32 [>= H] (read when flags has kSink); out bf16 [T, H, 512] with element strides (t, h), lanes
//   contiguous; lse fp32 [T, H] (written when flags has kLse); part: S > 1 only, T * HB * S slots
//   of Shape::kSlotFloats (heads x 512 + 2 x heads); counters: T * HB words, zero between calls
//   (S > 1 only).
#include "hipskinny/common.h"
#include "hipskinny/fp8.h"
#include "hipskinny/reduce.h"
#include "hipskinny/splitk.h"

namespace {

namespace sk = hs::splitk;

enum Flags : int { kFnuz0 = 1, kFnuz1 = 2, kLse = 4, kSink = 8 };  // `flags` bits, copied into the manifest (launch_flags) for the planner
// Copied into the manifest (launch_facts) for the planner: heads per workgroup of the narrow
// kernels (one matrix tile of A rows) and of the wide ones on wave64 / wave32 archs, KV rows per
// tile, splits per (token, head group) at most, output lanes.
enum Facts : int { kHeads = 16, kWideHeadsWave64 = 64, kWideHeadsWave32 = 32, kRows = 32, kMaxSplits = 16, kDv = 512 };
constexpr int kAccs = sk::kAccs;
constexpr float kLog2e = 1.4426950408889634f;

// A kernel's shape: kHeadTiles tiles of 16 heads share each gathered row, kThreads threads. The
// narrow kernels (1 tile, 256 threads) gather a row once per 16 heads; the wide ones once per
// 64 heads on gfx9 (4 tiles, 512 threads: two waves per SIMD at <= 256 VGPRs, LDS within 64 KB)
// and 32 on gfx11/gfx12 (2 tiles, 256 threads; 4 tiles would need 33 KB of QK partials next to
// the 37 KB tile, past 64 KB of LDS).
template <int kHeadTiles_, int kThreads_> struct Shape {
  static constexpr int kHeadTiles = kHeadTiles_;
  static constexpr int kThreads = kThreads_;
  static constexpr int kHeads = 16 * kHeadTiles;
  static constexpr int kWaves = kThreads / hs::kWave;
  static constexpr int kSlices = kWaves / kHeadTiles;      // QK: wave w takes head tile w / kSlices, steps
                                                           // w % kSlices, + kSlices, ..
  static constexpr int kDvPerWave = kDv / kWaves;          // PV output lanes per wave (all heads)
  static constexpr int kVTiles = kDvPerWave / 16;          // PV 16-lane column tiles per wave
  static constexpr int kHeadThreads = kThreads / kHeads;   // softmax threads per head
  static constexpr int kSlotFloats = kHeads * kDv + 2 * kHeads;   // acc, then m[kHeads], l[kHeads]
  // q passes through the LDS tile (kRows rows) when it fits, else it loads straight into the
  // matrix fragments (each piece still read once per workgroup)
  static constexpr bool kQThroughLds = kHeads <= kRows;
  // the merge keeps this split's acc in registers (the wide kernels have no room for the copy:
  // their own slot is read back like the others')
  static constexpr bool kKeepOwn = kHeadTiles == 1;
  static_assert(kWaves % kHeadTiles == 0 && kDvPerWave % 16 == 0 && kRows % kHeadThreads == 0, "shape");
  static_assert(kHeadThreads <= hs::kWave && (kHeadThreads & (kHeadThreads - 1)) == 0, "a head's softmax in one wave");
};
using Narrow = Shape<1, 256>;
using Wide = Shape<HS_GFX9 ? 4 : 2, HS_GFX9 ? 512 : 256>;
static_assert(Narrow::kHeads == kHeads && Wide::kHeads == (HS_GFX9 ? kWideHeadsWave64 : kWideHeadsWave32), "facts");
constexpr int kPvSteps = kRows / sk::kStep;       // PV matrix steps per tile (k = rows)

template <bool V32> struct Layout {
  static constexpr int kQk = V32 ? 576 : 512;     // QK lanes
  static constexpr int kNope = V32 ? 512 : 448;   // FP8 lanes
  static constexpr int kToken = V32 ? 656 : 576;  // bytes per token in the data region
  static constexpr int kRopeAt = V32 ? 528 : 448; // byte offset of the bf16 rope lanes
  static constexpr int kParts = kQk / 64;         // 64-lane gather items per row
  static constexpr int kStride = kQk + 8;         // LDS row stride (elements): 16 bytes of pad
  static constexpr int kQkSteps = kQk / sk::kStep;            // QK matrix steps
  static_assert(kQk % sk::kStep == 0, "QK lanes are whole matrix steps");
};

struct List {
  const uint8_t* cache;
  int64_t bstride;
  int bs, rows;
  const int32_t* idx;
  bool fnuz;
};

// 2^(e - 127) exactly for a UE8M0 exponent byte (e = 0: 2^-127, a denormal; e = 255: NaN).
__device__ inline float ue8m0(uint32_t e) {
  return __builtin_bit_cast(float, e == 0 ? 0x00400000u : e == 255 ? 0x7fc00000u : e << 23);
}

// 4 FP8 bytes times the scale, as 2 dwords of bf16 pairs (exact; NaN encodings give NaN): the
// hardware converter when the row's flavour is the one it decodes, else the integer widening.
__device__ inline void dequant4(uint32_t w, bool fnuz, float scale, uint32_t& lo, uint32_t& hi) {
  float f[4];
#if HS_FP8_CVT
  if (fnuz == hs::kCvtFnuz) {
    hs::cvt4(w, f);
  } else
#endif
  {
    uint32_t a, b;
    hs::widen_word(w, fnuz, a, b);   // fp16 of value * 2^-8 (OCP) or 2^-7 (FNUZ)
    const float back = fnuz ? 128.0f : 256.0f;
    f[0] = (float)__builtin_bit_cast(_Float16, (uint16_t)a) * back;
    f[1] = (float)__builtin_bit_cast(_Float16, (uint16_t)(a >> 16)) * back;
    f[2] = (float)__builtin_bit_cast(_Float16, (uint16_t)b) * back;
    f[3] = (float)__builtin_bit_cast(_Float16, (uint16_t)(b >> 16)) * back;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] *= scale;   // exact (a power of two)
  lo = __builtin_amdgcn_perm(__builtin_bit_cast(uint32_t, f[1]), __builtin_bit_cast(uint32_t, f[0]), 0x07060302u);
  hi = __builtin_amdgcn_perm(__builtin_bit_cast(uint32_t, f[3]), __builtin_bit_cast(uint32_t, f[2]), 0x07060302u);
}

// A tile row: `ref` = 2 x the token's byte offset from the lower of the two cache pointers +
// its list's FNUZ flag, -1 for an invalid row (an offset from a kernel argument, not an address:
// the loads stay global loads, where a pointer rebuilt from an integer would be a flat one); and
// its scales' address.
struct RowRef {
  int64_t ref;
  const uint8_t* scales;
};

// The row of position pos whose index entry is `slot` (-1 past the chunk); the list's fields are
// selected one by one (a reference to either List would put them in scratch). d0, d1: the lists'
// cache pointers minus the base.
template <bool V32>
__device__ inline RowRef row_ref(const List& l0, const List& l1, int64_t d0, int64_t d1, int len0, int pos, int slot) {
  const bool first = pos < len0;
  const int rows = first ? l0.rows : l1.rows, bs = first ? l0.bs : l1.bs;
  if ((uint32_t)slot >= (uint32_t)rows) return RowRef{-1, nullptr};
  const int blk = slot / bs, off = slot - blk * bs;
  const int64_t block = blk * (first ? l0.bstride : l1.bstride), tok = block + (int64_t)off * Layout<V32>::kToken;
  const uint8_t* cache = first ? l0.cache : l1.cache;
  return RowRef{2 * ((first ? d0 : d1) + tok) + (first ? l0.fnuz : l1.fnuz),
                cache + (V32 ? tok + 512 : block + (int64_t)bs * Layout<V32>::kToken + off * 8)};
}

// The row's scale words (v4: 8 UE8M0 bytes, v32: 4 fp32), zeros for an invalid row.
template <bool V32>
__device__ inline hs::u32x4 load_scales(const RowRef& r) {
  if (r.ref < 0) return hs::u32x4{0u, 0u, 0u, 0u};
  if (V32) return hs::load16(r.scales);
  typedef uint32_t u32x2 __attribute__((ext_vector_type(2)));
  const u32x2 w = *reinterpret_cast<const u32x2*>(r.scales);
  return hs::u32x4{w.x, w.y, 0u, 0u};
}

// The scale words as fp32 scales: v4 one per 64 lanes (7), v32 one per 128 lanes (4).
template <bool V32>
__device__ inline void store_scales(float* dst, hs::u32x4 w, bool valid) {
  if (V32) {
    *reinterpret_cast<hs::u32x4*>(dst) = w;
    return;
  }
#pragma unroll
  for (int c = 0; c < 7; ++c) dst[c] = valid ? ue8m0((w[c >> 2] >> (8 * (c & 3))) & 0xffu) : 0.0f;
}

// The gather moves a tile as 16-byte chunks: FP8 lanes 16c .. 16c + 15 (c < kNope) or rope
// lanes 8c .. 8c + 7 (c < 8). The first kNope * kGroups threads take the FP8 chunks, the next
// 8 * kGroups the rope: a thread's chunk c is fixed, and it takes rows g + kGroups * j, so the
// tile loop keeps one offset per thread, a wave (but the one at the boundary) runs one kind of
// chunk, and neighbouring threads read neighbouring 16 bytes of a row.
template <bool V32, int kThreads> struct Chunks {
  static constexpr int kNope = Layout<V32>::kNope / 16;         // FP8 chunks per row (28 / 32)
  static constexpr int kGroups = kThreads / (kNope + 8);        // rows per round (256 threads: 7 / 6)
  static constexpr int kNopeThreads = kNope * kGroups;          // 256 threads: 196 / 192
  static constexpr int kRounds = (kRows + kGroups - 1) / kGroups;
};

// This thread's chunk: rope or FP8, its column c, its first row g (g >= kGroups: none).
template <bool V32, int kThreads> struct Chunk {
  bool rope;
  int c, g;
  __device__ Chunk() {
    using C = Chunks<V32, kThreads>;
    rope = threadIdx.x >= C::kNopeThreads;
    const int u = rope ? threadIdx.x - C::kNopeThreads : threadIdx.x, width = rope ? 8 : C::kNope;
    g = u / width;
    c = u - g * width;
  }
};

// A thread's staged chunks of one tile, in registers.
template <bool V32, int kThreads> using Staged = hs::u32x4[Chunks<V32, kThreads>::kRounds];

// Issue the loads of a tile's chunks (rows from ref_s, addressed from base) into registers;
// invalid rows are zeros.
template <bool V32, int kThreads>
__device__ inline void stage_tile(Staged<V32, kThreads>& w, const int64_t* ref_s, const uint8_t* base) {
  using C = Chunks<V32, kThreads>;
  const Chunk<V32, kThreads> k;
  const int src = k.rope ? Layout<V32>::kRopeAt + 16 * k.c : 16 * k.c;
#pragma unroll
  for (int j = 0; j < C::kRounds; ++j) {
    const int row = k.g + C::kGroups * j;
    w[j] = hs::u32x4{0u, 0u, 0u, 0u};
    if (k.g < C::kGroups && row < kRows) {
      const int64_t ref = ref_s[row];
      if (ref >= 0) w[j] = hs::load16(base + (ref >> 1) + src);
    }
  }
}

// The staged chunks into the LDS tile as bf16: FP8 widened exactly times the row's scale.
template <bool V32, int kThreads>
__device__ inline void unpack_tile(uint16_t* ks, const Staged<V32, kThreads>& w, const int64_t* ref_s,
                                   const float (*scale_s)[8]) {
  using C = Chunks<V32, kThreads>;
  using L = Layout<V32>;
  // Every staged register is used here on every path: the compiler's wait tracking otherwise
  // keeps them "maybe in flight" past the divergent branches below, and the next tile's loads
  // into them would first wait for every load (the scale and index prefetches included).
#pragma unroll
  for (int j = 0; j < C::kRounds; ++j) asm volatile("" ::"v"(w[j]));
  const Chunk<V32, kThreads> k;
  if (k.g >= C::kGroups) return;
  if (k.rope) {
#pragma unroll
    for (int j = 0; j < C::kRounds; ++j) {
      const int row = k.g + C::kGroups * j;
      if (row < kRows) *reinterpret_cast<hs::u32x4*>(ks + row * L::kStride + L::kNope + 8 * k.c) = w[j];
    }
    return;
  }
  const int group = V32 ? k.c >> 3 : k.c >> 2;   // the chunk's scale: per 128 (v32) / 64 (v4) lanes
#pragma unroll
  for (int j = 0; j < C::kRounds; ++j) {
    const int row = k.g + C::kGroups * j;
    if (row < kRows) {
      const bool fnuz = (ref_s[row] & 1) != 0;
      const float scale = scale_s[row][group];
      uint32_t o[8];
#pragma unroll
      for (int e = 0; e < 4; ++e) dequant4(w[j][e], fnuz, scale, o[2 * e], o[2 * e + 1]);
      hs::u32x4* dst = reinterpret_cast<hs::u32x4*>(ks + row * L::kStride + 16 * k.c);
      dst[0] = hs::u32x4{o[0], o[1], o[2], o[3]};
      dst[1] = hs::u32x4{o[4], o[5], o[6], o[7]};
    }
  }
}

// The B fragment of LDS tile row `row` (a K row, or a q row) for matrix step columns from d.
template <int kStride>
__device__ inline sk::frag k_piece(const uint16_t* ks, int row, int d, int lane) {
  const uint16_t* p = ks + row * kStride + d;
#if HS_WMMA11
  const hs::u32x4 lo = *reinterpret_cast<const hs::u32x4*>(p), hi = *reinterpret_cast<const hs::u32x4*>(p + 8);
  return sk::frag{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#else
  return *reinterpret_cast<const hs::u32x4*>(p + 8 * (lane >> 4));
#endif
}

// The B fragment of V for output lane column c, k = tile rows r0 + (8 * (lane / 16) | 0) + e.
template <int kStride>
__device__ inline sk::frag v_piece(const uint16_t* ks, int r0, int c, int lane) {
#if HS_WMMA11
  constexpr int kE = 16;
  const uint16_t* p = ks + r0 * kStride + c;
#else
  constexpr int kE = 8;
  const uint16_t* p = ks + (r0 + 8 * (lane >> 4)) * kStride + c;
#endif
  // pairs built as 2 x u16 vectors: the high half loads straight into its register (d16_hi)
  typedef uint16_t u16x2 __attribute__((ext_vector_type(2)));
  uint32_t v[kE / 2];
#pragma unroll
  for (int e = 0; e < kE / 2; ++e) v[e] = __builtin_bit_cast(uint32_t, u16x2{p[(2 * e) * kStride], p[(2 * e + 1) * kStride]});
#if HS_WMMA11
  return sk::frag{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
#else
  return sk::frag{v[0], v[1], v[2], v[3]};
#endif
}

// The A fragment of P (bf16 [heads][kRows], row stride kPStride) of the 16 heads from ps for k = rows r0 + ...
constexpr int kPStride = kRows + 8;
__device__ inline sk::frag p_piece(const uint16_t* ps, int r0, int lane) {
  const uint16_t* p = ps + (lane & 15) * kPStride + r0;
#if HS_WMMA11
  const hs::u32x4 lo = *reinterpret_cast<const hs::u32x4*>(p), hi = *reinterpret_cast<const hs::u32x4*>(p + 8);
  return sk::frag{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#else
  return *reinterpret_cast<const hs::u32x4*>(p + 8 * (lane >> 4));
#endif
}

// an indptr entry clipped to [0, n]
__device__ inline int clip(int p, int n) { return min(max(p, 0), n); }

// op over the kHT neighbouring lanes that hold one head's softmax (a fixed xor butterfly: every
// lane gets the same tree)
template <int kHT, typename Op>
__device__ inline float head_reduce(float v, Op op) {
  if constexpr (kHT > 1) {
    v = head_reduce<kHT / 2>(v, op);
    v = op(v, hs::xor_lane<kHT / 2>(v));
  }
  return v;
}

template <bool V32, typename Sh>
__device__ void sparse_mla(const uint16_t* __restrict__ q, int64_t q_st, int64_t q_sh, List l0, const int32_t* ptr0,
                           int n0, List l1, const int32_t* ptr1, int n1, const float* __restrict__ sink, float scale,
                           uint16_t* __restrict__ out, int64_t o_st, int64_t o_sh, float* __restrict__ lse, int T,
                           int H, int S, float* __restrict__ part, uint32_t* __restrict__ counters) {
  using L = Layout<V32>;
  constexpr int kThreads = Sh::kThreads, kHeadTiles = Sh::kHeadTiles, kHeads = Sh::kHeads, kSlices = Sh::kSlices;
  constexpr int kVTiles = Sh::kVTiles, kHT = Sh::kHeadThreads;
  constexpr int kSteps = (L::kQkSteps + kSlices - 1) / kSlices;   // a wave's QK steps, at most
  __shared__ uint16_t ks[kRows * L::kStride];                   // the tile's K rows, bf16 (first: q, narrow)
  __shared__ float sp[kSlices][kHeads][kRows + 1];              // QK partial sums per slice
  __shared__ uint16_t ps[kHeads * kPStride];                    // P, bf16
  __shared__ float alpha_s[kHeads], m_s[kHeads], l_s[kHeads];
  __shared__ int64_t ref_s[2][kRows];                           // RowRef::ref of this tile / the next
  __shared__ float scale_s[2][kRows][8];                        // and their scales
  __shared__ float sink_s[kHeads];                              // the sink of each head (0: none)
  __shared__ uint32_t ticket;

  const int HB = (H + kHeads - 1) / kHeads;
  const int s = blockIdx.x % S, th = blockIdx.x / S, hb = th % HB, t = th / HB;
  const int lane = threadIdx.x % hs::kWave, wave = threadIdx.x / hs::kWave;
  const int h0 = hb * kHeads;
  // QK: this wave's head tile and step slice; head tiles wholly past H are skipped (wave-uniform)
  const int qt = kHeadTiles == 1 ? 0 : wave / kSlices, slice = kHeadTiles == 1 ? wave : wave % kSlices;
  const int live_tiles = min(kHeadTiles, (H - h0 + 15) / 16);

  // Token t's positions: list 0 then list 1; this split's chunk of whole tiles.
  // each range clipped to its index array (a decreasing indptr, or one clipped to nothing: empty)
  const int b0 = clip(ptr0[t], n0), len0 = max(clip(ptr0[t + 1], n0) - b0, 0);
  const int b1 = ptr1 != nullptr ? clip(ptr1[t], n1) : 0;
  const int len1 = ptr1 != nullptr ? max(clip(ptr1[t + 1], n1) - b1, 0) : 0;
  const int total = len0 + len1;
  const int tiles = (total + kRows - 1) / kRows, per = (tiles + S - 1) / S;
  const int p_begin = s * per * kRows, p_end = min(total, (s + 1) * per * kRows);
  // rows of both lists are addressed from the lower cache pointer (RowRef)
  const uint8_t* base = l1.cache != nullptr && l1.cache < l0.cache ? l1.cache : l0.cache;
  const int64_t d0 = l0.cache - base, d1 = l1.cache != nullptr ? l1.cache - base : 0;
  // the index entry at position pos (threads < kRows, one row each), -1 past the chunk
  auto index_at = [=](int pos) -> int {
    if (pos >= p_end) return -1;
    return pos < len0 ? l0.idx[b0 + pos] : l1.idx[b1 + (pos - len0)];
  };

  // Prologue: q rows h0 .. h0 + kHeads - 1 (zeros for heads >= H), tile 0's rows and scales.
  // (all of a thread's q pieces and both index entries issued before any wait: one round trip)
  // q fragments of this wave's QK steps stay in registers for the whole chunk.
  sk::frag qf[kSteps];
  constexpr int kQPieces = kHeads * (L::kQk / 8), kQPer = (kQPieces + kThreads - 1) / kThreads;
  hs::u32x4 qv[Sh::kQThroughLds ? kQPer : 1];
  if constexpr (Sh::kQThroughLds) {
#pragma unroll
    for (int j = 0; j < kQPer; ++j) {
      const int i = threadIdx.x + j * kThreads, r = i / (L::kQk / 8), c = i - r * (L::kQk / 8);
      qv[j] = i < kQPieces && h0 + r < H ? hs::load16(q + t * q_st + (int64_t)(h0 + r) * q_sh + 8 * c)
                                         : hs::u32x4{0u, 0u, 0u, 0u};
    }
  } else {
    // the fragment k_piece would read from a q row in LDS, read from the row in memory
    const int h = h0 + 16 * qt + (lane & 15);
    const uint16_t* row = q + t * q_st + (int64_t)min(h, H - 1) * q_sh;
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      const int d = (slice + kSlices * i) * sk::kStep;
      if (slice + kSlices * i < L::kQkSteps) {
#if HS_WMMA11
        const hs::u32x4 lo = h < H ? hs::load16(row + d) : hs::u32x4{0u, 0u, 0u, 0u};
        const hs::u32x4 hi = h < H ? hs::load16(row + d + 8) : hs::u32x4{0u, 0u, 0u, 0u};
        qf[i] = sk::frag{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#else
        qf[i] = h < H ? hs::load16(row + d + 8 * (lane >> 4)) : sk::frag{0u, 0u, 0u, 0u};
#endif
      }
    }
  }
  int next_idx = -1;   // threads < kRows: their row's index entry in the next tile not yet resolved
  const bool first_tile = threadIdx.x < kRows && p_begin < p_end;
  const int first_idx = first_tile ? index_at(p_begin + threadIdx.x) : -1;
  if (first_tile) next_idx = index_at(p_begin + threadIdx.x + kRows);
  const float sg = threadIdx.x < kHeads && sink != nullptr && h0 + (int)threadIdx.x < H ? sink[h0 + threadIdx.x] : 0.0f;
  if (threadIdx.x < kHeads) sink_s[threadIdx.x] = sg;
  if constexpr (Sh::kQThroughLds) {
#pragma unroll
    for (int j = 0; j < kQPer; ++j) {
      const int i = threadIdx.x + j * kThreads, r = i / (L::kQk / 8), c = i - r * (L::kQk / 8);
      if (i < kQPieces) *reinterpret_cast<hs::u32x4*>(ks + r * L::kStride + 8 * c) = qv[j];
    }
  }
  // tile 0's scales stay in flight with its rows' loads: stored after those are issued
  hs::u32x4 scales0{0u, 0u, 0u, 0u};
  if (first_tile) {
    const int pos = p_begin + threadIdx.x;
    const RowRef r = row_ref<V32>(l0, l1, d0, d1, len0, pos, first_idx);
    ref_s[0][threadIdx.x] = r.ref;
    scales0 = load_scales<V32>(r);
  }
  hs::lds_barrier();   // LDS only: the scale loads stay in flight on gfx11/gfx12 too

  if constexpr (Sh::kQThroughLds) {
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
      if (slice + kSlices * i < L::kQkSteps)
        qf[i] = k_piece<L::kStride>(ks, 16 * qt + (lane & 15), (slice + kSlices * i) * sk::kStep, lane);
  }
  Staged<V32, kThreads> staged;   // the next tile's chunks, loading while this one is computed
  if (p_begin < p_end) stage_tile<V32, kThreads>(staged, ref_s[0], base);
  if (first_tile) store_scales<V32>(scale_s[0][threadIdx.x], scales0, ref_s[0][threadIdx.x] >= 0);
  hs::lds_barrier();   // q is out of ks (tile 0's loads stay in flight)

  sk::accv acc[kHeadTiles][kVTiles];
#pragma unroll
  for (int ht = 0; ht < kHeadTiles; ++ht)
#pragma unroll
    for (int i = 0; i < kVTiles; ++i) acc[ht][i] = sk::accv{};
  // softmax state of head h0 + threadIdx.x / kHT (replicated over its kHT threads)
  float m = -__builtin_inff(), l = 0.0f;
  const int sh = threadIdx.x / kHT, sj = threadIdx.x % kHT;

  // Per tile (buffer b of ref_s / scale_s): unpack the staged chunks into ks; the next tile's
  // rows are resolved and their chunks' loads issued before this tile's QK, softmax and PV, so
  // the gather's memory latency overlaps the matrix work (registers + LDS: double-buffered).
  int b = 0;
  for (int p0 = p_begin; p0 < p_end; p0 += kRows, b ^= 1) {
    const bool more = p0 + kRows < p_end;
    unpack_tile<V32, kThreads>(ks, staged, ref_s[b], scale_s[b]);
    hs::u32x4 next_scales = hs::u32x4{0u, 0u, 0u, 0u};
    bool next_valid = false;
    if (threadIdx.x < kRows && more) {
      const int pos = p0 + kRows + threadIdx.x;
      const RowRef r = row_ref<V32>(l0, l1, d0, d1, len0, pos, next_idx);
      ref_s[b ^ 1][threadIdx.x] = r.ref;
      next_scales = load_scales<V32>(r);
      next_valid = r.ref >= 0;
      next_idx = index_at(pos + kRows);
    }
    hs::lds_barrier();   // ks holds this tile; the next tile's rows are known
    if (more) stage_tile<V32, kThreads>(staged, ref_s[b ^ 1], base);

    // QK partial sums over this wave's steps of its head tile, both row tiles
    {
      sk::accv c0 = sk::accv{}, c1 = sk::accv{};
      if (kHeadTiles == 1 || qt < live_tiles) {   // wave-uniform
#pragma unroll
        for (int i = 0; i < kSteps; ++i) {
          const int d = (slice + kSlices * i) * sk::kStep;
          if (slice + kSlices * i < L::kQkSteps) {   // wave-uniform
            c0 = sk::mma<hs::bf16>(qf[i], k_piece<L::kStride>(ks, lane & 15, d, lane), c0);
            c1 = sk::mma<hs::bf16>(qf[i], k_piece<L::kStride>(ks, 16 + (lane & 15), d, lane), c1);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kAccs; ++r) {
        sp[slice][16 * qt + sk::result_row(lane, r)][lane & 15] = c0[r];
        sp[slice][16 * qt + sk::result_row(lane, r)][16 + (lane & 15)] = c1[r];
      }
    }
    hs::lds_barrier();

    // online softmax: head sh, rows sj, sj + kHT, ..
    {
      constexpr int kMine = kRows / kHT;
      float raw[kMine], sc[kMine], pv[kMine];
#pragma unroll
      for (int i = 0; i < kMine; ++i) {
        const int row = sj + kHT * i;
        raw[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < kSlices; ++k) raw[i] += sp[k][sh][row];
        sc[i] = ref_s[b][row] >= 0 ? raw[i] * scale : -__builtin_inff();
      }
      float mx = sc[0];
#pragma unroll
      for (int i = 1; i < kMine; ++i) mx = fmaxf(mx, sc[i]);
      mx = head_reduce<kHT>(mx, [](float x, float y) { return fmaxf(x, y); });
      const float mn = fmaxf(m, mx);
      const bool any = mn != -__builtin_inff();
      const float a = any ? exp2f((m - mn) * kLog2e) : 1.0f;
#pragma unroll
      // raw * scale - mn as one fma, spelled out: left to contraction, unrelated edits flipped it
      for (int i = 0; i < kMine; ++i)
        pv[i] = ref_s[b][sj + kHT * i] >= 0 ? exp2f(__builtin_fmaf(raw[i], scale, -mn) * kLog2e) : 0.0f;
      float sum = pv[0];
#pragma unroll
      for (int i = 1; i < kMine; ++i) sum += pv[i];
      sum = head_reduce<kHT>(sum, [](float x, float y) { return x + y; });
      l = l * a + sum;
      m = mn;
#pragma unroll
      for (int i = 0; i < kMine; ++i) ps[sh * kPStride + sj + kHT * i] = hs::from_float<hs::bf16>(pv[i]);
      if (sj == 0) alpha_s[sh] = a;
    }
    hs::lds_barrier();

    // PV: this wave's output lanes, every live head tile (one V piece serves them all)
    {
#pragma unroll
      for (int ht = 0; ht < kHeadTiles; ++ht) {
        float a[kAccs];
#pragma unroll
        for (int r = 0; r < kAccs; ++r) a[r] = alpha_s[16 * ht + sk::result_row(lane, r)];
#pragma unroll
        for (int vt = 0; vt < kVTiles; ++vt)
#pragma unroll
          for (int r = 0; r < kAccs; ++r) acc[ht][vt][r] *= a[r];
      }
#pragma unroll
      for (int st = 0; st < kPvSteps; ++st) {
        sk::frag pf[kHeadTiles];
#pragma unroll
        for (int ht = 0; ht < kHeadTiles; ++ht)
          if (kHeadTiles == 1 || ht < live_tiles) pf[ht] = p_piece(ps + 16 * ht * kPStride, st * sk::kStep, lane);
#pragma unroll
        for (int vt = 0; vt < kVTiles; ++vt) {
          const sk::frag vp = v_piece<L::kStride>(ks, st * sk::kStep, wave * Sh::kDvPerWave + 16 * vt + (lane & 15), lane);
#pragma unroll
          for (int ht = 0; ht < kHeadTiles; ++ht)
            if (kHeadTiles == 1 || ht < live_tiles) acc[ht][vt] = sk::mma<hs::bf16>(pf[ht], vp, acc[ht][vt]);
        }
      }
    }
    if (threadIdx.x < kRows && more) store_scales<V32>(scale_s[b ^ 1][threadIdx.x], next_scales, next_valid);
    hs::lds_barrier();   // the next unpack overwrites ks and ps; its scales are in
  }

  if (sj == 0) {
    m_s[sh] = m;
    l_s[sh] = l;
  }
  __syncthreads();

  if (S > 1) {
    // publish this split, count it; the last split of (t, hb) merges all of them in split order
    float* mine = part + (int64_t)blockIdx.x * Sh::kSlotFloats;
#pragma unroll
    for (int ht = 0; ht < kHeadTiles; ++ht)
#pragma unroll
      for (int vt = 0; vt < kVTiles; ++vt)
        reinterpret_cast<sk::accv*>(mine)[(ht * kVTiles + vt) * kThreads + threadIdx.x] = acc[ht][vt];
    constexpr int kAccFloats = kHeads * kDv;
    if (threadIdx.x < kHeads) {
      mine[kAccFloats + threadIdx.x] = m_s[threadIdx.x];
      mine[kAccFloats + kHeads + threadIdx.x] = l_s[threadIdx.x];
    }
    __threadfence();   // release: the slot is visible device-wide before the count
    __syncthreads();
    if (threadIdx.x == 0) ticket = atomicAdd(&counters[th], 1u);
    __syncthreads();
    if (ticket != (uint32_t)(S - 1)) return;   // workgroup-uniform
    __threadfence();   // acquire: every split's slot
    if (threadIdx.x == 0) counters[th] = 0u;   // ready for the next call
    const float* first = part + (int64_t)th * S * Sh::kSlotFloats;
    // every split's m and l into LDS in one round trip (sp is free after the chunk; S <= kMaxSplits,
    // the host's limit), then w_k = exp(m_k - M) in place of m_k
    float* ml = &sp[0][0][0];   // [split][m, l][head]
    constexpr int kMl = 2 * kHeads, kMlLoads = (kMaxSplits * kMl + kThreads - 1) / kThreads;
    static_assert(kMaxSplits * kMl <= (int)(sizeof(sp) / sizeof(float)), "m, l slots");
    {
      const int n = S * kMl;
      const float* base = first + kAccFloats;
      float v[kMlLoads];
#pragma unroll
      for (int j = 0; j < kMlLoads; ++j) {
        const int i = threadIdx.x + j * kThreads;
        v[j] = i < n ? base[(int64_t)(i / kMl) * Sh::kSlotFloats + i % kMl] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kMlLoads; ++j)
        if (threadIdx.x + j * kThreads < n) ml[threadIdx.x + j * kThreads] = v[j];
    }
    __syncthreads();
    if (threadIdx.x < kHeads) {
      float mm = -__builtin_inff();
      for (int k = 0; k < S; ++k) mm = fmaxf(mm, ml[k * kMl + threadIdx.x]);
      float ll = 0.0f;
      for (int k = 0; k < S; ++k) {
        const float mk = ml[k * kMl + threadIdx.x];
        const float w = mk == -__builtin_inff() ? 0.0f : exp2f((mk - mm) * kLog2e);
        ll += w * ml[k * kMl + kHeads + threadIdx.x];
        ml[k * kMl + threadIdx.x] = w;
      }
      m_s[threadIdx.x] = mm;
      l_s[threadIdx.x] = ll;
    }
    __syncthreads();
    sk::accv own[Sh::kKeepOwn ? kHeadTiles : 1][kVTiles];   // this split's acc: its slot is not read back
#pragma unroll
    for (int ht = 0; ht < kHeadTiles; ++ht)
#pragma unroll
      for (int vt = 0; vt < kVTiles; ++vt) {
        if constexpr (Sh::kKeepOwn) own[ht][vt] = acc[ht][vt];
        acc[ht][vt] = sk::accv{};
      }
    // two splits' acc loads in flight, summed in split order
    for (int k = 0; k < S; k += 2) {
      sk::accv v[2][kHeadTiles][kVTiles];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const sk::accv* sl = reinterpret_cast<const sk::accv*>(first + (int64_t)(k + u) * Sh::kSlotFloats);
#pragma unroll
        for (int ht = 0; ht < kHeadTiles; ++ht)
#pragma unroll
          for (int vt = 0; vt < kVTiles; ++vt) {
            const int i = (ht * kVTiles + vt) * kThreads + threadIdx.x;
            if constexpr (Sh::kKeepOwn)
              v[u][ht][vt] = k + u == s ? own[ht][vt] : k + u < S ? sl[i] : sk::accv{};
            else
              v[u][ht][vt] = k + u < S ? sl[i] : sk::accv{};
          }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (k + u == S) break;
#pragma unroll
        for (int ht = 0; ht < kHeadTiles; ++ht) {
          float w[kAccs];
#pragma unroll
          for (int r = 0; r < kAccs; ++r) w[r] = ml[(k + u) * kMl + 16 * ht + sk::result_row(lane, r)];
#pragma unroll
          for (int vt = 0; vt < kVTiles; ++vt)
#pragma unroll
            for (int r = 0; r < kAccs; ++r) acc[ht][vt][r] += w[r] * v[u][ht][vt][r];
        }
      }
    }
  }

  // finish: sink, normalisation, outputs of heads < H
#pragma unroll
  for (int ht = 0; ht < kHeadTiles; ++ht) {
    float f[kAccs];
#pragma unroll
    for (int r = 0; r < kAccs; ++r) {
      const int row = 16 * ht + sk::result_row(lane, r), h = h0 + row;
      const float mm = m_s[row], ll = l_s[row];
      float z = ll, keep = 1.0f;
      if (sink != nullptr && h < H) {
        const float sg = sink_s[row];
        if (sg == __builtin_inff()) {
          keep = 0.0f;
        } else if (mm == -__builtin_inff() || sg > mm) {   // the sink sets the max
          const float e = mm == -__builtin_inff() ? 0.0f : exp2f((mm - sg) * kLog2e);
          keep = e;
          z = ll * e + 1.0f;
        } else {
          z = ll + exp2f((sg - mm) * kLog2e);
        }
      }
      // nothing valid (l = 0) or sigma = +inf: exactly 0; a NaN l (NaN in a row) passes through
      f[r] = (ll == 0.0f || keep == 0.0f) ? 0.0f : keep / z;
    }
#pragma unroll
    for (int vt = 0; vt < kVTiles; ++vt)
#pragma unroll
      for (int r = 0; r < kAccs; ++r) {
        const int h = h0 + 16 * ht + sk::result_row(lane, r);
        if (h < H) {
          const float v = f[r] == 0.0f ? 0.0f : acc[ht][vt][r] * f[r];
          out[t * o_st + (int64_t)h * o_sh + wave * Sh::kDvPerWave + 16 * vt + (lane & 15)] = hs::from_float<hs::bf16>(v);
        }
      }
  }
  if (lse != nullptr && threadIdx.x < kHeads && h0 + (int)threadIdx.x < H) {
    const float ll = l_s[threadIdx.x];
    lse[(int64_t)t * H + h0 + threadIdx.x] = ll == 0.0f ? __builtin_inff() : m_s[threadIdx.x] + logf(ll);
  }
}

}  // namespace

#define HS_SPARSE_MLA(TAG, V32, SHAPE)                                                                        \
  extern "C" __global__ void __launch_bounds__(SHAPE::kThreads) sparse_mla_##TAG(                             \
      const uint16_t* __restrict__ q, const uint8_t* c0, const int32_t* idx0, const int32_t* ptr0,             \
      const uint8_t* c1, const int32_t* idx1, const int32_t* ptr1, const float* __restrict__ sink,             \
      uint16_t* __restrict__ out, float* __restrict__ lse, float* __restrict__ part,                          \
      uint32_t* __restrict__ counters, int64_t q_st, int64_t q_sh, int64_t bstride0, int bs0, int rows0,        \
      int n0, int64_t bstride1, int bs1, int rows1, int n1, float scale, int64_t o_st, int64_t o_sh, int T,      \
      int H, int S, int flags) {                                                                              \
    sparse_mla<V32, SHAPE>(q, q_st, q_sh, List{c0, bstride0, bs0, rows0, idx0, (flags & kFnuz0) != 0}, ptr0, n0,   \
                           List{c1, bstride1, bs1, rows1, idx1, (flags & kFnuz1) != 0}, ptr1, n1,                  \
                           (flags & kSink) ? sink : nullptr,                                                      \
                           scale, out, o_st, o_sh, (flags & kLse) ? lse : nullptr, T, H, S, part, counters);      \
  }
HS_SPARSE_MLA(v4, false, Narrow)
HS_SPARSE_MLA(v32, true, Narrow)
HS_SPARSE_MLA(v4_wide, false, Wide)
HS_SPARSE_MLA(v32_wide, true, Wide)
