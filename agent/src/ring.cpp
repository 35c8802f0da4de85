// EventRing: construction and the consumer side (the publisher thread only). See ring.h.
#include "ring.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace memscope::agent {

EventRing::EventRing(size_t capacity)
    : m_mask(std::bit_ceil(capacity < 2 ? size_t(2) : capacity) - 1)
    , m_slots(new wire::EventRecord[m_mask + 1]())
{
}

size_t EventRing::pop(wire::EventRecord* out, size_t max, uint64_t upTo) noexcept
{
    const uint64_t tail = m_tail.load(std::memory_order_relaxed);
    const uint64_t head = std::min(m_head.load(std::memory_order_acquire), std::max(upTo, tail));
    const size_t n = size_t(std::min<uint64_t>(head - tail, max));
    for (size_t i = 0; i < n; ++i)
        out[i] = m_slots[(tail + i) & m_mask];
    m_tail.store(tail + n, std::memory_order_release); // the slots are free for the producer again
    return n;
}

} // namespace memscope::agent
