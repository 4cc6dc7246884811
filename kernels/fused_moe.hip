// Fused mixture-of-experts decode (SwiGLU experts) in three launches, deterministic:
//   fused_moe_route   topk_ids -> per-expert slot lists and work units (one workgroup)
//   fused_moe_gemm1   act[p, i] = T(T(silu(T(gate))) * T(up)), gate = w13[e][i] . x[t], up = w13[e][I + i] . x[t]
//   fused_moe_gemm2   part[p, h] = topk_weights[p] * (w2[e][h] . act[p]) (fp32), and the last workgroup
//               of a row block writes out[t, h] = T(sum_j part[t * topk + j, h]) in j order
// for the slots p = t * topk + j (token t, its j-th choice e = topk_ids[t, j]). The silu order is
// vLLM's (quant_specs.md 3.3): gate and up rounded to T, silu in fp32 rounded to T, the product
// of two T values rounded once. Everything else is fp32 until out's one rounding.
//
// Weights: int4 prepared (frontend/w4a16.py: qweight uint32 [E, rows, K/8] ExLlama-shuffled,
// scales T [E, rows, K/G], zeros uint8 [E, rows, K/G] or null = symmetric, perm int32 [E, K] or
// null (never checked on the GPU: an entry outside [0, K) reads column K - 1 of x / act); the int4
// pieces are hipskinny/int4.h, the exactness notes kernels/w4a16_linear.hip) or plain T [E, rows, K].
// w13 has rows 2I (gate rows 0..I-1, up rows I..2I-1) over K = H; w2 has rows H over K = I.
// Experts no slot routes to are never read; ids outside [0, E) are skipped by the route.
//
// Scratch `meta`, one buffer (one pointer: the kernels are short of scalar registers): GEMM2's
// row-block counters (kCounters words: always at the start, so a call of another shape never finds
// route data there), the route, act (T [P, I], 16-byte aligned) and part (fp32 [P, H], 16-byte
// aligned) at offsets from P and I (scratch_of). The route (int32): [0] work units U, [1]
// slots whose id is outside [0, E) (skipped: they contribute nothing), [2] valid slots, [3] 0;
// order[P] at 4: the valid slots sorted by (expert, slot); units[2P] at 4 + P: unit u = (expert,
// start | count << 16), the expert's slots order[start .. start + count), count <= group (NP, the
// kernels' token group), units in expert order; valid[P] at 4 + 3P: 1 where slot p's id is in
// [0, E). Counting sort with ranks by comparison: the same lists for any schedule.
//
// GEMM work split: item = (unit, row block), items = U * blocks, persistent grid; a workgroup
// stages its unit's rows of x (or act) in LDS: one for a unit of one slot (rows_used), else NP
// (count < NP: the last row repeats, its results are not written), then its waves take
// YTILE-row tiles of the block; a wave's lanes split K in 32-column chunks (lane l: chunks l,
// l + wave, ...) and a fixed xor butterfly reduces them, as
// kernels/w4a16_linear.hip. Results do not depend on the grid, the block size or the CU count.
// GEMM2's row blocks count their finished items in self-cleaning counters (one per block, zero
// between calls); the workgroup that finishes a block's last item sums its rows. With no valid
// slot at all, GEMM2 writes zeros.
//
// Arguments (launch block (256, 1, 1), dynamic LDS NP * K * 2 bytes, bf16 + NP * K / 8):
//   fused_moe_route(ids, meta, P, E, group)              static LDS, P <= 1024, E <= 512
//   fused_moe_gemm1_<T>_<w4|w16>_n<NP>(x, w, scales, zeros, perm, meta, I, H, x_stride, log2_g, topk,
//       blocks, block_pairs, P)
//   fused_moe_gemm2_<T>_<w4|w16>_n<NP>_s<S>(w, scales, zeros, perm, meta, weights, out, H, I, topk, N,
//       blocks, block_rows, log2_g, P)                                    blocks <= kCounters
// K (H for GEMM1, I for GEMM2) a multiple of 32; x rows 16-byte aligned; out [N, H] contiguous.
#include "hipskinny/common.h"
#include "hipskinny/int4.h"
#include "hipskinny/reduce.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWaves = kThreads / hs::kWave;
constexpr int kChunk = hs::int4::kChunk;
constexpr int kMaxSlots = 1024;
constexpr int kMaxExperts = 512;
constexpr int kMeta = 4;
constexpr int kCounters = 1024;   // GEMM2 row blocks at most

