// A Backend without a GPU: "device memory" is host address space reserved with mmap(PROT_NONE) (never touched),
// capped by a per-device capacity so that out-of-memory paths can be exercised; streams are plain handles and
// events complete when recorded or only when told to. For the decision oracle (allocator-replay) it can be
// scripted: hand out given addresses instead of mapping anything, and fail a given number of reservations.
//
// Thread-safe: one internal mutex guards everything (it is never taken on the allocator's hot path).
#pragma once

#include "backend.h"

#include <deque>
#include <mutex>
#include <vector>

namespace memscope::agent {

class HostBackend final : public Backend {
public:
    struct Options {
        int deviceCount = 1;
        size_t capacity = size_t(80) << 30; // bytes each device may have reserved at once (an 80 GiB GPU)
        // Scripted: never mmap; allocate() and reserveAddressSpace() return queued addresses (or, when the queue
        // is empty, made-up ones far from any real mapping).
        bool scripted = false;
        // False: recorded events stay incomplete until completeStream()/completeAllEvents() or a synchronize.
        bool completeEventsImmediately = true;
        // Made-up addresses go down from the top of their range, each below the last, as CUDA's driver hands out
        // segments (every real trace seen: each new cudaMalloc below the one before until space is reused); false:
        // up from the bottom. Decides PyTorch's tie-break between free blocks of one size (the lower address).
        bool madeUpDescending = false;
    };

    HostBackend();
    explicit HostBackend(const Options& options);
    ~HostBackend() override;
    HostBackend(const HostBackend&) = delete;
    HostBackend& operator=(const HostBackend&) = delete;

    int deviceCount() const override { return static_cast<int>(m_devices.size()); }
    MemoryInfo memoryInfo(int device) override;
    BackendStatus allocate(int device, size_t size, StreamId stream, DevicePtr* out) override;
    void release(int device, DevicePtr ptr, size_t size) override;
    BackendStatus createEvent(int device, EventId* out) override;
    void destroyEvent(int device, EventId event) override;
    BackendStatus recordEvent(int device, EventId event, StreamId stream) override;
    bool queryEvent(int device, EventId event) override;
    void synchronizeEvent(int device, EventId event) override;
    void synchronizeStream(int device, StreamId stream) override;
    void synchronizeDevice(int device) override;
    BackendStatus reserveAddressSpace(int device, size_t size, size_t alignment, DevicePtr* out) override;
    void freeAddressSpace(int device, DevicePtr base, size_t size) override;
    BackendStatus mapPages(int device, DevicePtr addr, size_t pageSize, size_t count) override;
    void unmapPages(int device, DevicePtr addr, size_t pageSize, size_t count) override;

    // Controls for tests and the oracle.
    void setCapacity(int device, size_t bytes);
    size_t usedBytes(int device) const;
    // The next allocate() on `device` returns `addr` (FIFO).
    void queueSegmentAddress(int device, DevicePtr addr);
    // The next reserveAddressSpace() on `device` returns `addr` (FIFO), unless the range would overlap one still
    // reserved: then a made-up address, so that a wrong decision cannot hide behind a right address.
    void queueAddressSpace(int device, DevicePtr addr);
    // The next `count` allocate()/mapPages() calls on `device` fail with OutOfMemory; count < 0: every call until
    // clearScript(). Failures come before the capacity check and consume nothing from the address queues.
    void failNextReservations(int device, int count);
    // Drops queued addresses and pending failures of `device`.
    void clearScript(int device);
    // Completes every event recorded so far on `stream` of `device` / on every stream.
    void completeStream(int device, StreamId stream);
    void completeAllEvents();
    // How many allocate()/mapPages() calls succeeded and how many release()/unmapPages() calls came, per device.
    size_t reservationCount(int device) const;
    size_t releaseCount(int device) const;

private:
    struct Event {
        int device = 0;
        StreamId stream {};
        bool live = false;
        bool complete = true;
    };
    struct Device {
        size_t capacity = 0;
        size_t used = 0;
        std::deque<DevicePtr> segmentQueue;
        std::deque<DevicePtr> addressSpaceQueue;
        std::vector<std::pair<uintptr_t, size_t>> addressSpaces; // live reservations (scripted mode)
        int failures = 0;
        size_t reservations = 0;
        size_t releases = 0;
    };

    bool validDevice(int device) const { return device >= 0 && device < static_cast<int>(m_devices.size()); }
    DevicePtr fakeAddress(size_t size, size_t alignment);
    bool takeFailure(Device& d);

    Options m_options;
    mutable std::mutex m_mutex;
    std::vector<Device> m_devices;
    std::vector<Event> m_events; // EventId n is m_events[n - 1]
    std::vector<size_t> m_freeEvents;
    uintptr_t m_nextFake;
};

} // namespace memscope::agent
