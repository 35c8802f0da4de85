// ReplayLabelling: see replaylabelling.h.
#include "document/replaylabelling.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

namespace memscope::app {

ReplayLabelling::ReplayLabelling(std::vector<model::Replay>& replays, const model::Snapshot& snapshot, Start when)
    : m_replays(replays)
    , m_snapshot(snapshot)
{
    if (when == Start::Now)
        start();
}

void ReplayLabelling::start()
{
    std::lock_guard lock(m_mutex);
    if (!m_thread.joinable() && !isDone())
        m_thread = std::thread([this] { run(); });
}

ReplayLabelling::~ReplayLabelling()
{
    m_stop.store(true);
    if (m_thread.joinable())
        m_thread.join();
}

void ReplayLabelling::wait()
{
    start();
    std::unique_lock lock(m_mutex);
    m_finished.wait(lock, [this] { return isDone(); });
}

void ReplayLabelling::run()
{
    pthread_setname_np(pthread_self(), "memscope-labels");
    // Behind the GUI and the work the first picture waits for (the timeline's plots, the insights): on two cores
    // this pass would otherwise take half of the CPU they need (setpriority on a thread id sets that thread's nice
    // value on Linux: man 2 setpriority, NOTES).
    setpriority(PRIO_PROCESS, id_t(gettid()), 10);
    try {
        for (model::Replay& replay : m_replays)
            if (!replay.buildLabels(m_snapshot, [this](double) { return !m_stop.load(std::memory_order_relaxed); }))
                break;
    } catch (const std::bad_alloc&) {
        // The replay stays unlabelled: its queries answer without the labels, as they did until now.
    }
    {
        std::lock_guard lock(m_mutex);
        m_done.store(true, std::memory_order_release);
    }
    m_finished.notify_all();
}

} // namespace memscope::app