// Where act and part sit in the scratch buffer (frontend/ops/fused_moe.py sizes it the same way).
__device__ inline uint16_t* act_of(int32_t* meta, int P) {
  return reinterpret_cast<uint16_t*>(meta + kCounters + ((kMeta + 4 * P + 3) & ~3));
}
__device__ inline float* part_of(int32_t* meta, int P, int I) {
  return reinterpret_cast<float*>(act_of(meta, P) + ((P * I + 7) & ~7));
}

struct Unit {
  int expert, start, count;
};

__device__ inline Unit unit_of(const int32_t* __restrict__ route, int P, int u) {
  const int32_t* units = route + kMeta + P;
  const int e = units[2 * u], sc = units[2 * u + 1];
  return Unit{e, sc & 0xffff, sc >> 16};
}

// The slot of a unit's token row n (rows past its count repeat the last one).
__device__ inline int slot_of(const int32_t* __restrict__ route, const Unit& un, int n) {
  return route[kMeta + un.start + min(n, un.count - 1)];
}

// The token rows a unit stages and multiplies: 1 for a unit of one slot when the kernel can
// branch on it (ONE), else NP (rows past its count repeat the last one and are not written). So
// the host can size NP for the experts with the most slots (each then read once) while the many
// experts with one slot cost one row's products, not NP.
template <int NP, bool ONE>
__device__ inline int rows_used(const Unit& un) {
  return NP > 1 && ONE && un.count == 1 ? 1 : NP;
}

// The 16-bit weights' products of one chunk for NP token rows.
template <typename T, int NP, int Y>
__device__ inline void chunk16(float (&acc)[NP][Y], const hs::u32x4 (&wv)[Y][4], const hs::u32x4* xs, int row_q, int c) {
#pragma unroll
  for (int d = 0; d < 4; ++d)
#pragma unroll
    for (int n = 0; n < NP; ++n) {
      const hs::u32x4 xv = xs[n * row_q + 4 * c + d];
#pragma unroll
      for (int r = 0; r < Y; ++r)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[n][r] = hs::dot2<T>(wv[r][d][i], xv[i], acc[n][r]);
    }
}

