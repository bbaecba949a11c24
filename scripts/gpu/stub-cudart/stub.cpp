// The stand-in libcudart of cuda_runtime_api.h: streams are distinct tokens, memory calls use
// the host's malloc, and the device reports no memory in use (the `virtual` backend's own
// counters are what a run on this machine reads).
#include "cuda_runtime_api.h"
#include <cstdlib>
#include <cstring>

extern "C" {
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof *p);
  std::strcpy(p->name, "no GPU (stub libcudart)");
  p->totalGlobalMem = size_t(80) << 30;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "cudaErrorStub"; }
const char* cudaGetErrorString(cudaError_t) { return "stub libcudart"; }
cudaError_t cudaMemGetInfo(size_t* f, size_t* t) { *f = *t = size_t(80) << 30; return cudaSuccess; }
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = n ? std::malloc(n) : nullptr;
  return (n && !*p) ? cudaErrorMemoryAllocation : cudaSuccess;
}
cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  *s = reinterpret_cast<cudaStream_t>(std::malloc(64));  // a distinct, live token
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { std::free(s); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* p, int) { *p = nullptr; return cudaSuccess; }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr, void* v) {
  *static_cast<uint64_t*>(v) = 0;
  return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) { return cudaSuccess; }
}
