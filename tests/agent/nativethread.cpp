// A test helper for test_python_stacks.py: calls libmemscope-agent.so's memscope_malloc / memscope_free from a new
// native thread, one Python knows nothing of (no thread state), as the autograd engine's threads allocate.
#include <cstddef>
#include <thread>

#include <dlfcn.h>

extern "C" __attribute__((visibility("default"))) void* memscope_test_malloc_on_native_thread(size_t size)
{
    using Malloc = void* (*)(size_t, int, void*);
    auto malloc = reinterpret_cast<Malloc>(dlsym(RTLD_DEFAULT, "memscope_malloc"));
    void* p = nullptr;
    if (malloc)
        std::thread([&] { p = malloc(size, 0, nullptr); }).join();
    return p;
}