// A weight tile's rows of one expert: the loads and the chunk products, int4 or 16-bit, for
// `used` token rows (rows_used: 1 or NP, wave-uniform; rows past it keep acc = 0).
// The lane takes chunks li, li + L, ... of each row (li: its index in a group of L lanes). QUAD:
// with G >= 128 a quad's first lane alone loads the group's scale and zero point (see
// hs::int4::from_quad_leader); GEMM2 does without on gfx9 only (its row-block reduction leaves
// no scalar registers there for the extra control flow).
template <typename T, bool W4, int NP, int Y, int L = hs::kWave, bool QUAD = true>
__device__ inline void tile_sums(float (&acc)[NP][Y], const void* __restrict__ w, const uint16_t* __restrict__ scales,
                                 const uint8_t* __restrict__ zeros, const uint32_t (&rows)[Y], int K, int log2_g,
                                 const hs::u32x4* xs, const float* xsum, int li, int used) {
  float(&acc1)[1][Y] = reinterpret_cast<float(&)[1][Y]>(acc);   // row 0 alone
#pragma unroll
  for (int n = 0; n < NP; ++n)
#pragma unroll
    for (int r = 0; r < Y; ++r) acc[n][r] = 0.0f;
  const int row_q = K >> 3, row_s = K >> 5, chunks = K / kChunk;
  // Row offsets in VGPRs: every address below adds the lane's chunk anyway, and the scalar
  // registers are short on gfx9 with a stack's pointers and the route live.
  uint32_t rv[Y];
#pragma unroll
  for (int r = 0; r < Y; ++r) {
    rv[r] = rows[r];
    asm volatile("" : "+v"(rv[r]));
  }
  if constexpr (W4) {
    const uint32_t* wq = static_cast<const uint32_t*>(w);
    const uint32_t magic = hs::int4::magic_const<T>();
    const uint32_t groups = (uint32_t)K >> log2_g;
    const bool grouped = QUAD && log2_g >= 7;          // a quad's chunks share one group
    const bool leader = !grouped || (li & 3) == 0;
    for (int c = li; c < chunks; c += L) {
      const uint32_t g = ((uint32_t)c * kChunk) >> log2_g;
      hs::u32x4 wv[Y];
      float sc[Y];
      uint32_t z[Y], sraw[Y];
#pragma unroll
      for (int r = 0; r < Y; ++r) {
        wv[r] = hs::load16_stream(wq + (rv[r] * (uint32_t)(K >> 3) + 4u * c));
        sraw[r] = 0u;
        z[r] = 8u;
      }
      if constexpr (!QUAD) {
#pragma unroll
        for (int r = 0; r < Y; ++r) {
          sraw[r] = scales[rv[r] * groups + g];
          if (zeros != nullptr) z[r] = zeros[rv[r] * groups + g];
        }
      } else if (leader) {   // see from_quad_leader
#pragma unroll
        for (int r = 0; r < Y; ++r) sraw[r] = scales[rv[r] * groups + g];
        if (zeros != nullptr)
#pragma unroll
          for (int r = 0; r < Y; ++r) z[r] = zeros[rv[r] * groups + g];
      }
      if (grouped) {
#pragma unroll
        for (int r = 0; r < Y; ++r) {
          sraw[r] = hs::int4::from_quad_leader(sraw[r]);
          z[r] = hs::int4::from_quad_leader(z[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < Y; ++r) sc[r] = hs::to_float<T>((uint16_t)sraw[r]);
      if constexpr (NP > 1) asm volatile("" : "+s"(used));   // tested per chunk: not hoisted into a lane mask
      if (NP > 1 && used == 1)
        hs::int4::chunk<T, 1, Y>(acc1, wv, sc, z, xs, row_q, xsum, row_s, c, magic);
      else
        hs::int4::chunk<T, NP, Y>(acc, wv, sc, z, xs, row_q, xsum, row_s, c, magic);
    }
  } else {
    const uint16_t* w16 = static_cast<const uint16_t*>(w);
    for (int c = li; c < chunks; c += L) {
      hs::u32x4 wv[Y][4];
#pragma unroll
      for (int r = 0; r < Y; ++r)
#pragma unroll
        for (int d = 0; d < 4; ++d) wv[r][d] = hs::load16_stream(w16 + (rv[r] * (uint32_t)K + kChunk * c + 8 * d));
      if constexpr (NP > 1) asm volatile("" : "+s"(used));
      if (NP > 1 && used == 1)
        chunk16<T, 1, Y>(acc1, wv, xs, K >> 3, c);
      else
        chunk16<T, NP, Y>(acc, wv, xs, K >> 3, c);
    }
  }
}

// Expert e's slice of a stacked weight: element offsets of qweight / w, scales and zeros, perm.
template <bool W4>
__device__ inline const void* expert_w(const void* w, int e, int rows, int K) {
  if constexpr (W4) return static_cast<const uint32_t*>(w) + (int64_t)e * rows * (K >> 3);
  return static_cast<const uint16_t*>(w) + (int64_t)e * rows * K;
}

// vLLM's silu_and_mul on one (gate, up) pair of fp32 sums: cast, silu in fp32, cast, multiply in T.
template <typename T>
__device__ inline uint16_t silu_mul(float gate, float up) {
  const float g = hs::to_float<T>(hs::from_float<T>(gate));
  const float u = hs::to_float<T>(hs::from_float<T>(up));
  const float s = hs::to_float<T>(hs::from_float<T>(g / (1.0f + __builtin_expf(-g))));
  return hs::from_float<T>(s * u);   // exact product of two T values, rounded once
}

template <typename T, bool W4, int NP, int YP>
__device__ void gemm1(const uint16_t* __restrict__ x, const void* __restrict__ w, const uint16_t* __restrict__ scales,
                      const uint8_t* __restrict__ zeros, const int32_t* __restrict__ perm,
                      int32_t* __restrict__ meta, int I, int H, int64_t x_stride, int log2_g, int topk, int blocks,
                      int block_pairs, int P) {
  const int32_t* route = meta + kCounters;
  uint16_t* act = act_of(meta, P);
  constexpr int Y = 2 * YP;                        // gate rows, then up rows
  constexpr int Q = hs::pow2_at_least(NP * YP);    // butterfly width (each of gate, up)
  static_assert(NP * YP <= hs::kWave, "one output per lane at the write");
  extern __shared__ hs::u32x4 xs[];
  // bf16's chunk sums after the rows; their byte offset in a VGPR where gfx9 has no scalar
  // register to spare (an offset from xs, so the accesses stay LDS ones)
  uint32_t xsum_at = 16u * NP * (H >> 3);
  if constexpr (HS_GFX9 && NP > 1) asm volatile("" : "+v"(xsum_at));
  float* xsum = reinterpret_cast<float*>(reinterpret_cast<char*>(xs) + xsum_at);
  const int lane = threadIdx.x % hs::kWave, wave = threadIdx.x / hs::kWave;
  const int items = route[0] * blocks;
  const int rows = 2 * I;
  uint32_t kmax = H - 1;   // perm's clamp (hipskinny/int4.h), in a VGPR: no scalar register to spare
  asm volatile("" : "+v"(kmax));

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int u = item / blocks, b = item - u * blocks;
    const Unit un = unit_of(route, P, u);
    const int used = __builtin_amdgcn_readfirstlane(rows_used<NP, true>(un));
    __syncthreads();   // every wave is done reading the previous item's rows
    hs::int4::stage<T, NP, kThreads>(
        xs, xsum, [&](int n) { return x + (int64_t)(slot_of(route, un, n) / topk) * x_stride; },
        perm == nullptr ? nullptr : perm + (int64_t)un.expert * H, 0, H, H, kmax, used);
    __syncthreads();

    // int4: the expert's rows by 32-bit row index from the stack's base (E * rows * K / 8 < 2^32,
    // checked by the op), which keeps the per-expert pointers out of the scalar registers.
    const void* we = W4 ? w : expert_w<W4>(w, un.expert, rows, H);
    const uint32_t row0 = W4 ? (uint32_t)(un.expert * rows) : 0u;
    const int i_end = min(I, (b + 1) * block_pairs);
    // the token row this lane writes at the end of each tile, and its slot: read once per item
    constexpr int kLanes = hs::kWave / Q;
    const int jw = lane / kLanes, nw = jw / YP;
    const bool writer = lane % kLanes == 0 && jw < NP * YP && nw < un.count;   // lanes that write act
    const int slot_w = writer ? slot_of(route, un, nw) : 0;
    for (int i0 = b * block_pairs + wave * YP; i0 < i_end; i0 += kWaves * YP) {
      uint32_t rws[Y];
#pragma unroll
      for (int r = 0; r < YP; ++r) {
        rws[r] = row0 + (uint32_t)min(i0 + r, I - 1);
        rws[YP + r] = row0 + (uint32_t)(I + min(i0 + r, I - 1));
      }
      float acc[NP][Y];
      tile_sums<T, W4, NP, Y>(acc, we, scales, zeros, rws, H, log2_g, xs, xsum, lane, used);
      float vg[Q], vu[Q];
#pragma unroll
      for (int j = 0; j < Q; ++j) {
        vg[j] = j < NP * YP ? acc[j / YP][j % YP] : 0.0f;
        vu[j] = j < NP * YP ? acc[j / YP][YP + j % YP] : 0.0f;
      }
      const float gate = hs::reduce_scatter<hs::kWave / 2, Q>(vg, lane);
      const float up = hs::reduce_scatter<hs::kWave / 2, Q>(vu, lane);
      const int i = i0 + jw % YP;
      if (writer && i < i_end) act[(int64_t)slot_w * I + i] = silu_mul<T>(gate, up);
    }
  }
}

// S row groups per wave (S = 2 when K has at most wave / 2 chunks, e.g. I = 768 on wave64: each
// half-wave takes its own YT rows, so lanes are not idle for want of chunks).
template <typename T, bool W4, int NP, int YT, int S>
__device__ void gemm2(const void* __restrict__ w, const uint16_t* __restrict__ scales,
                      const uint8_t* __restrict__ zeros, const int32_t* __restrict__ perm,
                      int32_t* __restrict__ meta, const float* __restrict__ weights, uint16_t* __restrict__ out, int H, int I, int topk, int N, int blocks, int block_rows,
                      int log2_g, int P) {
  uint32_t* counters = reinterpret_cast<uint32_t*>(meta);
  const int32_t* route = meta + kCounters;
  const uint16_t* act = act_of(meta, P);
  float* part = part_of(meta, P, I);
  constexpr int L = hs::kWave / S;                 // lanes per row group
  constexpr int Q = hs::pow2_at_least(NP * YT);
  static_assert(NP * YT <= L, "one output per lane at the write");
  extern __shared__ hs::u32x4 xs[];
  __shared__ uint32_t ticket;
  // bf16's chunk sums after the rows (offset in a VGPR as in gemm1 at NP = 2; at NP = 4 the
  // compiler spills with it there)
  uint32_t xsum_at = 16u * NP * (I >> 3);
  if constexpr (HS_GFX9 && NP == 2) asm volatile("" : "+v"(xsum_at));
  float* xsum = reinterpret_cast<float*>(reinterpret_cast<char*>(xs) + xsum_at);
  const int lane = threadIdx.x % hs::kWave, wave = threadIdx.x / hs::kWave;
  const int sg = lane / L, li = lane % L;
  const int units = route[0];
  // perm's clamp I - 1 (hipskinny/int4.h) and the topk weights' address in VGPRs: gfx9 has no
  // scalar register to spare here (the weights are read once per output). The address comes
  // back out of the asm as a generic pointer: cast to the global address space, or the reads
  // through it are flat loads (which also count against the LDS wait counter).
  uint32_t kmax = I - 1;
  asm volatile("" : "+v"(kmax));
  const float* wts_v = weights;
  asm volatile("" : "+v"(wts_v));
  const auto wts = (const __attribute__((address_space(1))) float*)wts_v;

  if (units == 0) {   // no valid slot: every output is an empty sum
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < N * H; i += gridDim.x * kThreads) out[i] = 0;
    return;
  }
  for (int item = blockIdx.x; item < units * blocks; item += gridDim.x) {
    const int u = item / blocks, b = item - u * blocks;
    const Unit un = unit_of(route, P, u);
    // (gfx9's bf16 NP = 2 kernels are two scalar registers short of the branch: both rows there)
    constexpr bool kOne = !(HS_GFX9 && NP == 2 && hs::int4::kBf16<T>);
    const int used = __builtin_amdgcn_readfirstlane(rows_used<NP, kOne>(un));
    __syncthreads();
    hs::int4::stage<T, NP, kThreads>(
        xs, xsum, [&](int n) { return act + (int64_t)slot_of(route, un, n) * I; },
        perm == nullptr ? nullptr : perm + (int64_t)un.expert * I, 0, I, I, kmax, used);
    __syncthreads();

    const void* we = W4 ? w : expert_w<W4>(w, un.expert, H, I);
    const uint32_t row0 = W4 ? (uint32_t)(un.expert * H) : 0u;
    const int h0 = b * block_rows, h_end = min(H, h0 + block_rows);
    // the token row this lane writes at the end of each tile, its slot and weight: read once per item
    constexpr int kLanes = L / Q;
    const int jw = li / kLanes, nw = jw / YT;
    const bool writer = li % kLanes == 0 && jw < NP * YT && nw < un.count;   // lanes that write part
    const int slot_w = writer ? slot_of(route, un, nw) : 0;
    const float wt = writer ? wts[slot_w] : 0.0f;
    for (int w0 = h0 + wave * S * YT; w0 < h_end; w0 += kWaves * S * YT) {
      const int m0 = w0 + sg * YT;
      uint32_t rws[YT];
#pragma unroll
      for (int r = 0; r < YT; ++r) rws[r] = row0 + (uint32_t)min(m0 + r, H - 1);
      float acc[NP][YT];
      tile_sums<T, W4, NP, YT, L, !HS_GFX9>(acc, we, scales, zeros, rws, I, log2_g, xs, xsum, li, used);
      float v[Q];
#pragma unroll
      for (int j = 0; j < Q; ++j) v[j] = j < NP * YT ? acc[j / YT][j % YT] : 0.0f;
      const float sum = hs::reduce_scatter<L / 2, Q>(v, lane);   // within the row group
      const int h = m0 + jw % YT;
      if (writer && h < h_end) part[(int64_t)slot_w * H + h] = wt * sum;
    }

    // Count this item in its row block; the block's last item sums the block's rows.
    __threadfence();   // release: this item's partials are visible device-wide before the count
    __syncthreads();
    if (threadIdx.x == 0) ticket = atomicAdd(&counters[b], 1u);
    __syncthreads();
    if (ticket != (uint32_t)(units - 1)) continue;   // workgroup-uniform
    __threadfence();   // acquire: every unit's partials of this block
    if (threadIdx.x == 0) counters[b] = 0u;   // ready for the next call
    const int len = h_end - h0;
    for (int i = threadIdx.x; i < N * len; i += kThreads) {
      const int t = i / len, h = h0 + (i - t * len);
      float s = 0.0f;
      for (int jj = 0; jj < topk; ++jj) {
        const int p = t * topk + jj;
        if (route[kMeta + 3 * P + p]) s += part[(int64_t)p * H + h];
      }
      out[(int64_t)t * H + h] = hs::from_float<T>(s);
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
    fused_moe_route(const int32_t* __restrict__ ids, int32_t* __restrict__ meta, int P, int E, int group) {
  int32_t* route = meta + kCounters;
  __shared__ int32_t sid[kMaxSlots];
  __shared__ int32_t cnt[kMaxExperts], off[kMaxExperts], uoff[kMaxExperts];
  __shared__ int32_t invalid;
  for (int e = threadIdx.x; e < E; e += kThreads) cnt[e] = 0;
  if (threadIdx.x == 0) invalid = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += kThreads) {
    const int e = ids[p];
    const bool ok = (uint32_t)e < (uint32_t)E;
    sid[p] = ok ? e : -1;
    route[kMeta + 3 * P + p] = ok;
    atomicAdd(ok ? &cnt[e] : &invalid, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {   // exclusive prefix sums of slots and of units, in expert order
    int s = 0, u = 0;
    for (int e = 0; e < E; ++e) {
      off[e] = s;
      uoff[e] = u;
      s += cnt[e];
      u += (cnt[e] + group - 1) / group;
    }
    route[0] = u;
    route[1] = invalid;
    route[2] = s;
    route[3] = 0;
  }
  __syncthreads();
  int32_t* order = route + kMeta;
  int32_t* units = route + kMeta + P;
  for (int p = threadIdx.x; p < P; p += kThreads) {
    const int e = sid[p];
    if (e < 0) continue;
    int rank = 0;
    for (int q = 0; q < p; ++q) rank += sid[q] == e;
    order[off[e] + rank] = p;
  }
  for (int e = threadIdx.x; e < E; e += kThreads) {
    const int c = cnt[e];
    for (int j = 0; j * group < c; ++j) {
      units[2 * (uoff[e] + j)] = e;
      units[2 * (uoff[e] + j) + 1] = (off[e] + j * group) | (min(group, c - j * group) << 16);
    }
  }
}

#define HS_MOE1(T, TAG, W4, WTAG, NP, YP)                                                                    \
  extern "C" __global__ void __launch_bounds__(kThreads) fused_moe_gemm1_##TAG##_##WTAG##_n##NP(                   \
      const uint16_t* __restrict__ x, const void* __restrict__ w, const uint16_t* __restrict__ scales,         \
      const uint8_t* __restrict__ zeros, const int32_t* __restrict__ perm, int32_t* __restrict__ meta, int I,  \
      int H, int64_t x_stride, int log2_g, int topk, int blocks, int block_pairs, int P) {                     \
    gemm1<T, W4, NP, YP>(x, w, scales, zeros, perm, meta, I, H, x_stride, log2_g, topk, blocks, block_pairs, P); \
  }

#define HS_MOE2(T, TAG, W4, WTAG, NP, YT, S)                                                                 \
  extern "C" __global__ void __launch_bounds__(kThreads) fused_moe_gemm2_##TAG##_##WTAG##_n##NP##_s##S(            \
      const void* __restrict__ w, const uint16_t* __restrict__ scales, const uint8_t* __restrict__ zeros,      \
      const int32_t* __restrict__ perm, int32_t* __restrict__ meta, const float* __restrict__ weights,         \
      uint16_t* __restrict__ out, int H, int I, int topk, int N, int blocks, int block_rows, int log2_g,       \
      int P) {                                                                                                  \
    gemm2<T, W4, NP, YT, S>(w, scales, zeros, perm, meta, weights, out, H, I, topk, N, blocks, block_rows,     \
                            log2_g, P);                                                                         \
  }

// Token groups NP = 1, 2, 4; YP (GEMM1 row pairs per wave) and YT (GEMM2 rows per row group)
// keep NP x rows within one output per lane; GEMM2 with S = 1 or 2 row groups per wave. (NP = 8
// fits only one row pair / row per wave tile, twice the dependent round trips of NP = 4, and two
// per wave spill on gfx9 bf16: not built.)
#define HS_MOE_NP(T, TAG, W4, WTAG, NP, YP, YT) \
  HS_MOE1(T, TAG, W4, WTAG, NP, YP) HS_MOE2(T, TAG, W4, WTAG, NP, YT, 1) HS_MOE2(T, TAG, W4, WTAG, NP, YT, 2)
#define HS_MOE_ALL(T, TAG, W4, WTAG)                                                                  \
  HS_MOE_NP(T, TAG, W4, WTAG, 1, 2, 4) HS_MOE_NP(T, TAG, W4, WTAG, 2, 2, 4) HS_MOE_NP(T, TAG, W4, WTAG, 4, 2, 2)

HS_MOE_ALL(hs::f16, f16, true, w4)
HS_MOE_ALL(hs::bf16, bf16, true, w4)
HS_MOE_ALL(hs::f16, f16, false, w16)
HS_MOE_ALL(hs::bf16, bf16, false, w16)
