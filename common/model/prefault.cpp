// The prefault thread (prefault.h).
#include "model/prefault.h"

#include "model/processmemory.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include <cerrno>

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

WarmPages::WarmPages(size_t bytes, double pause)
    : m_pause(pause)
{
    if (bytes == 0)
        return;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return;
    if (hugePagesPay()) // (model/processmemory.h)
        madvise(p, bytes, MADV_HUGEPAGE);
    m_data = p;
    m_bytes = bytes;
    m_thread = std::thread([this] { run(); });
}

void WarmPages::run()
{
    pthread_setname_np(pthread_self(), "memscope-warm");
    setpriority(PRIO_PROCESS, 0, 19); // this thread only (Linux: a thread id's nice value, setpriority(2) NOTES)
    constexpr size_t Piece = size_t(2) << 20;
    auto* const base = static_cast<char*>(m_data);
    for (size_t at = 0; at < m_bytes; at += Piece) {
        const size_t length = std::min(Piece, m_bytes - at);
        const auto start = std::chrono::steady_clock::now();
        if (madvise(base + at, length, MADV_POPULATE_WRITE) != 0)
            return; // an older kernel (EINVAL) or no memory to spare: the work faults its pages in itself
        m_present.store(at + length, std::memory_order_relaxed);
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        std::unique_lock lock(m_mutex);
        if (m_wake.wait_for(lock, took * m_pause, [this] { return m_stop; }))
            return;
    }
}

void WarmPages::release()
{
    {
        const std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_wake.notify_all();
    if (m_thread.joinable())
        m_thread.join();
    if (m_data)
        munmap(m_data, m_bytes);
    m_data = nullptr;
    m_bytes = 0;
    m_present.store(0, std::memory_order_relaxed);
}

size_t WarmPages::sizeFor(uint64_t fileBytes, uint64_t availableBytes)
{
    constexpr uint64_t Least = uint64_t(64) << 20;
    if (fileBytes < Least)
        return 0;
    return size_t(std::min(fileBytes / 3 * 2, availableBytes / 4));
}

size_t WarmPages::sizeForFile(const std::string& path)
{
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    return sizeFor(uint64_t(st.st_size), availableMemory());
}

} // namespace memscope::model
