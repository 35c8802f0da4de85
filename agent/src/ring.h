// EventRing: the bounded, preallocated queue between the allocator's hot path and the publisher thread. Producers
// are the threads that hold a device lock of the allocator (one per device, so several at once with several
// devices) plus the publisher's own heartbeats; the one consumer is the publisher thread. A record is claimed with
// one compare-and-swap on the write position and written in place (Dmitry Vyukov's bounded MPMC queue, reduced to
// one consumer): no malloc, no syscall, no lock. A full ring drops the record and counts it; the next record that
// gets in carries that count in `lost`. Sequence numbers are 1, 2, 3, ... in ring order (one global order); a
// dropped record takes no number, so the records that do get in stay consecutive (protocol.h: BatchHeader) and
// the drops are reported only through `lost` (and lostTotal()).
#pragma once

#include "wire/protocol.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace memscope::agent {

class EventRing {
public:
    // `capacity` is rounded up to a power of two (at least 2). Allocates the whole ring now.
    explicit EventRing(size_t capacity);
    EventRing(const EventRing&) = delete;
    EventRing& operator=(const EventRing&) = delete;

    size_t capacity() const { return m_mask + 1; }

    // Producer side, any thread: claims a slot, lets `fill` write the record in place (everything but sequence and
    // lost, which the ring sets), and publishes it. False when the ring was full (the record is dropped and
    // counted). Never blocks, never allocates. `fill` must not throw.
    template <typename Fill> bool push(Fill&& fill) noexcept
    {
        uint64_t pos = m_head.load(std::memory_order_relaxed);
        Slot* slot;
        for (;;) {
            slot = &m_slots[pos & m_mask];
            const uint64_t turn = slot->turn.load(std::memory_order_acquire);
            const int64_t diff = static_cast<int64_t>(turn - pos);
            if (diff == 0) {
                if (m_head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed))
                    break;
            } else if (diff < 0) {
                // The consumer has not taken the record that was written capacity() slots ago: full.
                m_pendingLost.fetch_add(1, std::memory_order_relaxed);
                m_lostTotal.fetch_add(1, std::memory_order_relaxed);
                return false;
            } else {
                pos = m_head.load(std::memory_order_relaxed);
            }
        }
        wire::EventRecord& r = slot->record;
        fill(r);
        r.sequence = pos + 1;
        // Only an atomic read on the common path: the exchange happens after a drop.
        r.lost = 0;
        if (m_pendingLost.load(std::memory_order_relaxed) != 0)
            r.lost = static_cast<uint32_t>(m_pendingLost.exchange(0, std::memory_order_relaxed));
        slot->turn.store(pos + 1, std::memory_order_release);
        return true;
    }

    // Consumer side, one thread only: copies up to `max` records, oldest first, into `out`; returns how many.
    // Stops early at a record that is claimed but not yet fully written.
    size_t pop(wire::EventRecord* out, size_t max) noexcept;

    // The sequence number of the last record claimed (0 before the first). Read under every device lock (when no
    // allocator event can be half-written) it is the sequence after which the allocator state is what it is.
    uint64_t lastClaimed() const noexcept { return m_head.load(std::memory_order_acquire); }
    // Records dropped since the ring was made.
    uint64_t lostTotal() const noexcept { return m_lostTotal.load(std::memory_order_relaxed); }
    // Records waiting for the consumer (approximate while producers run). Consumer thread only.
    size_t size() const noexcept;

private:
    struct Slot {
        std::atomic<uint64_t> turn; // == position: free for the writer of `position`; == position + 1: written
        wire::EventRecord record;
    };

    uint64_t m_mask;
    std::unique_ptr<Slot[]> m_slots;
    alignas(64) std::atomic<uint64_t> m_head { 0 }; // next position to claim
    alignas(64) std::atomic<uint64_t> m_pendingLost { 0 }; // drops not yet reported in a record
    std::atomic<uint64_t> m_lostTotal { 0 };
    alignas(64) uint64_t m_tail = 0; // next position to read; consumer only
};

} // namespace memscope::agent
