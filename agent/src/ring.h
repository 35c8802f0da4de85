// EventRing: the bounded, preallocated queue between one device of the allocator and the publisher thread. The
// producer is whichever thread holds that device's lock (so exactly one at a time: the allocator's own lock is the
// ring's), the one consumer is the publisher thread. A record is written in place and published with one release
// store: no atomic read-modify-write, no malloc, no syscall, no lock. A full ring drops the record and counts it;
// the next record that gets in carries that count in `lost`. Records are numbered 1, 2, 3, ... per ring in
// `sequence`; a dropped record takes no number (the publisher renumbers records into the agent's one sequence as
// it sends them, see publisher.h).
#pragma once

#include "wire/protocol.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace memscope::agent {

class EventRing {
public:
    // `capacity` is rounded up to a power of two (at least 2). Reserves the whole ring now (std::bad_alloc if it
    // cannot); its pages are committed as records first reach them.
    explicit EventRing(size_t capacity);
    EventRing(const EventRing&) = delete;
    EventRing& operator=(const EventRing&) = delete;

    size_t capacity() const { return m_mask + 1; }

    // Producer side (one thread at a time, e.g. under a device lock): lets `fill` write the record in place
    // (everything but sequence and lost, which the ring sets) and publishes it. False when the ring was full (the
    // record is dropped and counted). Never blocks, never allocates. `fill` must not throw.
    template <typename Fill> bool push(Fill&& fill) noexcept
    {
        const uint64_t head = m_head.load(std::memory_order_relaxed);
        if (head - m_cachedTail > m_mask) {
            // Looks full: only now read the consumer's position (its cache line stays where it is otherwise).
            m_cachedTail = m_tail.load(std::memory_order_acquire);
            if (head - m_cachedTail > m_mask) {
                ++m_pendingLost;
                m_lostTotal.store(m_lostTotal.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
                return false;
            }
        }
        wire::EventRecord& r = m_slots[head & m_mask];
        fill(r);
        r.sequence = head + 1;
        r.lost = m_pendingLost > UINT32_MAX ? UINT32_MAX : uint32_t(m_pendingLost);
        m_pendingLost = 0;
        m_head.store(head + 1, std::memory_order_release);
        return true;
    }

    // Consumer side, one thread only: copies up to `max` records, oldest first, into `out`, but none whose
    // sequence is above `upTo`; returns how many.
    size_t pop(wire::EventRecord* out, size_t max, uint64_t upTo = UINT64_MAX) noexcept
    {
        return pop(out, max, upTo, [](wire::EventRecord&) noexcept {});
    }
    // The same, and `each` edits each copied record (in `out`) in the same pass: the publisher renumbers and
    // converts records while they are in the cache. `each` must not throw.
    template <typename Each> size_t pop(wire::EventRecord* out, size_t max, uint64_t upTo, Each&& each) noexcept
    {
        const uint64_t tail = m_tail.load(std::memory_order_relaxed);
        const uint64_t head = readable(upTo, tail);
        const size_t n = size_t(head - tail < max ? head - tail : max);
        for (size_t i = 0; i < n; ++i) {
            out[i] = m_slots[(tail + i) & m_mask];
            each(out[i]);
        }
        m_tail.store(tail + n, std::memory_order_release); // the slots are free for the producer again
        return n;
    }
    // Consumer side: records ready to pop (none above `upTo`). What the stacks they name were interned before
    // them is visible to the caller after this (the acquire of the producer's release).
    size_t available(uint64_t upTo = UINT64_MAX) const noexcept
    {
        const uint64_t tail = m_tail.load(std::memory_order_relaxed);
        return size_t(readable(upTo, tail) - tail);
    }

    // Records written so far (the sequence of the last one). Read while the producer's lock is held, it says
    // exactly which records the allocator's state already reflects.
    uint64_t written() const noexcept { return m_head.load(std::memory_order_acquire); }
    // Records dropped since the ring was made. Any thread.
    uint64_t lostTotal() const noexcept { return m_lostTotal.load(std::memory_order_relaxed); }

private:
    uint64_t readable(uint64_t upTo, uint64_t tail) const noexcept
    {
        const uint64_t head = m_head.load(std::memory_order_acquire);
        const uint64_t limit = upTo > tail ? upTo : tail;
        return head < limit ? head : limit;
    }
    struct FreeSlots {
        void operator()(wire::EventRecord* p) const noexcept;
    };

    uint64_t m_mask;
    // calloc'ed: a large ring is zero pages until records reach them, so the rings of devices a job never uses
    // (or a ring sized for bursts the job never has) cost address space, not memory.
    std::unique_ptr<wire::EventRecord[], FreeSlots> m_slots;
    // Producer's cache line.
    alignas(64) std::atomic<uint64_t> m_head { 0 }; // records written
    uint64_t m_cachedTail = 0; // the consumer's position when the producer last looked
    uint64_t m_pendingLost = 0; // drops not yet reported in a record
    std::atomic<uint64_t> m_lostTotal { 0 }; // written by the producer only
    // Consumer's cache line.
    alignas(64) std::atomic<uint64_t> m_tail { 0 }; // records read
};

} // namespace memscope::agent
