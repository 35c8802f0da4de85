// A stand-in for libcudart / libcuda in tests of libmemscope-preload.so: the six entry points the preload
// interposes, over host memory. Sizes of 1 TiB and more fail (cudaErrorMemoryAllocation = 2,
// CUDA_ERROR_OUT_OF_MEMORY = 2) so that a test can check failures pass through unpublished.
#include <cstddef>
#include <cstdlib>

#define FAKE_API extern "C" __attribute__((visibility("default")))

FAKE_API int cudaMalloc(void** p, size_t size);
FAKE_API int cudaFree(void* p);
FAKE_API int cudaMallocAsync(void** p, size_t size, void* stream);
FAKE_API int cudaFreeAsync(void* p, void* stream);
FAKE_API int cuMemAlloc_v2(unsigned long long* p, size_t size);
FAKE_API int cuMemFree_v2(unsigned long long p);

FAKE_API int cudaMalloc(void** p, size_t size)
{
    if (size >= (size_t(1) << 40))
        return 2;
    *p = std::malloc(size);
    return *p ? 0 : 2;
}
FAKE_API int cudaFree(void* p)
{
    std::free(p);
    return 0;
}
FAKE_API int cudaMallocAsync(void** p, size_t size, void*) { return cudaMalloc(p, size); }
FAKE_API int cudaFreeAsync(void* p, void*) { return cudaFree(p); }
FAKE_API int cuMemAlloc_v2(unsigned long long* p, size_t size)
{
    void* q = nullptr;
    const int rc = cudaMalloc(&q, size);
    *p = reinterpret_cast<unsigned long long>(q);
    return rc;
}
FAKE_API int cuMemFree_v2(unsigned long long p) { return cudaFree(reinterpret_cast<void*>(p)); }
