// Shared by the emulator's test kernels (tests/kernels/*.hip): the wave size as a
// compile-time constant of our own (the HIP headers' warpSize is not constexpr in
// every HIP release).
#pragma once

#include <hip/hip_runtime.h>

#if defined(__gfx942__) || defined(__gfx950__)
constexpr int kWave = 64;
#elif defined(__gfx1100__) || defined(__gfx1151__) || defined(__gfx1201__)
constexpr int kWave = 32;
#else
#error "test kernels are built for gfx942, gfx950, gfx1100, gfx1151 and gfx1201 only"
#endif
