/* The shape of ONNX Runtime's declarations of the types cuda_arena.h names, for
 * header_with_ort.c; not ORT's header. */
#ifdef __cplusplus
extern "C" {
#endif
struct OrtApi;
typedef struct OrtApi OrtApi;
struct OrtStatus;
typedef struct OrtStatus OrtStatus;
struct OrtLogger;
typedef struct OrtLogger OrtLogger;
struct OrtMemoryInfo;
typedef struct OrtMemoryInfo OrtMemoryInfo;
struct OrtKeyValuePairs;
typedef struct OrtKeyValuePairs OrtKeyValuePairs;
typedef struct OrtAllocator {
  uint32_t version;
  void* (*Alloc)(struct OrtAllocator* self, size_t size);
} OrtAllocator;
#ifdef __cplusplus
}
#endif
