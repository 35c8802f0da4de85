// The program tst_preload runs under LD_PRELOAD=libmemscope-preload.so, linked against the fake cudart
// (fakecudart.cpp). It sets the preload up with one allocation, prints "ready", waits for a line on stdin, then
// makes a known sequence of calls, printing each address (hex) and checking every return value is the stub's own.
// Exit status 0 when all return values were as the stub gives them.
#include <cstdio>
#include <cstddef>

extern "C" int cudaMalloc(void** p, size_t size);
extern "C" int cudaFree(void* p);
extern "C" int cudaMallocAsync(void** p, size_t size, void* stream);
extern "C" int cudaFreeAsync(void* p, void* stream);
extern "C" int cuMemAlloc_v2(unsigned long long* p, size_t size);
extern "C" int cuMemFree_v2(unsigned long long p);

int main()
{
    int bad = 0;
    void* warm = nullptr;
    bad += cudaMalloc(&warm, 64) != 0;
    bad += cudaFree(warm) != 0;
    std::printf("ready\n");
    std::fflush(stdout);
    char line[16];
    if (!std::fgets(line, sizeof line, stdin))
        return 3;
    void* a = nullptr;
    void* b = nullptr;
    void* c = nullptr;
    unsigned long long d = 0;
    bad += cudaMalloc(&a, 1000) != 0;
    bad += cudaMalloc(&b, 2 << 20) != 0;
    bad += cudaMallocAsync(&c, 3000, reinterpret_cast<void*>(0x77)) != 0;
    bad += cuMemAlloc_v2(&d, 5000) != 0;
    void* huge = nullptr;
    bad += cudaMalloc(&huge, size_t(1) << 41) != 2; // fails: passed through, not published
    std::printf("%llx %llx %llx %llx\n", (unsigned long long)a, (unsigned long long)b, (unsigned long long)c, d);
    bad += cudaFree(a) != 0;
    bad += cudaFreeAsync(c, reinterpret_cast<void*>(0x77)) != 0;
    bad += cuMemFree_v2(d) != 0;
    bad += cudaFree(b) != 0;
    bad += cudaFree(nullptr) != 0; // not published
    std::fflush(stdout);
    return bad;
}
