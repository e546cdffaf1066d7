// CHECK(call) for the standalone CUDA tools: print the failing call and its CUDA error, and exit.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t e = (call);                                                           \
    if (e != cudaSuccess) {                                                           \
      std::printf("%s failed: %s\n", #call, cudaGetErrorString(e));                   \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
