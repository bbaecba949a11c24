// What the driver calls of the stream path cost (docs/benchmarks.md, ninth session): a million
// cuStreamGetId, and cuEventRecord and cuEventQuery on pooled events, each on one stream.
// There: nvcc -O2 scripts/gpu/driver_call_cost.cpp -lcuda -o /tmp/drv && /tmp/drv
#include <cuda.h>
#include <chrono>
#include <cstdio>
#include <vector>
static double now(){return std::chrono::duration<double,std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(){
  if (cuInit(0) != CUDA_SUCCESS) { std::fprintf(stderr, "no CUDA driver\n"); return 1; }
  CUdevice d; cuDeviceGet(&d,0); CUcontext c; cuDevicePrimaryCtxRetain(&c,d); cuCtxSetCurrent(c);
  CUstream s; cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  unsigned long long id=0; const int N=1000000;
  for(int r=0;r<3;r++){
    double t=now(); for(int i=0;i<N;i++) cuStreamGetId(s,&id); double a=(now()-t)/N;
    std::vector<CUevent> ev(4096); for(auto&e:ev) cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    t=now(); for(int i=0;i<100000;i++) cuEventRecord(ev[i%4096], s); double b=(now()-t)/100000;
    t=now(); for(int i=0;i<100000;i++) cuEventQuery(ev[i%4096]); double q=(now()-t)/100000;
    t=now(); for(int i=0;i<N;i++){ CUcontext x; cuCtxGetCurrent(&x);} double g=(now()-t)/N;
    printf("round %d: cuStreamGetId %.1f ns, cuEventRecord %.1f ns, cuEventQuery %.1f ns, cuCtxGetCurrent %.1f ns\n", r,a,b,q,g);
    for(auto&e:ev) cuEventDestroy(e);
  }
  return 0;
}
