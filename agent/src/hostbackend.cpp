// The GPU-less backend. See hostbackend.h.
#include "hostbackend.h"

#include <sys/mman.h>

#include <algorithm>

namespace memscope::agent {

namespace {
    // Made-up addresses (scripted mode without a queued address) start here: far above any user-space mapping on
    // x86-64 and aarch64 (47/48-bit), so that they can never be mistaken for a trace's real addresses.
    constexpr uintptr_t FakeBase = uintptr_t(0x4000) << 48;
    constexpr uintptr_t FakeTop = uintptr_t(0x5000) << 48; // descending ones start here

    uintptr_t alignUp(uintptr_t v, size_t a) { return a <= 1 ? v : (v + a - 1) / a * a; }
} // namespace

HostBackend::HostBackend()
    : HostBackend(Options {})
{
}

HostBackend::HostBackend(const Options& options)
    : m_options(options)
    , m_devices(static_cast<size_t>(options.deviceCount < 0 ? 0 : options.deviceCount))
    , m_nextFake(options.madeUpDescending ? FakeTop : FakeBase)
{
    for (auto& d : m_devices)
        d.capacity = options.capacity;
}

HostBackend::~HostBackend() = default;

MemoryInfo HostBackend::memoryInfo(int device)
{
    std::lock_guard lock(m_mutex);
    if (!validDevice(device))
        return {};
    const Device& d = m_devices[size_t(device)];
    return { d.capacity > d.used ? d.capacity - d.used : 0, d.capacity };
}

DevicePtr HostBackend::fakeAddress(size_t size, size_t alignment)
{
    const size_t align = alignment < 2097152 ? 2097152 : alignment;
    if (m_options.madeUpDescending) {
        const uintptr_t p = (m_nextFake - alignUp(size, 2097152)) / align * align;
        m_nextFake = p;
        return DevicePtr { p };
    }
    const uintptr_t p = alignUp(m_nextFake, align);
    m_nextFake = p + alignUp(size, 2097152);
    return DevicePtr { p };
}

bool HostBackend::takeFailure(Device& d)
{
    if (d.failures < 0)
        return true;
    if (d.failures > 0) {
        --d.failures;
        return true;
    }
    return false;
}

BackendStatus HostBackend::allocate(int device, size_t size, StreamId, DevicePtr* out)
{
    std::lock_guard lock(m_mutex);
    if (!validDevice(device) || size == 0)
        return BackendStatus::Error;
    Device& d = m_devices[size_t(device)];
    if (takeFailure(d) || d.used + size > d.capacity)
        return BackendStatus::OutOfMemory;
    if (m_options.scripted) {
        if (!d.segmentQueue.empty()) {
            *out = d.segmentQueue.front();
            d.segmentQueue.pop_front();
        } else {
            *out = fakeAddress(size, 512);
        }
    } else {
        // Address space only: PROT_NONE and MAP_NORESERVE, so a 200 MiB "segment" costs no memory.
        void* p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return BackendStatus::OutOfMemory;
        *out = DevicePtr { reinterpret_cast<uintptr_t>(p) };
    }
    d.used += size;
    ++d.reservations;
    return BackendStatus::Ok;
}

void HostBackend::release(int device, DevicePtr ptr, size_t size)
{
    std::lock_guard lock(m_mutex);
    if (!validDevice(device))
        return;
    Device& d = m_devices[size_t(device)];
    if (!m_options.scripted)
        ::munmap(reinterpret_cast<void*>(raw(ptr)), size);
    d.used -= size <= d.used ? size : d.used;
    ++d.releases;
}

BackendStatus HostBackend::createEvent(int device, EventId* out)
{
    std::lock_guard lock(m_mutex);
    if (!validDevice(device))
        return BackendStatus::Error;
    size_t index;
    if (!m_freeEvents.empty()) {
        index = m_freeEvents.back();
        m_freeEvents.pop_back();
    } else {
        index = m_events.size();
        m_events.emplace_back();
    }
    m_events[index] = Event { device, StreamId {}, true, true };
    *out = EventId { index + 1 };
    return BackendStatus::Ok;
}

void HostBackend::destroyEvent(int, EventId event)
{
    std::lock_guard lock(m_mutex);
    const size_t index = raw(event) - 1;
    if (index < m_events.size() && m_events[index].live) {
        m_events[index].live = false;
        m_freeEvents.push_back(index);
    }
}

BackendStatus HostBackend::recordEvent(int, EventId event, StreamId stream)
{
    std::lock_guard lock(m_mutex);
    const size_t index = raw(event) - 1;
    if (index >= m_events.size() || !m_events[index].live)
        return BackendStatus::Error;
    m_events[index].stream = stream;
    m_events[index].complete = m_options.completeEventsImmediately;
    return BackendStatus::Ok;
}

bool HostBackend::queryEvent(int, EventId event)
{
    std::lock_guard lock(m_mutex);
    const size_t index = raw(event) - 1;
    return index >= m_events.size() || m_events[index].complete;
}

void HostBackend::synchronizeEvent(int, EventId event)
{
    // Waiting for an event is what completes it on a machine where nothing runs.
    std::lock_guard lock(m_mutex);
    const size_t index = raw(event) - 1;
    if (index < m_events.size())
        m_events[index].complete = true;
}

void HostBackend::synchronizeStream(int device, StreamId stream) { completeStream(device, stream); }

void HostBackend::synchronizeDevice(int device)
{
    std::lock_guard lock(m_mutex);
    for (auto& e : m_events) {
        if (e.live && e.device == device)
            e.complete = true;
    }
}

BackendStatus HostBackend::reserveAddressSpace(int device, size_t size, size_t alignment, DevicePtr* out)
{
    std::lock_guard lock(m_mutex);
    if (!validDevice(device) || size == 0)
        return BackendStatus::Error;
    Device& d = m_devices[size_t(device)];
    if (m_options.scripted) {
        *out = DevicePtr {};
        if (!d.addressSpaceQueue.empty()) {
            const uintptr_t a = raw(d.addressSpaceQueue.front());
            d.addressSpaceQueue.pop_front();
            const bool overlaps = std::any_of(d.addressSpaces.begin(), d.addressSpaces.end(), [&](const auto& r) {
                return a < r.first + r.second && r.first < a + size;
            });
            if (!overlaps)
                *out = DevicePtr { a };
        }
        if (raw(*out) == 0)
            *out = fakeAddress(size, alignment);
        d.addressSpaces.emplace_back(raw(*out), size);
        return BackendStatus::Ok;
    }
    // Over-reserve by the alignment and trim both ends, as cuMemAddressReserve returns an aligned range.
    const size_t padded = size + alignment;
    void* p = ::mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return BackendStatus::OutOfMemory;
    const uintptr_t start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = alignUp(start, alignment);
    if (aligned > start)
        ::munmap(p, aligned - start);
    const uintptr_t end = start + padded;
    if (end > aligned + size)
        ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
    *out = DevicePtr { aligned };
    return BackendStatus::Ok;
}

void HostBackend::freeAddressSpace(int device, DevicePtr base, size_t size)
{
    std::lock_guard lock(m_mutex);
    if (!m_options.scripted) {
        ::munmap(reinterpret_cast<void*>(raw(base)), size);
        return;
    }
    if (validDevice(device)) {
        auto& spaces = m_devices[size_t(device)].addressSpaces;
        spaces.erase(std::remove_if(spaces.begin(), spaces.end(), [&](const auto& r) { return r.first == raw(base); }),
                     spaces.end());
    }
}

BackendStatus HostBackend::mapPages(int device, DevicePtr, size_t pageSize, size_t count)
{
    std::lock_guard lock(m_mutex);
    if (!validDevice(device))
        return BackendStatus::Error;
    Device& d = m_devices[size_t(device)];
    const size_t bytes = pageSize * count;
    if (takeFailure(d) || d.used + bytes > d.capacity)
        return BackendStatus::OutOfMemory;
    d.used += bytes;
    ++d.reservations;
    return BackendStatus::Ok;
}

void HostBackend::unmapPages(int device, DevicePtr, size_t pageSize, size_t count)
{
    std::lock_guard lock(m_mutex);
    if (!validDevice(device))
        return;
    Device& d = m_devices[size_t(device)];
    const size_t bytes = pageSize * count;
    d.used -= bytes <= d.used ? bytes : d.used;
    ++d.releases;
}

void HostBackend::setCapacity(int device, size_t bytes)
{
    std::lock_guard lock(m_mutex);
    if (validDevice(device))
        m_devices[size_t(device)].capacity = bytes;
}

size_t HostBackend::usedBytes(int device) const
{
    std::lock_guard lock(m_mutex);
    return validDevice(device) ? m_devices[size_t(device)].used : 0;
}

void HostBackend::queueSegmentAddress(int device, DevicePtr addr)
{
    std::lock_guard lock(m_mutex);
    if (validDevice(device))
        m_devices[size_t(device)].segmentQueue.push_back(addr);
}

void HostBackend::queueAddressSpace(int device, DevicePtr addr)
{
    std::lock_guard lock(m_mutex);
    if (validDevice(device))
        m_devices[size_t(device)].addressSpaceQueue.push_back(addr);
}

void HostBackend::failNextReservations(int device, int count)
{
    std::lock_guard lock(m_mutex);
    if (validDevice(device))
        m_devices[size_t(device)].failures = count;
}

void HostBackend::clearScript(int device)
{
    std::lock_guard lock(m_mutex);
    if (!validDevice(device))
        return;
    Device& d = m_devices[size_t(device)];
    d.segmentQueue.clear();
    d.addressSpaceQueue.clear();
    d.failures = 0;
}

void HostBackend::completeStream(int device, StreamId stream)
{
    std::lock_guard lock(m_mutex);
    for (auto& e : m_events) {
        if (e.live && e.device == device && e.stream == stream)
            e.complete = true;
    }
}

void HostBackend::completeAllEvents()
{
    std::lock_guard lock(m_mutex);
    for (auto& e : m_events)
        e.complete = true;
}

size_t HostBackend::reservationCount(int device) const
{
    std::lock_guard lock(m_mutex);
    return validDevice(device) ? m_devices[size_t(device)].reservations : 0;
}

size_t HostBackend::releaseCount(int device) const
{
    std::lock_guard lock(m_mutex);
    return validDevice(device) ? m_devices[size_t(device)].releases : 0;
}

} // namespace memscope::agent
