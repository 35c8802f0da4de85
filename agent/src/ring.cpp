// EventRing: construction and the consumer side (the publisher thread only). See ring.h.
#include "ring.h"

#include <bit>

namespace memscope::agent {

EventRing::EventRing(size_t capacity)
    : m_mask(std::bit_ceil(capacity < 2 ? size_t(2) : capacity) - 1)
    , m_slots(new Slot[m_mask + 1])
{
    for (uint64_t i = 0; i <= m_mask; ++i) {
        m_slots[i].turn.store(i, std::memory_order_relaxed);
        m_slots[i].record = wire::EventRecord {};
    }
}

size_t EventRing::pop(wire::EventRecord* out, size_t max) noexcept
{
    size_t n = 0;
    while (n < max) {
        Slot& slot = m_slots[m_tail & m_mask];
        if (slot.turn.load(std::memory_order_acquire) != m_tail + 1)
            break; // empty, or the producer of this slot is still writing
        out[n++] = slot.record;
        slot.turn.store(m_tail + m_mask + 1, std::memory_order_release); // free for the writer one lap later
        ++m_tail;
    }
    return n;
}

size_t EventRing::size() const noexcept
{
    const uint64_t head = m_head.load(std::memory_order_relaxed);
    return head > m_tail ? size_t(head - m_tail) : 0;
}

} // namespace memscope::agent
