// The prefault thread (prefault.h).
#include "model/prefault.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include <cerrno>

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux 5.14 (include/uapi/asm-generic/mman-common.h)
#endif

namespace memscope::model {

namespace {

    class Prefaulter {
    public:
        static Prefaulter& instance()
        {
            static Prefaulter p; // joined at exit
            return p;
        }

        void request(void* begin, size_t bytes)
        {
            if (m_unsupported.load(std::memory_order_relaxed) || bytes == 0)
                return;
            {
                const std::lock_guard lock(m_mutex);
                if (m_queue.size() >= MaxQueued)
                    return; // behind: the appends fault the pages in themselves
                m_queue.emplace_back(reinterpret_cast<uintptr_t>(begin), bytes);
                if (!m_thread.joinable())
                    m_thread = std::thread([this] { run(); });
            }
            m_wake.notify_one();
        }

        ~Prefaulter()
        {
            {
                const std::lock_guard lock(m_mutex);
                m_stop = true;
                m_queue.clear();
            }
            m_wake.notify_one();
            if (m_thread.joinable())
                m_thread.join();
        }

    private:
        static constexpr size_t MaxQueued = 64;
        // Populating holds the address space's lock (mmap_lock, for reading) for the whole range it is given
        // (Linux mm/madvise.c, madvise_populate), and a thread that maps or unmaps memory meanwhile waits for all of
        // it: 0.2 s behind a 1 GB range on this project's development machine, 10 ms when the range goes 4 MiB at a
        // time, which populates as fast.
        static constexpr uintptr_t ChunkBytes = uintptr_t(4) << 20;

        void run()
        {
            pthread_setname_np(pthread_self(), "memscope-fault");
            const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
            std::unique_lock lock(m_mutex);
            for (;;) {
                m_wake.wait(lock, [this] { return m_stop || !m_queue.empty(); });
                if (m_stop)
                    return;
                const auto [begin, bytes] = m_queue.front();
                m_queue.pop_front();
                lock.unlock();
                // Whole pages only: a partly written first page is the appender's already.
                const uintptr_t first = (begin + page - 1) & ~(page - 1), end = (begin + bytes) & ~(page - 1);
                for (uintptr_t at = first; at < end; at += ChunkBytes) {
                    const size_t length = std::min<uintptr_t>(ChunkBytes, end - at);
                    if (madvise(reinterpret_cast<void*>(at), length, MADV_POPULATE_WRITE) == 0)
                        continue;
                    if (errno == EINVAL)
                        m_unsupported.store(true, std::memory_order_relaxed); // an older kernel: stop asking
                    break;
                }
                lock.lock();
            }
        }

        std::mutex m_mutex;
        std::condition_variable m_wake;
        std::deque<std::pair<uintptr_t, size_t>> m_queue;
        std::thread m_thread;
        bool m_stop = false;
        std::atomic<bool> m_unsupported { false };
    };

} // namespace

void prefaultAsync(void* begin, size_t bytes) { Prefaulter::instance().request(begin, bytes); }

} // namespace memscope::model
