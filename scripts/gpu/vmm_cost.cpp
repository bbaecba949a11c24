// What each CUDA virtual-memory call costs per page, to choose how the arena's CUDA form maps
// and unmaps (issue 14): one cuMemCreate per page or one per run, cuMemSetAccess per page or
// per run, and whether keeping physical handles to move them between addresses (unmap + map
// of the same handle) is cheaper than creating and releasing them.
//
//   g++ -O2 -std=c++17 -I$CUDA/include scripts/gpu/vmm_cost.cpp -L$CUDA/lib64 -lcuda -o vmm_cost
//   ./vmm_cost [pages=128] [rounds=5]
//
// Prints one line per step: median over rounds of the microseconds per page.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

static void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    std::fprintf(stderr, "%s: %s\n", what, s ? s : "?");
    std::exit(1);
  }
}
#define CK(x) check((x), #x)

static double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int main(int argc, char** argv) {
  const size_t pages = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 128;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  CK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemAccessDesc acc = {};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const size_t span = pages * g;
  CUdeviceptr va1, va2;
  CK(cuMemAddressReserve(&va1, span, g, 0, 0));
  CK(cuMemAddressReserve(&va2, span, g, 0, 0));
  std::printf("granularity %zu bytes, %zu pages, %d rounds\n", g, pages, rounds);
  std::fflush(stdout);

  std::map<std::string, std::vector<double>> t;  // step -> us per page, one per round
  auto timed = [&](const std::string& step, const std::function<void()>& f) {
    double t0 = now_us();
    f();
    t[step].push_back((now_us() - t0) / pages);
  };
  std::vector<CUmemGenericAllocationHandle> h(pages);

  for (int r = 0; r < rounds; ++r) {
    // Today's form: create, map, release per page; access once per run; sync; unmap per page.
    timed("a create (per page)", [&] { for (auto& x : h) CK(cuMemCreate(&x, g, &prop, 0)); });
    timed("b map (per page)", [&] {
      for (size_t i = 0; i < pages; ++i) CK(cuMemMap(va1 + i * g, g, 0, h[i], 0));
    });
    timed("c set access, one call for the run", [&] { CK(cuMemSetAccess(va1, span, &acc, 1)); });
    timed("d release after map (per page)", [&] { for (auto x : h) CK(cuMemRelease(x)); });
    timed("e ctx synchronize, idle (per page of the run)", [&] { CK(cuCtxSynchronize()); });
    timed("f unmap (per page, frees the memory)", [&] {
      for (size_t i = 0; i < pages; ++i) CK(cuMemUnmap(va1 + i * g, g));
    });

    // Access per page instead of per run.
    for (auto& x : h) CK(cuMemCreate(&x, g, &prop, 0));
    for (size_t i = 0; i < pages; ++i) CK(cuMemMap(va1 + i * g, g, 0, h[i], 0));
    timed("g set access, one call per page", [&] {
      for (size_t i = 0; i < pages; ++i) CK(cuMemSetAccess(va1 + i * g, g, &acc, 1));
    });
    // One unmap call over a run of separately created pages: allowed?
    {
      double t0 = now_us();
      CUresult u = cuMemUnmap(va1, span);
      double us = (now_us() - t0) / pages;
      if (u == CUDA_SUCCESS) {
        t["h unmap, one call over the run of pages"].push_back(us);
      } else {
        if (r == 0) std::printf("one cuMemUnmap over %zu separate mappings refused (%d)\n", pages, (int)u);
        for (size_t i = 0; i < pages; ++i) CK(cuMemUnmap(va1 + i * g, g));
      }
    }
    // Handles kept: pages moved from va1 to va2 and back (unmap, map the same handle, access).
    for (size_t i = 0; i < pages; ++i) CK(cuMemMap(va1 + i * g, g, 0, h[i], 0));
    CK(cuMemSetAccess(va1, span, &acc, 1));
    timed("i move a kept page: unmap + map + access per page", [&] {
      for (size_t i = 0; i < pages; ++i) {
        CK(cuMemUnmap(va1 + i * g, g));
        CK(cuMemMap(va2 + i * g, g, 0, h[i], 0));
        CK(cuMemSetAccess(va2 + i * g, g, &acc, 1));
      }
    });
    timed("j move kept pages: unmap each, map each, one access call", [&] {
      for (size_t i = 0; i < pages; ++i) CK(cuMemUnmap(va2 + i * g, g));
      for (size_t i = 0; i < pages; ++i) CK(cuMemMap(va1 + i * g, g, 0, h[i], 0));
      CK(cuMemSetAccess(va1, span, &acc, 1));
    });
    for (size_t i = 0; i < pages; ++i) CK(cuMemUnmap(va1 + i * g, g));
    timed("k release kept handles (per page, frees the memory)", [&] { for (auto x : h) CK(cuMemRelease(x)); });

    // One physical allocation for the whole run.
    CUmemGenericAllocationHandle big;
    timed("l one create for the run", [&] { CK(cuMemCreate(&big, span, &prop, 0)); });
    timed("m one map for the run", [&] { CK(cuMemMap(va1, span, 0, big, 0)); });
    timed("n set access for it", [&] { CK(cuMemSetAccess(va1, span, &acc, 1)); });
    CK(cuMemRelease(big));
    timed("o one unmap for it (frees the memory)", [&] { CK(cuMemUnmap(va1, span)); });

    // One physical allocation mapped page by page (a mapping per page, at its offset): is
    // the access cost per mapping or per allocation?
    // (An H100 with driver 580 refuses a nonzero offset: "operation not supported".)
    CUmemGenericAllocationHandle one;
    CK(cuMemCreate(&one, span, &prop, 0));
    CUresult m = cuMemMap(va1, g, 0, one, 0);
    if (m == CUDA_SUCCESS && pages > 1) m = cuMemMap(va1 + g, g, g, one, 0);
    if (m != CUDA_SUCCESS) {
      if (r == 0) std::printf("a mapping of part of one allocation at an offset refused (%d)\n", (int)m);
      cuMemUnmap(va1, g);
    } else {
      timed("p one allocation, a map per page", [&] {
        for (size_t i = 2; i < pages; ++i) CK(cuMemMap(va1 + i * g, g, i * g, one, 0));
      });
      timed("q set access over those per-page mappings, one call", [&] { CK(cuMemSetAccess(va1, span, &acc, 1)); });
      timed("r unmap those, one call", [&] { CK(cuMemUnmap(va1, span)); });
    }
    CK(cuMemRelease(one));
  }
  for (auto& [step, v] : t) {
    std::sort(v.begin(), v.end());
    std::printf("%-58s %9.2f us/page (min %.2f, max %.2f)\n", step.c_str(), v[v.size() / 2], v.front(), v.back());
  }
  CK(cuMemAddressFree(va1, span));
  CK(cuMemAddressFree(va2, span));
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
