// Times two cuda-arena builds or configs in one process on one trace, their passes alternating
// (A B B A ...), each on its own stream through the cuda_arena_plugin of ../shared/bench.
//
// Why: on the GPU machine one replay process's time can be up to 2x another's for the same
// allocator (processes land near one of two speeds; pinning to a CPU, turning off address
// randomisation or transparent huge pages did not remove it: docs/benchmarks.md), so the
// median of a few processes per allocator is a coin flip when the two are close. In one
// process both allocators see the same machine state, and the ratio per process is what
// the speed bar compares.
//
// Build (scripts/gpu/pair-bars.sh does): g++ -O2 -std=c++17 -I$CUDA/include -I.device/bench
//   scripts/gpu/replay_pair.cpp -L$CUDA/lib64 -lcudart -ldl -o replay_pair
// Run: replay_pair --trace T.trc --plugin cuda_arena_plugin.so --arg-a 'LIB@cuda@Cuda@'
//   --arg-b 'LIB@cuda@Cuda@arena.use_virtual_memory=1' [--rounds 4] [--label-a A]
//   [--label-b B] [--json FILE] [--max-ops N] [--size-div D]
// --max-ops replays only the first N operations (what is still live after them is freed, untimed,
// before the next pass) and --size-div divides every size, rounding up: the one-thread runs of
// scripts/gpu/threads.sh, whose traces replay_mt cuts and scales so.
// Prints one JSON line: every timed pass's ns/op of each, their medians and B / A.
#include "replay_core.h"

using namespace replay;

namespace {

[[noreturn]] void pair_usage() {
  std::fprintf(stderr,
               "usage: replay_pair --trace FILE.trc --plugin PLUGIN.so --arg-a ARG --arg-b ARG\n"
               "                   [--rounds 4] [--label-a A] [--label-b B] [--json FILE]\n"
               "                   [--max-ops N] [--size-div D]\n");
  std::exit(2);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string list(const std::vector<double>& v) {
  std::string s = "[";
  char buf[64];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.2f", i ? "," : "", v[i]);
    s += buf;
  }
  return s + "]";
}

struct Side {
  std::string label;
  PluginBackend b;
  cudaStream_t stream = nullptr;
  std::vector<void*> slots;
  std::vector<double> ns;
  uint64_t failures = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string trace, plugin, json, args[2], labels[2] = {"A", "B"};
  int rounds = 4;
  uint64_t max_ops = 0, size_div = 1;  // 0: the whole trace
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) pair_usage();
      return argv[++i];
    };
    if (a == "--trace") trace = next();
    else if (a == "--plugin") plugin = next();
    else if (a == "--arg-a") args[0] = next();
    else if (a == "--arg-b") args[1] = next();
    else if (a == "--label-a") labels[0] = next();
    else if (a == "--label-b") labels[1] = next();
    else if (a == "--rounds") rounds = std::atoi(next().c_str());
    else if (a == "--json") json = next();
    else if (a == "--max-ops") max_ops = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--size-div") size_div = std::strtoull(next().c_str(), nullptr, 10);
    else pair_usage();
  }
  if (trace.empty() || plugin.empty() || args[0].empty() || args[1].empty() || rounds < 1 || size_div < 1)
    pair_usage();
  Trace t = load_trace(trace);
  const uint64_t n = max_ops && max_ops < t.n_ops ? max_ops : t.n_ops;
  if (size_div > 1)
    for (Op& op : t.ops) op.size = (op.size + size_div - 1) / size_div;
  // What the first n operations leave live, by id, to free between passes.
  std::vector<const Op*> left(t.n_ids, nullptr);
  for (uint64_t i = 0; i < n; ++i) left[t.ops[i].id] = t.ops[i].kind == 0 ? &t.ops[i] : nullptr;
  auto pass = [&](Side& s) {
    PassResult pr = run_pass<PluginBackend, false>(t, s.b, s.slots, n, 0, nullptr);
    for (uint64_t id = 0; id < t.n_ids; ++id)
      if (left[id] && s.slots[id]) {
        s.b.free(s.slots[id], left[id]->size, left[id]->stream);
        s.slots[id] = nullptr;
      }
    return pr;
  };

  void* h = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) die("dlopen failed: %s%s", dlerror(), "");
  auto get = (anchor_backend_get_fn)dlsym(h, "anchor_backend_get");
  if (!get) die("no anchor_backend_get in %s%s", plugin.c_str(), "");
  const anchor_backend_v1* pv = get();
  if (!pv || pv->abi_version != ANCHOR_BACKEND_ABI) die("plugin ABI mismatch%s%s", "", "");

  RCK(cudaSetDevice(0));
  RCK(cudaFree(nullptr));  // create the context
  cudaDeviceProp prop;
  RCK(cudaGetDeviceProperties(&prop, 0));

  Side side[2];
  for (int k = 0; k < 2; ++k) {
    Side& s = side[k];
    s.label = labels[k];
    RCK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    s.b.v = pv;
    s.b.uses_cuda = pv->uses_cuda != 0;
    s.b.name = pv->name;
    s.b.stream = (void*)s.stream;
    const char* err = nullptr;
    s.b.ctx = pv->create(args[k].c_str(), s.b.stream, &err);
    if (!s.b.ctx) die("plugin create failed: %s%s", err ? err : "(no message)", "");
    s.slots.assign(t.n_ids, nullptr);
  }
  // One untimed pass each (the first maps or grows what the later ones reuse).
  for (Side& s : side) {
    PassResult pr = pass(s);
    s.failures = std::max(s.failures, pr.failures);
  }
  for (int r = 0; r < rounds; ++r) {
    const int order[2] = {r % 2, 1 - r % 2};  // A B, then B A, ...
    for (int k : order) {
      Side& s = side[k];
      PassResult pr = pass(s);
      s.ns.push_back(pr.seconds * 1e9 / (double)n);
      s.failures = std::max(s.failures, pr.failures);
    }
  }
  const double ma = median(side[0].ns), mb = median(side[1].ns);
  char buf[256];
  std::string j = "{\"trace\":" + jstr(t.name) + ",\"device\":" + jstr(prop.name);
  j += ",\"n_ops\":" + std::to_string(n) + ",\"rounds\":" + std::to_string(rounds);
  j += ",\"size_div\":" + std::to_string(size_div);
  j += ",\"label_a\":" + jstr(side[0].label) + ",\"label_b\":" + jstr(side[1].label);
  j += ",\"ns_a\":" + list(side[0].ns) + ",\"ns_b\":" + list(side[1].ns);
  std::snprintf(buf, sizeof buf, ",\"median_a\":%.2f,\"median_b\":%.2f,\"b_over_a\":%.4f", ma, mb, mb / ma);
  j += buf;
  j += ",\"failures_a\":" + std::to_string(side[0].failures) + ",\"failures_b\":" + std::to_string(side[1].failures);
  j += "}";
  std::printf("%s\n", j.c_str());
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "a");
    if (!f) die("cannot open %s%s", json.c_str(), "");
    std::fprintf(f, "%s\n", j.c_str());
    std::fclose(f);
  }
  for (Side& s : side) {
    pv->destroy(s.b.ctx);
    RCK(cudaStreamDestroy(s.stream));
  }
  return 0;
}
