// EventRing: construction (the producer and consumer sides are inline in ring.h).
#include "ring.h"

#include <bit>
#include <cstdlib>
#include <new>
#include <type_traits>

namespace memscope::agent {

EventRing::EventRing(size_t capacity)
    : m_mask(std::bit_ceil(capacity < 2 ? size_t(2) : capacity) - 1)
    , m_slots(static_cast<wire::EventRecord*>(std::calloc(m_mask + 1, sizeof(wire::EventRecord))))
{
    static_assert(std::is_trivially_copyable_v<wire::EventRecord>); // all-zero bytes are a valid, zero record
    if (!m_slots)
        throw std::bad_alloc();
}

void EventRing::FreeSlots::operator()(wire::EventRecord* p) const noexcept { std::free(p); }

} // namespace memscope::agent
