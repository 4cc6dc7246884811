// MoE routing for decode: per token row, softmax over the E expert logits in fp32, then the k
// largest probabilities in descending order (ties: the lower expert id first), optionally
// renormalized by the sum of the selected ones (quant_specs.md 3.1, vLLM's fused_topk).
//
// Arguments:
//   x        [N, stride] router logits, T = fp16, bf16 or fp32; row t at x + t * stride, unit
//            stride along E; only the first E elements of a row are read
//   weights  fp32 [N, k] contiguous: the selected probabilities (renormalized if asked)
//   ids      int32 [N, k] contiguous: their expert ids, each in 0..E-1
//   N, E, k  N >= 1; E = 1..V * wave; k = 1..min(16, E)
//   stride   elements between rows (>= E when N > 1)
//   renorm   0 or 1
//
// Launch: topk_softmax_<f16|bf16|f32>_v<V>, block (256, 1, 1), grid (ceil(N / waves), 1, 1), no
// LDS. V = values per lane, the smallest of 1, 2, 4, 8 (16 on wave32) with V * wave >= E.
//
// One wave per row: lane l holds experts l, l + wave, ..., l + (V - 1) * wave (coalesced loads).
//   max      lane max, then an xor butterfly of fmaxf (exact, order-free)
//   e_i      expf(x_i - max) (accurate ocml expf, ~1 ulp), 0 for padding lanes
//   sum      each lane adds its e_i in slot order, then the xor butterfly of fp32 adds (every lane
//            ends with the same bits: a + b = b + a); a fixed tree, independent of the launch
//   p_i      e_i / sum, IEEE division
//   top-k    k rounds; each ranks (key, id) pairs where key = bits(p) + 1 (p in [0, 1], so
//            the bit pattern orders like the value), 0 for a NaN p, -1 for padding and for
//            experts already taken. A round: each lane's best slot (strict >, slots in
//            increasing id, so the lower id wins a tie), then an xor butterfly of (key, id)
//            keeping the larger key, on equal keys the lower id: a total order, so every lane
//            agrees on the winner; its owner marks it taken. Lane r keeps round r's pick.
//   renorm   the k picks summed in rank order in fp32, each divided by that sum (IEEE)
// Results are bitwise the same for any grid, CU count or wave schedule (no atomics, no LDS).
//
// Non-finite logits: -inf is probability 0 (exp(-inf) = 0), ranked by id among the zeros. A row
// holding a NaN or +inf logit, or only -inf logits, has no defined softmax (NaN - max, +inf -
// +inf, -inf - -inf are NaN, as in torch.softmax): its sum is NaN, so every p is NaN; NaN ranks
// below every number and ties by id, so the row gets NaN weights and ids 0..k-1. A NaN p only
// ever appears with the whole row NaN (each e_i is in [0, 1] or NaN, so the sum is finite unless
// some e_i is NaN), so no NaN is ever ranked against a number. Ids are always in 0..E-1:
// padding keys (-1) lose to every real key (>= 0) and k <= E.
//
// Budget: V values and V keys per lane: at most 28 VGPRs on wave64 (V = 8) and 72 on wave32 (V = 16;
// 41 at V = 8): 1536 / 72 = 21 waves of VGPRs per SIMD on gfx11/gfx12, 512 / 28 = 18 on CDNA, so
// occupancy is not limited by them; no LDS, no scratch.
#include "hipskinny/common.h"
#include "hipskinny/reduce.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWaves = kThreads / hs::kWave;

struct f32 {};

template <typename T> struct Storage { typedef uint16_t type; };
template <> struct Storage<f32> { typedef float type; };

template <typename T> __device__ inline float widen(typename Storage<T>::type v) { return hs::to_float<T>(v); }
template <> __device__ inline float widen<f32>(float v) { return v; }

// op(v, v of lane ^ D) for D = wave / 2 .. 1: with op commutative every lane ends with the same bits.
template <int D = hs::kWave / 2, typename Op>
__device__ inline float butterfly(float v, Op op) {
  if constexpr (D == 0) {
    return v;
  } else {
    return butterfly<D / 2>(op(v, hs::xor_lane<D>(v)), op);
  }
}

