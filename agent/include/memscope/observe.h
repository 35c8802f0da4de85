/* memscope observer: publish ANOTHER caching allocator's events (PyTorch's own, from a torch extension that attaches
 * a trace tracker: agent/python/memscope_observer.cpp) through memscope's publisher and wire protocol, so that every
 * memscope viewer (memscope --attach, memscope-cli record) sees the job exactly as that allocator runs it.
 *
 * The host gives memscope three things:
 *   - every event, as it happens, from the thread holding the observed allocator's device lock:
 *     memscope_observe_event() writes one fixed-size record into a preallocated ring and returns (no allocation,
 *     no lock, no system call); a block event carries the size the caller asked for, and memscope derives the
 *     block's size from the allocator settings and the blocks it follows (PyTorch's rules);
 *   - on request, the allocator's whole state (hooks.state, on a thread of memscope's while the publisher thread
 *     waits for it and keeps the viewers' connection alive): every segment and its
 *     blocks through the sink functions below. The state is stamped by the MEMSCOPE_OBSERVED_SNAPSHOT event each
 *     device's allocator reports while it takes its part of the state (PyTorch's snapshot() records one per device
 *     under that device's lock), so a viewer joining late applies exactly the events that came after;
 *   - the frames of the contexts its events name (hooks.symbolize, batched, on a thread of memscope's while the
 *     publisher thread waits for it and keeps the viewers' connection alive; never at the same time as another
 *     hook, so hooks need no lock between themselves): a context is
 *     an opaque non-zero number the host chose; memscope asks for each context of a record it sends, once, and
 *     tells the host (hooks.release) about contexts of records it never sends. Equal frame lists share one stack
 *     id, sent once (topic "S"). Python frames may be handed over unnamed (memscope_observer_context_python):
 *     memscope names each distinct (code object, instruction) once, on a thread of its own that takes the
 *     interpreter lock only for frames it has not seen, so that no hook needs that lock and the publisher thread
 *     never waits for it for long: what is not named within a bounded wait goes out without a stack.
 *
 * Every function may be called from any thread, never throws, and reports failure through its return value
 * (memscope_last_error() then says why). Nothing here touches memscope's own allocator. */
#pragma once

#include "memscope/agent.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The action of an observed event: wire::EventType's numbers (common/wire/protocol.h), plus the snapshot stamp. */
enum {
    MEMSCOPE_OBSERVED_ALLOC = 0, /* address: the block; size: the bytes asked for */
    MEMSCOPE_OBSERVED_FREE_REQUESTED = 1,
    MEMSCOPE_OBSERVED_FREE_COMPLETED = 2,
    MEMSCOPE_OBSERVED_SEGMENT_ALLOC = 3, /* address, size: the segment */
    MEMSCOPE_OBSERVED_SEGMENT_FREE = 4,
    MEMSCOPE_OBSERVED_SEGMENT_MAP = 5,
    MEMSCOPE_OBSERVED_SEGMENT_UNMAP = 6,
    MEMSCOPE_OBSERVED_OOM = 7, /* address: the device's free bytes; size: the bytes asked for */
    MEMSCOPE_OBSERVED_SNAPSHOT = 100 /* the device's part of a state was taken just now */
};

/* memscope_observed_event.flags */
enum {
    /* a free whose context is its block's allocation's (PyTorch's free_requested, and free_completed inside free(),
     * without context="all"): the host passes no context and memscope gives the free its allocation's stack */
    MEMSCOPE_OBSERVED_ALLOCATION_CONTEXT = 1
};

typedef struct memscope_observed_event {
    uint8_t action; /* MEMSCOPE_OBSERVED_* */
    uint8_t device; /* < the device_count given to memscope_observe_start */
    uint8_t flags; /* MEMSCOPE_OBSERVED_ALLOCATION_CONTEXT, or 0 */
    uint8_t reserved;
    uint32_t context; /* 0: none */
    uint64_t address;
    uint64_t size;
    uint64_t stream; /* the raw cudaStream_t */
    int64_t pool_first; /* the segment's memory pool, (0, 0) the default one */
    int64_t pool_second;
} memscope_observed_event;

typedef struct memscope_frame {
    const char* name; /* UTF-8, copied by memscope */
    const char* filename;
    int64_t line;
} memscope_frame;

/* A Python frame as a capture holds it (PyTorch's CapturedTraceback::PyFrame): the host keeps `code` alive until it
 * releases the context (hooks.symbolize returning, or hooks.release). */
typedef struct memscope_python_frame {
    const void* code; /* a PyCodeObject* */
    int32_t instruction; /* the instruction's offset in bytes (PyFrame_GetLasti) */
    int32_t reserved;
} memscope_python_frame;

typedef struct memscope_observer_sink memscope_observer_sink; /* opaque; valid during the hook call only */
typedef struct memscope_observer_extras memscope_observer_extras; /* opaque; valid during python_extra only */

typedef struct memscope_observer_hooks {
    void* user;
    /* memscope's hook thread: the state of every device, taken now; 0, or -1 when there is none to give. */
    int (*state)(void* user, memscope_observer_sink* sink);
    /* memscope's hook thread: the frames of each context (memscope_observer_context_frames), then the contexts are the
     * host's to release. A context the host cannot symbolise is simply left out. */
    void (*symbolize)(void* user, const uint32_t* contexts, size_t count, memscope_observer_sink* sink);
    /* Publisher thread: contexts memscope will not ask about (their records were never sent). May be NULL. */
    void (*release)(void* user, const uint32_t* contexts, size_t count);
    /* memscope's symboliser thread, with the interpreter lock held, once per distinct Python frame it names: the
     * frames that line of `filename` stands for (generated code's source lines), through
     * memscope_observer_extra_frame. May be NULL. */
    void (*python_extra)(void* user, const char* filename, int64_t line, memscope_observer_extras* out);
} memscope_observer_hooks;

