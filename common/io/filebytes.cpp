// See filebytes.h.
#include "io/filebytes.h"

#include "model/processmemory.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::io {

namespace {

    constexpr uint64_t HugePage = uint64_t(2) << 20;
    constexpr int PopulateRead = 22; // MADV_POPULATE_READ (include/uapi/asm-generic/mman-common.h), Linux 5.14

    uint64_t pageSize() { return uint64_t(sysconf(_SC_PAGESIZE)); }
    uint64_t roundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

    // `bytes` of anonymous memory at a 2 MiB boundary (so that it can take huge pages and move as whole page-table
    // entries), or nullptr.
    void* mapAligned(size_t bytes)
    {
        void* raw = mmap(nullptr, bytes + HugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED)
            return nullptr;
        const uintptr_t start = uintptr_t(raw), aligned = roundUp(start, HugePage);
        if (aligned > start)
            munmap(raw, aligned - start);
        const uintptr_t end = start + bytes + HugePage, used = aligned + bytes;
        if (end > used)
            munmap(reinterpret_cast<void*>(used), end - used);
        return reinterpret_cast<void*>(aligned);
    }

} // namespace

FileBytes::~FileBytes()
{
    stopReader();
    for (const Ready& r : m_readyWindows)
        munmap(r.memory, roundUp(r.length, pageSize()));
    for (void* spare : m_spare)
        munmap(spare, Window);
    if (m_reservation)
        munmap(m_reservation, m_reserved); // the file's mapping and the windows moved into it lie inside
    if (m_fd >= 0)
        ::close(m_fd);
}

