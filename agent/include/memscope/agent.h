/* memscope agent: the exported C API of memscope's caching allocator (PyTorch's CUDACachingAllocator rules).
 *
 * Load it into a PyTorch process as a pluggable allocator:
 *
 *     alloc = torch.cuda.memory.CUDAPluggableAllocator("libmemscope-agent.so", "memscope_malloc", "memscope_free")
 *     torch.cuda.memory.change_current_allocator(alloc)
 *
 * Settings come from MEMSCOPE_ALLOC_CONF, else PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF (same syntax);
 * MEMSCOPE_AGENT_BACKEND=cuda|host picks the device backend (default: CUDA when a driver and a device are there,
 * else the host backend, which reserves address space only and is meant for tests).
 *
 * Every function may be called from any thread, never throws, and reports failure through its return value;
 * memscope_last_error() then says why (per thread). The allocator is set up on first use.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define MEMSCOPE_AGENT_API __attribute__((visibility("default")))
#else
#define MEMSCOPE_AGENT_API
#endif

#ifdef __cplusplus
#define MEMSCOPE_NOEXCEPT noexcept
extern "C" {
#else
#define MEMSCOPE_NOEXCEPT
#endif

/* CUDAPluggableAllocator's malloc: `size` bytes on `device` for use on `stream` (a cudaStream_t). NULL when
 * size is 0 or on failure (out of memory after releasing the cache, bad device, bad settings), like cudaMalloc.
 * Out of memory also publishes the oom event, writes a snapshot when MEMSCOPE_DUMP_ON contains "oom", and prints
 * one line on stderr (device, requested bytes, free device memory).
 *
 * torch's CUDAPluggableAllocator does not check for NULL (torch/csrc/cuda/CUDAPluggableAllocator.cpp:
 * CUDAPluggableAllocator::malloc stores and returns what alloc_fn_ gave, allocate() wraps it in a DataPtr), so a
 * NULL becomes a tensor at address 0 and the first kernel that touches it fails with an illegal address. For torch,
 * use memscope_malloc_raising instead (memscope_torch.use() does). */
MEMSCOPE_AGENT_API void* memscope_malloc(size_t size, int device, void* stream) MEMSCOPE_NOEXCEPT;

/* The same allocation for torch's CUDAPluggableAllocator, which calls it from C++: on failure it does all that
 * memscope_malloc does and then THROWS (the one function of this API that does): out of memory as a std::bad_alloc
 * whose what() is PyTorch's "CUDA out of memory. Tried to allocate ..." text, any other failure as a
 * std::runtime_error. torch's Python bindings catch std::exception and raise RuntimeError with that text
 * (torch/csrc/Exceptions.h, CATCH_ALL_ERRORS), so the job sees a Python exception it can handle instead of a crash;
 * it is a RuntimeError, not torch.OutOfMemoryError (which only c10::OutOfMemoryError becomes; the RAPIDS allocator
 * behaves the same, pytorch/pytorch#133280). NULL without throwing for size 0. Never call it from C. */
#ifdef __cplusplus
MEMSCOPE_AGENT_API void* memscope_malloc_raising(size_t size, int device, void* stream);
#endif

/* CUDAPluggableAllocator's free. `size` and `stream` are what PyTorch passes and are not needed. A pointer the
 * allocator did not hand out is ignored (warned about once on stderr). */
MEMSCOPE_AGENT_API void memscope_free(void* ptr, size_t size, int device, void* stream) MEMSCOPE_NOEXCEPT;

/* torch.cuda.empty_cache(): waits for pending cross-stream frees, then releases every cached segment of every
 * device that has no block in use. */
MEMSCOPE_AGENT_API void memscope_empty_cache(void) MEMSCOPE_NOEXCEPT;

/* Tensor.record_stream(): `ptr` is also used on `stream`; its memory is reused only after that work completes.
 * Returns 0, or -1 when `ptr` is not an allocated block. */
MEMSCOPE_AGENT_API int memscope_record_stream(void* ptr, void* stream) MEMSCOPE_NOEXCEPT;

/* torch.cuda.set_per_process_memory_fraction(): 0 on success, -1 for a bad fraction or device. */
MEMSCOPE_AGENT_API int memscope_set_memory_fraction(double fraction, int device) MEMSCOPE_NOEXCEPT;

/* A few of torch.cuda.memory_stats()'s counters (the "all" variants), in bytes or counts. */
typedef struct memscope_device_stats {
    int64_t allocated_bytes_current;
    int64_t allocated_bytes_peak;
    int64_t reserved_bytes_current;
    int64_t reserved_bytes_peak;
    int64_t active_bytes_current;
    int64_t active_bytes_peak;
    int64_t requested_bytes_current;
    int64_t requested_bytes_peak;
    int64_t allocation_count;
    int64_t segment_count;
    int64_t num_alloc_retries;
    int64_t num_ooms;
    int64_t num_device_alloc;
    int64_t num_device_free;
} memscope_device_stats;

