/* cuda_arena.h with ONNX Runtime's own declarations before or after it (-DORT_FIRST), in C11
 * and C++: ORT declares its types as below (a struct typedef per type, the OrtAllocator
 * struct defined in full), and the header's repeated typedefs must agree with them. */
#include <stddef.h>
#include <stdint.h>

#ifdef ORT_FIRST
#define ORT_DECLARATIONS_DONE
#include "ort_style_declarations.h"
#endif
#include "cuda_arena.h"
#ifndef ORT_DECLARATIONS_DONE
#include "ort_style_declarations.h"
#endif

int main(void) {
  OrtAllocator allocator = {0, NULL};
  OrtAllocator* view = cuda_arena_ort_allocator(NULL, NULL, CUDA_ARENA_ORT_MAX_API_VERSION, NULL, NULL, 0);
  return view == NULL && allocator.version == 0 ? 0 : 1;
}