Error FileBytes::open(const std::string& path)
{
    auto error = [&](std::string message) {
        Error e;
        e.code = ErrorCode::Io;
        e.message = std::move(message);
        e.path = path;
        return e;
    };
    m_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (m_fd < 0)
        return error(std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (fstat(m_fd, &st) != 0 || !S_ISREG(st.st_mode))
        return error("not a regular file");
    m_size = static_cast<size_t>(st.st_size);
    if (m_size == 0)
        return {};
    // Mapped a window ahead of the parse at a time (consume()), not whole at once (MAP_POPULATE): of a file not in
    // the page cache, that read all of it before the parse began, without a progress report or a look at Cancel
    // (5 s for 1 GB at 200 MB/s; minutes for a large file on a slow disk). At a 2 MiB boundary, so that windows
    // read ahead in huge pages can be moved over it.
    m_reserved = roundUp(m_size, pageSize()) + HugePage;
    void* reservation = mmap(nullptr, m_reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void* map = MAP_FAILED;
    if (reservation != MAP_FAILED) {
        m_reservation = reservation;
        void* at = reinterpret_cast<void*>(roundUp(uintptr_t(reservation), HugePage));
        map = mmap(at, m_size, PROT_READ, MAP_PRIVATE | MAP_FIXED, m_fd, 0);
    }
    if (map == MAP_FAILED) {
        // Read instead (some file systems cannot map).
        m_copy.resize(m_size);
        size_t done = 0;
        while (done < m_size) {
            const ssize_t n = ::read(m_fd, m_copy.data() + done, m_size - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return error(n == 0 ? std::string("cannot read: the file shrank while it was read")
                                    : std::string("cannot read: ") + std::strerror(errno));
            done += static_cast<size_t>(n);
        }
        return {};
    }
    m_map = map;
    madvise(m_map, m_size, MADV_SEQUENTIAL);
    windowsUpTo(2 * Window);
    return {};
}

void FileBytes::readAhead(uint64_t from)
{
    if (m_map && !m_reader.joinable() && m_size >= from && m_size > m_ready)
        startReader();
}

std::span<const uint8_t> FileBytes::bytes() const
{
    if (m_map)
        return { static_cast<const uint8_t*>(m_map), m_size };
    return { m_copy.data(), m_copy.size() };
}

void FileBytes::populate(uint64_t from, uint64_t to)
{
    // MADV_POPULATE_READ maps the pages in one call instead of a fault per 4 KiB page (which costs a virtual machine
    // ~10 us), reading them from disk first where the page cache lacks them. On page boundaries: madvise(2)
    // refuses an unaligned start with EINVAL, which reads as an older kernel.
    from = from / pageSize() * pageSize();
    if (!m_canPopulate || to <= from)
        return;
    if (madvise(static_cast<uint8_t*>(m_map) + from, to - from, PopulateRead) != 0 && errno == EINVAL)
        m_canPopulate = false; // an older kernel: the pages fault in as read
}

void FileBytes::windowsUpTo(uint64_t end)
{
    end = std::min<uint64_t>(end, m_size);
    while (m_ready < end) {
        const uint64_t at = m_ready, length = std::min<uint64_t>(Window, m_size - at);
        Ready window;
        if (m_reader.joinable()) {
            {
                const std::lock_guard lock(m_mutex);
                while (!m_readyWindows.empty() && m_readyWindows.front().offset < at) {
                    munmap(m_readyWindows.front().memory, roundUp(m_readyWindows.front().length, pageSize()));
                    m_readyWindows.pop_front();
                }
                if (!m_readyWindows.empty() && m_readyWindows.front().offset == at) {
                    window = m_readyWindows.front();
                    m_readyWindows.pop_front();
                }
                m_wanted = at + Window; // the reader skips a window the parse is already at
            }
            m_wake.notify_all();
        }
        if (window.memory) {
            // The window's page tables move over the file's mapping there (which goes): no byte is copied.
            const size_t bytes = roundUp(window.length, pageSize());
            void* to = static_cast<uint8_t*>(m_map) + at;
            if (mremap(window.memory, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, to) != MAP_FAILED) {
                m_moved.push_back(at);
                ++m_windowsMoved;
                m_ready = at + length;
                continue;
            }
            munmap(window.memory, bytes);
        }
        populate(at, at + length);
        ++m_windowsMapped;
        m_ready = at + length;
    }
}

void FileBytes::consume(std::span<const uint8_t> data, uint64_t offset)
{
    if (!m_map || data.data() != static_cast<const uint8_t*>(m_map))
        return;
    // Ready two windows ahead: the parse calls every few MB (io/picklereader.cpp, ConsumedStep).
    windowsUpTo(offset + 2 * Window);
    // Behind the parse, whole windows go: a window read ahead gives its pages back to the reader (takeBack; at most
    // two spare, else they are freed) and is mapped from the file again; one mapped from the file drops its pages
    // (MADV_DONTNEED on a private, read-only file mapping: a page touched again is read back from the file,
    // madvise(2)). So a 1 GB file and the model built from it are not both in memory, and what the builder reads
    // later (the tree's strings) is still the file's.
    const uint64_t end = std::min<uint64_t>(offset, m_size) / Window * Window;
    for (; m_released < end; m_released += Window) {
        uint8_t* at = static_cast<uint8_t*>(m_map) + m_released;
        const size_t length = std::min<uint64_t>(Window, m_size - m_released);
        const bool moved = !m_moved.empty() && m_moved.front() == m_released;
        if (moved) {
            m_moved.pop_front();
            // (Since Linux 6.12 a MAP_FIXED mmap that fails leaves the mapping it was to replace in place; then
            // the window's memory stays until the file is closed.)
            if (length < Window || !takeBack(m_released))
                (void)mmap(at, length, PROT_READ, MAP_PRIVATE | MAP_FIXED, m_fd, off_t(m_released));
        } else {
            madvise(at, length, MADV_DONTNEED);
        }
    }
}

bool FileBytes::takeBack(uint64_t at)
{
    constexpr size_t MaxSpare = 2;
    {
        const std::lock_guard lock(m_mutex);
        if (m_stop || m_readerDone || m_spare.size() >= MaxSpare)
            return false;
    }
    void* spare = mapAligned(Window); // an address for the pages (nothing of it is made present)
    if (!spare)
        return false;
    void* window = static_cast<uint8_t*>(m_map) + at;
    if (mremap(window, Window, Window, MREMAP_MAYMOVE | MREMAP_FIXED, spare) == MAP_FAILED) {
        munmap(spare, Window);
        return false;
    }
    if (mmap(window, Window, PROT_READ, MAP_PRIVATE | MAP_FIXED, m_fd, off_t(at)) == MAP_FAILED) {
        // The pages go back where they were (the same bytes as the file's). Were that to fail too, the window would
        // be a hole: only when the kernel cannot make a mapping at all.
        (void)mremap(spare, Window, Window, MREMAP_MAYMOVE | MREMAP_FIXED, window);
        return false;
    }
    {
        const std::lock_guard lock(m_mutex);
        m_spare.push_back(spare);
    }
    return true;
}

void FileBytes::startReader()
{
    m_wanted = m_ready; // those below are mapped in already
    m_reader = std::thread([this] { readerLoop(); });
}

void FileBytes::stopReader()
{
    if (!m_reader.joinable())
        return;
    {
        const std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_wake.notify_all();
    m_reader.join();
}

void FileBytes::waitForReadAhead()
{
    if (!m_reader.joinable())
        return;
    std::unique_lock lock(m_mutex);
    m_wake.wait(lock, [&] {
        const uint64_t left = m_wanted >= m_size ? 0 : (m_size - m_wanted + Window - 1) / Window;
        return m_readerDone || m_readyWindows.size() >= std::min<uint64_t>(ReadAhead, left);
    });
}

void FileBytes::readerLoop()
{
    pthread_setname_np(pthread_self(), "memscope-read");
    // Below the parse and the thread that makes the trace's pages present (model/prefault.h): the reader only
    // saves the parse time when it has a core to itself, and a window it has not finished is mapped from the file
    // instead. At nice 0 it took time from the parse too: memscope-cli stats of the 1 GB file 2.52-2.94 s (sys
    // 1.3-2.4 s) against 1.66-2.67 s at nice 10, which still read 123 of its 125 windows ahead (three runs each,
    // alternating). setpriority(2) NOTES: on Linux, this thread only.
    setpriority(PRIO_PROCESS, 0, 10);    readWindows();
    {
        const std::lock_guard lock(m_mutex);
        m_readerDone = true;
    }
    m_wake.notify_all();
}

void FileBytes::readWindows()
{
    uint64_t next = 0;
    for (;;) {
        {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, [&] { return m_stop || m_readyWindows.size() < size_t(ReadAhead); });
            if (m_stop)
                return;
            next = std::max(next, m_wanted);
        }
        if (next >= m_size)
            return;
        const size_t length = std::min<uint64_t>(Window, m_size - next);
        const size_t bytes = roundUp(length, pageSize());
        void* memory = nullptr;
        if (length == Window) {
            const std::lock_guard lock(m_mutex);
            if (!m_spare.empty()) {
                memory = m_spare.back();
                m_spare.pop_back();
            }
        }
        if (memory && mprotect(memory, bytes, PROT_READ | PROT_WRITE) != 0) {
            munmap(memory, bytes);
            memory = nullptr;
        }
        if (!memory) {
            memory = mapAligned(bytes);
            if (!memory)
                return; // the parse maps the rest from the file
            if (model::hugePagesPay())
                madvise(memory, bytes, MADV_HUGEPAGE);
        }
        size_t done = 0;
        while (done < length) {
            const ssize_t n = pread(m_fd, static_cast<uint8_t*>(memory) + done, length - done, off_t(next + done));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            done += size_t(n);
        }
        if (done < length) { // (a file cut short while it is read: the mapping's SIGBUS is the parse's to meet)
            munmap(memory, bytes);
            return;
        }
        mprotect(memory, bytes, PROT_READ);
        {
            const std::lock_guard lock(m_mutex);
            if (m_stop || next < m_wanted)
                munmap(memory, bytes); // the parse got there first
            else
                m_readyWindows.push_back(Ready { next, memory, length });
        }
        m_wake.notify_all(); // (waitForReadAhead)
        next += Window;
    }
}

} // namespace memscope::io