/* Fills *out for `device`: 0, or -1 for a bad device or a NULL out. */
MEMSCOPE_AGENT_API int memscope_get_device_stats(int device, memscope_device_stats* out) MEMSCOPE_NOEXCEPT;

/* Why this thread's last failing call failed ("" if none failed yet). Valid until the thread's next call. */
MEMSCOPE_AGENT_API const char* memscope_last_error(void) MEMSCOPE_NOEXCEPT;

/* "cuda" or "host": the backend in use (sets the allocator up if needed); "none" if it could not be set up. */
MEMSCOPE_AGENT_API const char* memscope_backend_name(void) MEMSCOPE_NOEXCEPT;

/* Publishing the allocator's events to viewers over ZeroMQ (docs/protocol.md, common/wire/protocol.h): a PUB
 * socket bound to `endpoint` ("ipc:///path" or "tcp://host:port"; NULL or "": ipc://$XDG_RUNTIME_DIR/memscope-<pid>,
 * else ipc:///tmp/memscope-<uid>/memscope-<pid> in a folder of mode 0700) and a ROUTER socket answering state
 * requests on `endpoint` + "-state" (ipc) or port + 1 (tcp). libmemscope-agent.so starts publishing on its own at
 * first use unless MEMSCOPE_PUBLISH=0 (endpoint from MEMSCOPE_ENDPOINT). Starting again stops the previous publisher
 * first. Call it before other threads allocate. "tcp://:PORT" binds 127.0.0.1; a tcp endpoint that is not loopback
 * (a wildcard host, 0.0.0.0, any other address or name) needs CURVE keys (MEMSCOPE_CURVE_SECRET and
 * MEMSCOPE_CURVE_CLIENTS, docs/protocol.md) and is refused without them. 0, or -1 when the endpoint cannot be bound
 * or is refused (memscope_last_error says which and why). */
MEMSCOPE_AGENT_API int memscope_publish_start(const char* endpoint) MEMSCOPE_NOEXCEPT;

/* Publishes what is queued and a Goodbye, then stops; waits at most 200 ms. Allocation goes on unpublished. */
MEMSCOPE_AGENT_API void memscope_publish_stop(void) MEMSCOPE_NOEXCEPT;

/* Events dropped because the publisher could not keep up (its ring was full), since publishing started. */
MEMSCOPE_AGENT_API uint64_t memscope_publish_lost(void) MEMSCOPE_NOEXCEPT;

/* The PUB endpoint in use ("" when not publishing). Valid until the next memscope_publish_start. */
MEMSCOPE_AGENT_API const char* memscope_publish_endpoint(void) MEMSCOPE_NOEXCEPT;

/* The version of libmemscope-agent.so ("0.1.0"); only the shared library defines it. */
MEMSCOPE_AGENT_API const char* memscope_agent_version(void) MEMSCOPE_NOEXCEPT;

/* Writes the allocator's state as a torch.cuda.memory._snapshot() pickle (segments with their blocks, an empty
 * device_traces list per device, allocator_settings; no frames) to `path`: a file, or a folder (existing, or ending
 * in '/') that gets memscope-<pid>-<n>.pickle; NULL or "": MEMSCOPE_DUMP_PATH, else the current folder. Written
 * beside the target and renamed into place. Also written on SIGUSR2 (libmemscope-agent.so, unless the host has its
 * own handler; by a background thread), and on a failed allocation / at exit when MEMSCOPE_DUMP_ON contains
 * "oom" / "exit". 0, or -1 (memscope_last_error). */
MEMSCOPE_AGENT_API int memscope_dump_snapshot(const char* path) MEMSCOPE_NOEXCEPT;

/* A named scope of the job entered (`start` non-zero) or left, on `device`: PyTorch's record_function, which its
 * snapshots keep as external_annotations. Published to viewers (topic "A", docs/protocol.md) by whichever is
 * publishing: the observer (memscope_observe_start) or memscope's allocator. memscope_torch does it for
 * torch.profiler.record_function in both modes. Not for the allocator's hot path: a short lock and a copy. 0, or
 * -1 when nothing publishes, `name` is NULL, or too many notes wait to be sent (dropped). */
MEMSCOPE_AGENT_API int memscope_annotate(const char* name, int start, int device) MEMSCOPE_NOEXCEPT;

/* Python call stacks (MEMSCOPE_STACKS=python, or all for native frames and then Python's): in a process that hosts
 * CPython 3.9 or newer, each allocation and free carries the calling thread's Python frames (function, file,
 * line). The autograd engine's threads run no Python code; around a backward() call, from Python with the GIL held
 * (ctypes.PyDLL, as memscope_torch.use() does), begin makes the caller's stack theirs (under an "<autograd engine>"
 * frame) until end(token). begin returns -1 in a process without Python. */
MEMSCOPE_AGENT_API int memscope_python_backward_begin(void) MEMSCOPE_NOEXCEPT;
MEMSCOPE_AGENT_API void memscope_python_backward_end(int token) MEMSCOPE_NOEXCEPT;

#ifdef __cplusplus
}
#endif
