// A stand-in for the CUDA runtime's header, just what ../shared/bench's replay_core.h and
// scripts/gpu/replay_pair.cpp name, so that replay_pair builds and runs on a machine without
// CUDA against cuda-arena's `virtual` backend (stub.sh). Nothing here touches a device.
#pragma once
#include <cstddef>
#include <cstdint>

typedef enum cudaError { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 } cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUmemPoolHandle_st* cudaMemPool_t;
enum cudaMemPoolAttr {
  cudaMemPoolAttrReleaseThreshold = 4,
  cudaMemPoolAttrReservedMemCurrent = 5,
  cudaMemPoolAttrReservedMemHigh = 6,
  cudaMemPoolAttrUsedMemCurrent = 7,
  cudaMemPoolAttrUsedMemHigh = 8
};
#define cudaStreamNonBlocking 0x01
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
};

extern "C" {
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDevice(int*);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
const char* cudaGetErrorName(cudaError_t);
const char* cudaGetErrorString(cudaError_t);
cudaError_t cudaMemGetInfo(size_t*, size_t*);
cudaError_t cudaMalloc(void**, size_t);
cudaError_t cudaFree(void*);
cudaError_t cudaMallocAsync(void**, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void*, cudaStream_t);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned int);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t*, int);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t);
}
