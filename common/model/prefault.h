// Page faults taken off the thread that appends: a background thread makes the pages of a range of anonymous memory
// present (madvise MADV_POPULATE_WRITE, Linux 5.14) before an array's appends write them.
//
// A live document appends ~170 bytes of fresh memory per event (trace, series, allocations, timeline items): at
// 2 M events/s a third of a GB a second, and on a virtual machine the first write to a page costs more than the
// work done on it (bench_live: a quarter of the GUI thread's time). GrowingArray::prefaultAhead asks for the pages
// past its size; this thread does the faulting on another core.
//
// Populating changes no byte of memory, so a range that was written meanwhile, moved (mremap), freed or reused by
// another mapping is harmless to populate: the call fails or faults in pages that were going to be faulted in
// anyway. Requests are dropped when the thread is behind or the kernel lacks MADV_POPULATE_WRITE.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace memscope::model {

// Queues [begin, begin + bytes) for populating; returns at once. Thread-safe; starts the thread on first use.
void prefaultAsync(void* begin, size_t bytes);

// Queues the spare capacity of a vector that was just reserved and is about to be filled by appends (a large
// vector's storage is a fresh mapping: its first writes fault). Only worth it for tens of MB.
template <class Vector> void prefaultSpare(Vector& v)
{
    if (v.capacity() > v.size())
        prefaultAsync(v.data() + v.size(), (v.capacity() - v.size()) * sizeof(*v.data()));
}

// Memory made present while the machine has a core to spare, and handed back to the kernel just before work that
// will fault in as much: that work's faults then take pages the machine has just used.
//
// On a virtual machine the first write to a page the guest has not touched lately costs the host's work too: 1.5-2 s
// per GB on this project's development machine, against 0.07 s per GB for pages unmapped a moment before (the kernel
// hands out the pages freed last first). A virtio balloon with free page reporting returns free pages to the host
// two seconds after they are freed (mm/page_reporting.c: PAGE_REPORTING_DELAY), so the pages must go back to the
// kernel only just before the work. Opening a 1 GB snapshot, the replays fault in about 0.9 GB right after the parse,
// which leaves the second core idle for two seconds: warmed then, the replays took 0.9-1.1 s instead of 1.6 (README,
// Speed). On a machine without a hypervisor between it and its memory, warming costs the zeroing of the pages on a
// core that had nothing to do, and the pages are as warm either way.
class WarmPages {
public:
    // Maps `bytes` of anonymous memory (in huge pages where they pay: processmemory.h) and starts making them present
    // on a thread of its own, at the lowest priority, 2 MiB at a time with a pause as long as those took: half a core
    // at most, so that the memory bus and the address space's lock stay free enough for the work going on. Nothing at
    // all for 0 bytes or where the mapping fails. `pause`: the pause after each 2 MiB, as a multiple of the time they
    // took (tests make it long, to see that release() does not wait for it).
    explicit WarmPages(size_t bytes, double pause = 1.0);
    ~WarmPages() { release(); }
    WarmPages(const WarmPages&) = delete;
    WarmPages& operator=(const WarmPages&) = delete;

    // Stops the thread (within the page it is making present, never waiting out a pause) and unmaps the memory: its
    // present pages go back to the kernel's free lists, where this process's next faults find them. Idempotent.
    void release();
    // The bytes made present so far (and still held).
    size_t present() const { return m_present.load(std::memory_order_relaxed); }
    // The mapping (while held), for tests.
    const void* data() const { return m_data; }
    size_t size() const { return m_bytes; }

    // How much to warm before reading a snapshot file of `fileBytes` that a replay will follow: two thirds of it
    // (the replays of the 1 GB synthetic file fault in 0.85 of it; two thirds held at the parse's end keep the
    // open's peak where it was), nothing below 64 MiB (the pages are not worth a thread), and at most a quarter of
    // `availableBytes` (MemAvailable; 0: unknown, nothing warmed). Pure.
    static size_t sizeFor(uint64_t fileBytes, uint64_t availableBytes);
    // sizeFor() the file at `path` (stat(2)) and this machine's MemAvailable; 0 where the file cannot be stat'ed.
    static size_t sizeForFile(const std::string& path);

private:
    void run();

    void* m_data = nullptr;
    size_t m_bytes = 0;
    double m_pause = 1.0;
    std::atomic<size_t> m_present { 0 };
    // Set once by release(), under the mutex, so that the thread's pause ends at once (a page made present behind a
    // large munmap took 0.5-1 s, and then the pause as long: a Cancel in the middle of a 1 GB open waited 0.86 s for
    // it, and so could the replays).
    std::mutex m_mutex;
    std::condition_variable m_wake;
    bool m_stop = false;
    std::thread m_thread;
};

} // namespace memscope::model
