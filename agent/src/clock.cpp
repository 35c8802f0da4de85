// EventClock (clock.h): which clock the hot path reads, and the conversion of counter ticks to CLOCK_REALTIME.
#include "clock.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if MEMSCOPE_HAVE_TSC
#include <cpuid.h>
#endif

namespace memscope::agent {
namespace {

    // The counter is used only where it is a clock: an invariant TSC (constant rate, runs in every C-state: CPUID
    // 0x80000007 EDX bit 8, Intel SDM vol. 3 §17.17.1 / AMD APM vol. 3 CPUID Fn8000_0007) that the kernel itself
    // trusts as its clocksource (it switches away from "tsc" when it finds the counters of two CPUs unsynchronised
    // or drifting: Documentation/admin-guide/kernel-parameters.txt, tsc=; arch/x86/kernel/tsc_sync.c). Anything
    // else reads CLOCK_REALTIME directly.
    bool invariantTsc() noexcept
    {
#if MEMSCOPE_HAVE_TSC
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        if (!__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) || eax < 0x80000007u)
            return false;
        if (!__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx))
            return false;
        return (edx & (1u << 8)) != 0;
#else
        return false;
#endif
    }

    bool kernelClocksourceIsTsc() noexcept
    {
        FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
        if (!f)
            return false;
        char name[32] = {};
        const bool read = std::fgets(name, sizeof name, f) != nullptr;
        std::fclose(f);
        return read && std::strncmp(name, "tsc", 3) == 0 && (name[3] == '\n' || name[3] == '\0');
    }

    // MEMSCOPE_CLOCK=realtime forces clock_gettime (a check on the converted clock, or a machine whose TSC misleads).
    bool useTsc() noexcept
    {
        const char* forced = std::getenv("MEMSCOPE_CLOCK");
        if (forced && std::strcmp(forced, "realtime") == 0)
            return false;
        return invariantTsc() && kernelClocksourceIsTsc();
    }

    // A (ticks, realtime ns) pair taken as close together as possible: the tightest of three tries.
    void clockPair(uint64_t& tsc, uint64_t& ns) noexcept
    {
        uint64_t best = UINT64_MAX;
        for (int i = 0; i < 3; ++i) {
            const uint64_t before = tscTicks();
            const uint64_t now = realtimeNs();
            const uint64_t after = tscTicks();
            if (after - before < best) {
                best = after - before;
                tsc = before + (after - before) / 2;
                ns = now;
            }
        }
    }

} // namespace

EventClock::EventClock() noexcept
    : m_useTsc(useTsc())
{
    clockPair(m_baseTsc, m_baseNs);
    m_anchorTsc = m_baseTsc;
    m_anchorNs = m_baseNs;
}

void EventClock::calibrate() noexcept
{
    if (!m_useTsc)
        return;
    uint64_t tsc = 0, ns = 0;
    clockPair(tsc, ns);
    // The rate over the whole run so far (the longer the span, the smaller the error of the pairs' jitter).
    if (tsc > m_baseTsc && ns > m_baseNs)
        m_nsPerTick = double(ns - m_baseNs) / double(tsc - m_baseTsc);
}

void EventClock::anchor() noexcept
{
    if (m_useTsc)
        clockPair(m_anchorTsc, m_anchorNs);
}

uint64_t EventClock::realtimeOf(uint64_t stamp) const noexcept
{
    if (!m_useTsc)
        return stamp;
    // Relative to a (ticks, CLOCK_REALTIME) pair taken at this drain (anchor()): a record is at most a drain
    // interval plus the ring's backlog older than it, so the rate's error (ppm after the first seconds) moves it
    // by nanoseconds, and a step of CLOCK_REALTIME (settimeofday, NTP) shows in every record after the next drain.
    const int64_t delta = int64_t(stamp - m_anchorTsc);
    return m_anchorNs + uint64_t(int64_t(double(delta) * m_nsPerTick));
}

} // namespace memscope::agent
