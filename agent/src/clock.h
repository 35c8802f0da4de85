// EventClock: the publisher's time stamps. The hot path stamps each record with now(): the time stamp counter's
// ticks where it is a clock, else CLOCK_REALTIME nanoseconds; the publisher thread turns ticks into CLOCK_REALTIME
// nanoseconds as the records leave (realtimeOf), against a (ticks, realtime) pair taken at each drain (anchor) and
// the tick rate measured over the whole run (calibrate), the way tracy's client does. now() may be called on any
// thread at any time (it reads only what the constructor wrote); calibrate, anchor and realtimeOf belong to the
// publisher thread.
#pragma once

#include <cstdint>
#include <ctime>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define MEMSCOPE_HAVE_TSC 1
#else
#define MEMSCOPE_HAVE_TSC 0
#endif

namespace memscope::agent {

inline uint64_t realtimeNs() noexcept
{
    timespec ts; // clock_gettime(CLOCK_REALTIME) is answered by the vDSO: no system call
    clock_gettime(CLOCK_REALTIME, &ts);
    return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

inline uint64_t tscTicks() noexcept
{
#if MEMSCOPE_HAVE_TSC
    return __rdtsc();
#else
    return 0;
#endif
}

class EventClock {
public:
    // Decides between the counter and CLOCK_REALTIME (MEMSCOPE_CLOCK=realtime forces the latter) and takes the
    // first (ticks, realtime) pair: the base of the run.
    EventClock() noexcept;

    // The hot path's stamp: ~10 ns with the counter, ~23 ns through clock_gettime.
    uint64_t now() const noexcept { return m_useTsc ? tscTicks() : realtimeNs(); }
    bool usesTsc() const noexcept { return m_useTsc; }
    uint64_t baseNs() const noexcept { return m_baseNs; } // CLOCK_REALTIME when the clock was made

    void calibrate() noexcept; // the tick rate over the run so far
    void anchor() noexcept; // a fresh (ticks, realtime) pair for the records about to go out
    uint64_t realtimeOf(uint64_t stamp) const noexcept; // a record's stamp -> CLOCK_REALTIME ns

private:
    bool m_useTsc = false;
    uint64_t m_baseTsc = 0; // ticks at m_baseNs
    uint64_t m_baseNs = 0;
    uint64_t m_anchorTsc = 0; // the latest (ticks, CLOCK_REALTIME) pair, taken each drain
    uint64_t m_anchorNs = 0;
    double m_nsPerTick = 0; // unknown until the first calibrate() (records wait in the ring meanwhile)
};

} // namespace memscope::agent
