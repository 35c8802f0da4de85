// A snapshot file's bytes for the parse: mapped (a 1 GB file is not copied), a window ahead of the parse at a time,
// dropped behind it, and on large files read ahead into huge pages by a thread of its own.
//
// Why read ahead: on a virtual machine the page cache is slow to read through 4 KiB mappings. Touching every cache
// line of a mapped 1 GB file took 0.5 s here, where the same bytes in anonymous 2 MiB pages took 0.04 s; the parse
// paid it as stalls on each entry's first bytes (a third of its decoding). A second thread now reads each window
// with pread(2) into 2 MiB pages and the parse's thread moves them over the window's file mapping with mremap(2)
// (page tables moved, no copy) when it reaches that window, so that thread reads anonymous memory. Behind the parse
// the window's pages move out again, to be filled with a later window (a page made present afresh costs this VM
// more than the copy into it), and the file is mapped where they were.
//
// Only the parse's thread changes what is mapped where, between its reads (consume()); a window the reader has not
// finished is left mapped from the file, so the parse never waits and reads the same bytes either way.
#pragma once

#include "io/error.h"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace memscope::io {

class FileBytes {
public:
    // Windows are this long (a multiple of 2 MiB) and the reader keeps at most ReadAhead of them ready.
    static constexpr uint64_t Window = uint64_t(8) << 20;
    static constexpr int ReadAhead = 4;
    // Files at least this large are read ahead (below it, a thread costs more than it saves).
    static constexpr uint64_t ReadAheadFrom = uint64_t(64) << 20;

    FileBytes() = default;
    ~FileBytes();
    FileBytes(const FileBytes&) = delete;
    FileBytes& operator=(const FileBytes&) = delete;

    // Opens and maps `path` (a regular file; read into memory where it cannot be mapped).
    Error open(const std::string& path);
    // Starts the reader thread when the file is mapped and at least `from` bytes long (tests read small files ahead
    // too). For a parse that will consume() the bytes: nothing else takes the windows it reads.
    void readAhead(uint64_t from = ReadAheadFrom);
    std::span<const uint8_t> bytes() const;
    // The parse is at `offset` of `data` (when `data` is these bytes): the windows ahead of it are made ready (read
    // ahead or mapped in), those wholly behind it dropped (read from the file again if touched). Parse thread only.
    void consume(std::span<const uint8_t> data, uint64_t offset);

    // Waits until the reader has as many windows ready as it keeps (or fewer at the file's end), or has stopped
    // (tests: so that the next consume() takes windows read ahead). At once without a reader.
    void waitForReadAhead();
    // Windows the parse read from memory the reader had filled, and windows it read through the file mapping.
    uint64_t windowsReadAhead() const { return m_windowsMoved; }
    uint64_t windowsMapped() const { return m_windowsMapped; }

private:
    struct Ready {
        uint64_t offset = 0; // of the window in the file
        void* memory = nullptr; // Window bytes (less at the end), 2 MiB aligned, read-only
        size_t length = 0;
    };
    void startReader();
    void stopReader();
    void readerLoop();
    void readWindows();
    // Makes the windows up to `end` ready: moved from the reader, else mapped in from the file.
    void windowsUpTo(uint64_t end);
    void populate(uint64_t from, uint64_t to);
    // A window read ahead, now behind the parse: its pages move out to spare memory and the file is mapped where
    // they were. False when either step fails (then the window is as it was).
    bool takeBack(uint64_t at);

    int m_fd = -1;
    void* m_map = nullptr; // 2 MiB aligned
    size_t m_size = 0;
    size_t m_reserved = 0; // bytes of address space reserved at m_reservation
    void* m_reservation = nullptr;
    uint64_t m_released = 0; // mapped from the file again below this
    uint64_t m_ready = 0; // windows below this are ready (moved in, or populated)
    std::deque<uint64_t> m_moved; // offsets of the windows moved in and not yet behind the parse, in order
    bool m_canPopulate = true;
    std::vector<uint8_t> m_copy; // where mapping failed
    uint64_t m_windowsMoved = 0, m_windowsMapped = 0;

    // The reader: windows read ahead, in file order, handed over under m_mutex.
    std::thread m_reader;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::deque<Ready> m_readyWindows;
    // Whole windows' memory taken back from behind the parse, its pages still present, for the reader to fill again:
    // a fresh page costs this VM more to make present than the copy into it (model/prefault.h).
    std::vector<void*> m_spare;
    uint64_t m_wanted = 0; // the parse's next window: the reader skips those below it
    bool m_stop = false;
    bool m_readerDone = false; // the reader returned (the file's end, a failure, or m_stop)
};

} // namespace memscope::io