/* Starts publishing at `endpoint` (NULL or "": the agent's default, see memscope_publish_start) for an allocator
 * of `device_count` devices whose settings are `allocator_settings` (PYTORCH_CUDA_ALLOC_CONF syntax; NULL or "":
 * PyTorch's defaults). The hooks are copied; `hooks->state` and `hooks->symbolize` are required. 0, or -1
 * (memscope_last_error). Starting again stops the previous observer first. */
MEMSCOPE_AGENT_API int memscope_observe_start(const char* endpoint, int device_count, const char* allocator_settings,
                                              const memscope_observer_hooks* hooks) MEMSCOPE_NOEXCEPT;

/* One observed event; see the file comment. 1 if it was recorded, 0 if not (not observing, a full ring, a bad
 * device): then memscope will never ask about its context. */
MEMSCOPE_AGENT_API int memscope_observe_event(const memscope_observed_event* event) MEMSCOPE_NOEXCEPT;

/* Publishes what is queued and a Goodbye, then stops; waits at most 200 ms. The hooks are not called after it
 * returns. */
MEMSCOPE_AGENT_API void memscope_observe_stop(void) MEMSCOPE_NOEXCEPT;

/* The endpoint observed events go to ("" when not observing). Valid until the next start or stop. */
MEMSCOPE_AGENT_API const char* memscope_observe_endpoint(void) MEMSCOPE_NOEXCEPT;

/* Records dropped because the ring was full, since observing started. */
MEMSCOPE_AGENT_API uint64_t memscope_observe_lost(void) MEMSCOPE_NOEXCEPT;

/* Inside hooks.state: a segment, then memscope_observer_block for each of its blocks in address order (a block's
 * address is the segment's plus the sizes before it). */
MEMSCOPE_AGENT_API void memscope_observer_segment(memscope_observer_sink* sink, int device, uint64_t address,
                                                  uint64_t stream, int64_t pool_first, int64_t pool_second,
                                                  int is_large, int is_expandable) MEMSCOPE_NOEXCEPT;
MEMSCOPE_AGENT_API void memscope_observer_block(memscope_observer_sink* sink, uint64_t size, uint64_t requested_size,
                                                int allocated, int active, const memscope_frame* frames,
                                                size_t frame_count) MEMSCOPE_NOEXCEPT;

/* Inside hooks.symbolize: the frames of one context, innermost first. */
MEMSCOPE_AGENT_API void memscope_observer_context_frames(memscope_observer_sink* sink, uint32_t context,
                                                         const memscope_frame* frames,
                                                         size_t frame_count) MEMSCOPE_NOEXCEPT;

/* Inside hooks.symbolize, instead of memscope_observer_context_frames: a context's native frames, named
 * (innermost first), and its Python frames unnamed (innermost first); memscope names those. A native frame whose
 * name and filename are both NULL marks where the next Python frame goes (PyTorch puts each Python frame before
 * the interpreter's C frame that ran it); Python frames left over follow the native ones. `engine` != 0: the
 * Python frames are those of the backward() call under way, put under an "<autograd engine>" frame.
 * The host keeps such a context (its code objects) alive after the hook returns: memscope hands it back through
 * hooks.release once its frames are named, which may be a later call (hooks.release is then required). */
MEMSCOPE_AGENT_API void memscope_observer_context_python(memscope_observer_sink* sink, uint32_t context,
                                                         const memscope_frame* native, size_t native_count,
                                                         const memscope_python_frame* python, size_t python_count,
                                                         int engine) MEMSCOPE_NOEXCEPT;

/* Inside hooks.state, instead of memscope_observer_block: a block whose stack is given as in
 * memscope_observer_context_python, held by the host as `context` (non-zero, distinct from every context not yet
 * released) until memscope releases it (hooks.release). */
MEMSCOPE_AGENT_API void memscope_observer_block_python(memscope_observer_sink* sink, uint64_t size,
                                                       uint64_t requested_size, int allocated, int active,
                                                       uint32_t context, const memscope_frame* native,
                                                       size_t native_count, const memscope_python_frame* python,
                                                       size_t python_count) MEMSCOPE_NOEXCEPT;

/* Inside hooks.python_extra: one frame that line stands for, innermost first. */
MEMSCOPE_AGENT_API void memscope_observer_extra_frame(memscope_observer_extras* out, const char* name,
                                                      const char* filename, int64_t line) MEMSCOPE_NOEXCEPT;

/* What observing has cost so far, for the host to report (all counts since memscope_observe_start). */
typedef struct memscope_observe_statistics {
    uint64_t recorded; /* records written into the rings */
    uint64_t lost; /* records dropped: a ring was full */
    uint64_t contexts; /* contexts handed to the symbolize step */
    uint64_t stacks; /* distinct stacks sent */
    uint64_t python_frames; /* distinct Python frames named */
    uint64_t lock_takes; /* times the symboliser took the interpreter lock */
    uint64_t lock_wait_ns; /* time it waited for the lock, in all */
    uint64_t lock_wait_max_ns; /* the longest single wait */
    uint64_t lock_held_ns; /* time it held the lock, in all */
    uint64_t frames_late; /* Python frames not named within the publisher's wait */
    uint64_t without_stack; /* records sent without their stack (frames named too late) */
    uint64_t symbolize_ns; /* publisher thread time in the symbolize step (hooks and naming) */
} memscope_observe_statistics;

/* The statistics of the observer running now (or of the last one); 0, or -1 when none ever ran. */
MEMSCOPE_AGENT_API int memscope_observe_stats(memscope_observe_statistics* out) MEMSCOPE_NOEXCEPT;

#ifdef __cplusplus
}
#endif