template <int D = hs::kWave / 2>
__device__ inline void best_of_wave(int& key, int& id) {
  if constexpr (D > 0) {
    const int ok = __builtin_bit_cast(int, hs::xor_lane<D>(__builtin_bit_cast(float, key)));
    const int oi = __builtin_bit_cast(int, hs::xor_lane<D>(__builtin_bit_cast(float, id)));
    const bool take = ok > key || (ok == key && oi < id);
    key = take ? ok : key;
    id = take ? oi : id;
    best_of_wave<D / 2>(key, id);
  }
}

template <typename T, int V>
__device__ void topk_softmax(const typename Storage<T>::type* __restrict__ x, float* __restrict__ weights,
                             int32_t* __restrict__ ids, int N, int E, int k, int64_t stride, int renorm) {
  const int lane = threadIdx.x % hs::kWave;
  const int row = blockIdx.x * kWaves + threadIdx.x / hs::kWave;
  if (row >= N) return;   // wave-uniform: the butterflies below run with the whole wave
  const typename Storage<T>::type* xr = x + row * stride;

  float v[V];
  float m = -__builtin_inff();
#pragma unroll
  for (int s = 0; s < V; ++s) {
    const int i = s * hs::kWave + lane;
    v[s] = i < E ? widen<T>(xr[i]) : -__builtin_inff();
    m = fmaxf(m, v[s]);
  }
  m = butterfly(m, [](float a, float b) { return fmaxf(a, b); });

  float sum = 0.0f;
#pragma unroll
  for (int s = 0; s < V; ++s) {
    v[s] = s * hs::kWave + lane < E ? expf(v[s] - m) : 0.0f;
    sum += v[s];
  }
  sum = butterfly(sum, [](float a, float b) { return a + b; });

  int key[V];
#pragma unroll
  for (int s = 0; s < V; ++s) {
    const float p = v[s] / sum;
    key[s] = s * hs::kWave + lane < E ? (p != p ? 0 : __builtin_bit_cast(int, p) + 1) : -1;
  }

  float mine = 0.0f, picked = 0.0f;
  int my_id = 0;
  for (int r = 0; r < k; ++r) {
    int bk = -1, bi = 0x7fffffff;
#pragma unroll
    for (int s = 0; s < V; ++s) {
      const bool better = key[s] > bk;
      bk = better ? key[s] : bk;
      bi = better ? s * hs::kWave + lane : bi;
    }
    best_of_wave(bk, bi);
#pragma unroll
    for (int s = 0; s < V; ++s) key[s] = s * hs::kWave + lane == bi ? -1 : key[s];
    const float p = bk == 0 ? __builtin_nanf("") : __builtin_bit_cast(float, bk - 1);
    picked += p;
    mine = lane == r ? p : mine;
    my_id = lane == r ? bi : my_id;
  }
  if (lane < k) {
    weights[row * k + lane] = renorm ? mine / picked : mine;
    ids[row * k + lane] = my_id;
  }
}

}  // namespace

#define HS_TOPK(T, TAG, V)                                                                                     \
  extern "C" __global__ void __launch_bounds__(kThreads) topk_softmax_##TAG##_v##V(                           \
      const Storage<T>::type* __restrict__ x, float* __restrict__ weights, int32_t* __restrict__ ids, int N, int E, \
      int k, int64_t stride, int renorm) {                                                                     \
    topk_softmax<T, V>(x, weights, ids, N, E, k, stride, renorm);                                              \
  }

#if HS_WAVE == 32
#define HS_TOPK_ALL(T, TAG) HS_TOPK(T, TAG, 1) HS_TOPK(T, TAG, 2) HS_TOPK(T, TAG, 4) HS_TOPK(T, TAG, 8) HS_TOPK(T, TAG, 16)
#else
#define HS_TOPK_ALL(T, TAG) HS_TOPK(T, TAG, 1) HS_TOPK(T, TAG, 2) HS_TOPK(T, TAG, 4) HS_TOPK(T, TAG, 8)
#endif

HS_TOPK_ALL(hs::f16, f16)
HS_TOPK_ALL(hs::bf16, bf16)
HS_TOPK_ALL(f32, f32)
