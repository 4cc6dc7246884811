// Grid geometry: checks the dispatch state for 2-D and 3-D launches on every arch:
// workgroup ids in y and z (s2.. on gfx942/gfx950/gfx1151, padded to s13..s15 on gfx1100,
// ttmp9/ttmp7 on gfx1201), packed work-item ids in v0, and blockDim/gridDim, which come
// from the hidden kernel arguments (hidden_group_size_*, hidden_block_count_*).
//
// grid_ids(out): every thread writes 12 words at out[12 * g], g = its global linear index
// (x fastest: threads of a block, then blocks along x, y, z):
//   threadIdx.xyz, blockIdx.xyz, blockDim.xyz, gridDim.xyz
// Launch: any grid, any block of at most 256 threads.
//
// add3d(a, out, nx, ny, nz): out[(z ny + y) nx + x] = 2 a[same] + z for every point of the
// nx x ny x nz box; the grid covers it with partial blocks in every dimension.
// Launch: any block of at most 256 threads, grid ceil(n / block) per dimension.
#include "testing.h"

extern "C" __global__ void __launch_bounds__(256) grid_ids(unsigned* __restrict__ out) {
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned local = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  unsigned* rec = out + 12 * (block * threads + local);
  rec[0] = threadIdx.x;
  rec[1] = threadIdx.y;
  rec[2] = threadIdx.z;
  rec[3] = blockIdx.x;
  rec[4] = blockIdx.y;
  rec[5] = blockIdx.z;
  rec[6] = blockDim.x;
  rec[7] = blockDim.y;
  rec[8] = blockDim.z;
  rec[9] = gridDim.x;
  rec[10] = gridDim.y;
  rec[11] = gridDim.z;
}

extern "C" __global__ void __launch_bounds__(256)
add3d(const float* __restrict__ a, float* __restrict__ out, int nx, int ny, int nz) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x >= nx || y >= ny || z >= nz) return;
  const long i = (static_cast<long>(z) * ny + y) * nx + x;
  out[i] = 2.0f * a[i] + static_cast<float>(z);
}
