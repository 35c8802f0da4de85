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

#include <cstddef>

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

} // namespace memscope::model
