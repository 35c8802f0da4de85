// PythonSymboliser (pythonsymboliser.h).
#include "pythonsymboliser.h"

#include <algorithm>
#include <chrono>

#include <pthread.h>

namespace memscope::agent {

namespace {

    uint64_t steadyNs()
    {
        return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count());
    }

} // namespace

struct PythonSymboliser::Shared {
    python::ExtraFrames extra = nullptr;
    void* user = nullptr;
    std::mutex mutex;
    std::condition_variable wake; // the thread: work or stop
    std::condition_variable done; // resolve(): a pass ended
    std::vector<python::RawFrame> pending; // under mutex
    uint64_t started = 0; // under mutex: passes begun (each takes every frame pending then)
    uint64_t passes = 0; // under mutex: passes ended
    bool stop = false; // under mutex
    std::atomic<uint64_t> waitingSince { 0 }; // steady ns since the thread asked for the lock; 0: not waiting
    std::atomic<bool> inInterpreter { false };
    mutable std::mutex statsMutex;
    Stats stats; // under statsMutex
};

PythonSymboliser::PythonSymboliser(python::ExtraFrames extra, void* user)
    : m_shared(std::make_shared<Shared>())
{
    m_shared->extra = extra;
    m_shared->user = user;
    m_thread = std::thread([shared = m_shared] {
        pthread_setname_np(pthread_self(), "memscope-sym");
        std::vector<python::RawFrame> work;
        for (;;) {
            {
                std::unique_lock lock(shared->mutex);
                shared->wake.wait(lock, [&] { return shared->stop || !shared->pending.empty(); });
                if (shared->stop)
                    return;
                work.swap(shared->pending);
                shared->pending.clear();
                shared->started++;
            }
            // Only frames the table still lacks (another request may have named them meanwhile).
            std::vector<uintptr_t> keys(work.size());
            python::lookup(work.data(), unsigned(work.size()), keys.data());
            size_t added = 0, missing = 0;
            for (uintptr_t k : keys)
                missing += k == 0;
            if (missing > 0) {
                const uint64_t asked = steadyNs();
                shared->waitingSince.store(asked);
                shared->inInterpreter.store(true);
                int state = 0;
                const bool held = python::acquireLock(state);
                const uint64_t got = steadyNs();
                shared->waitingSince.store(0);
                if (held) {
                    for (size_t i = 0; i < work.size(); ++i) {
                        if (keys[i] == 0 && python::add(work[i], shared->extra, shared->user) != 0)
                            ++added;
                    }
                    python::releaseLock(state);
                }
                shared->inInterpreter.store(false);
                const uint64_t left = steadyNs();
                std::lock_guard lock(shared->statsMutex);
                if (held) {
                    shared->stats.lockTakes++;
                    shared->stats.lockWaitNs += got - asked;
                    shared->stats.lockWaitMaxNs = std::max(shared->stats.lockWaitMaxNs, got - asked);
                    shared->stats.lockHeldNs += left - got;
                }
                shared->stats.framesAdded += added;
            }
            work.clear();
            {
                std::lock_guard lock(shared->mutex);
                shared->passes++;
            }
            shared->done.notify_all();
        }
    });
}

PythonSymboliser::~PythonSymboliser()
{
    {
        std::lock_guard lock(m_shared->mutex);
        m_shared->stop = true;
    }
    m_shared->wake.notify_all();
    // A thread inside the interpreter (waiting for its lock) may never come back: it keeps `Shared` alive itself.
    if (m_shared->inInterpreter.load())
        m_thread.detach();
    else
        m_thread.join();
}

bool PythonSymboliser::resolve(const python::RawFrame* frames, size_t count, uintptr_t* keys, unsigned waitMs,
                               uint64_t* pass)
{
    if (pass)
        *pass = 0;
    if (count == 0)
        return true;
    if (python::lookup(frames, unsigned(count), keys) == count)
        return true;
    Shared& s = *m_shared;
    uint64_t target = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(waitMs);
    {
        std::unique_lock lock(s.mutex);
        for (size_t i = 0; i < count; ++i) {
            if (keys[i] == 0)
                s.pending.push_back(frames[i]);
        }
        target = s.started + 1; // the pass that takes what we queued
        s.wake.notify_one();
        {
            std::lock_guard statsLock(s.statsMutex);
            s.stats.requests++;
        }
        // A thread already stuck waiting for the lock longer than we may wait: do not wait at all.
        const uint64_t since = s.waitingSince.load();
        if (!(since != 0 && steadyNs() - since > uint64_t(waitMs) * 1000000u)) {
            s.done.wait_until(lock, deadline, [&] { return s.passes >= target; });
        }
    }
    const unsigned known = python::lookup(frames, unsigned(count), keys);
    if (known < count) {
        if (pass)
            *pass = target;
        std::lock_guard statsLock(s.statsMutex);
        s.stats.framesLate += count - known;
    }
    return known == count;
}

uint64_t PythonSymboliser::passesDone() const
{
    std::lock_guard lock(m_shared->mutex);
    return m_shared->passes;
}

uint64_t PythonSymboliser::lockWaitingNs() const
{
    const uint64_t since = m_shared->waitingSince.load();
    return since == 0 ? 0 : steadyNs() - since;
}

PythonSymboliser::Stats PythonSymboliser::stats() const
{
    std::lock_guard lock(m_shared->statsMutex);
    return m_shared->stats;
}

} // namespace memscope::agent
