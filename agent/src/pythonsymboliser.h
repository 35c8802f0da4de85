// PythonSymboliser: names the Python frames an observed allocator's contexts hold (pythonstacks.h RawFrame) for the
// publisher thread, which must never wait for the interpreter lock (GIL) itself: a job's thread may hold it for
// seconds, and the interpreter may be finalising. A thread of its own, "memscope-sym", takes the lock only when a
// frame the table does not know arrives (the first steps of a job; nearly never after), adds every such frame at
// once and lets it go. The publisher asks (resolve()) and waits a bounded time; what is not named by then goes out
// without a stack, and the symboliser goes on, so that later events have theirs.
//
// Threads: resolve(), stats() and lateness() from the publisher thread (stats() from any); the symboliser's own
// thread does the rest. The thread is detached at destruction if it is inside the interpreter (a thread waiting
// for the lock of a finalising interpreter never comes back).
#pragma once

#include "pythonstacks.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace memscope::agent {

class PythonSymboliser {
public:
    struct Stats {
        uint64_t requests = 0; // resolve() calls that found frames the table did not know
        uint64_t framesAdded = 0; // frames added to the table by this symboliser
        uint64_t lockTakes = 0; // interpreter lock acquisitions
        uint64_t lockWaitNs = 0; // time spent waiting for the lock, in all
        uint64_t lockWaitMaxNs = 0; // the longest single wait
        uint64_t lockHeldNs = 0; // time the lock was held, in all (the job's Python threads could not run)
        uint64_t framesLate = 0; // frames resolve() gave up waiting for
    };

    // `extra`: the frames generated code stands for (torch.compile's), asked with the lock held; may be null.
    explicit PythonSymboliser(python::ExtraFrames extra = nullptr, void* user = nullptr);
    ~PythonSymboliser();
    PythonSymboliser(const PythonSymboliser&) = delete;
    PythonSymboliser& operator=(const PythonSymboliser&) = delete;

    // Keys of `frames` (0 where not named in time): those the table knows at once; the others are handed to the
    // symboliser's thread and waited for, at most `waitMs`, and not at all while that thread has been waiting for
    // the interpreter lock longer than `waitMs` already. True when every frame was named. Otherwise *pass is the
    // pass of the symboliser's thread that will name the rest: the frames' holder must keep them (their code
    // objects) alive until passesDone() reaches it.
    bool resolve(const python::RawFrame* frames, size_t count, uintptr_t* keys, unsigned waitMs,
                 uint64_t* pass = nullptr);
    uint64_t passesDone() const;

    // How long the symboliser's thread has been waiting for the interpreter lock (0 when it is not).
    uint64_t lockWaitingNs() const;
    Stats stats() const;

private:
    struct Shared;

    std::shared_ptr<Shared> m_shared; // shared with a thread that may outlive this object (detached)
    std::thread m_thread;
};

} // namespace memscope::agent
