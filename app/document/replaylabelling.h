// The last pass of a file's replays (model::Replay::buildLabels: the inactive labels and the largest-free series,
// about half of a replay's build), on a thread of its own, started once the window has shown the document (Session::
// startLabels), so that the window shows everything else that much sooner and its first picture does not share the
// two cores and the fresh memory with this (docs/speed.md). Any thread may ask whether it is done or wait for it.
#pragma once

#include "model/replay.h"
#include "model/snapshot.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace memscope::app {

class ReplayLabelling {
public:
    // Labels `replays`, in order, from `snapshot`: both must stay where they are, unchanged, until this object is
    // gone (a Document declares it after them, so it goes first). Starts now, or at start().
    enum class Start { Now, Later };
    ReplayLabelling(std::vector<model::Replay>& replays, const model::Snapshot& snapshot, Start when = Start::Now);
    void start(); // once; later calls do nothing
    // Stops the work at its next progress check (a few ms) and waits for the thread.
    ~ReplayLabelling();
    ReplayLabelling(const ReplayLabelling&) = delete;
    ReplayLabelling& operator=(const ReplayLabelling&) = delete;

    // Whether the thread has finished: every replay labelled, or one could not be (out of memory), which leaves
    // it unlabelled (its views do without the labels).
    bool isDone() const { return m_done.load(std::memory_order_acquire); }
    // Starts the work if it was not, and waits for it.
    void wait();

private:
    void run();

    std::vector<model::Replay>& m_replays;
    const model::Snapshot& m_snapshot;
    std::atomic<bool> m_stop { false };
    std::atomic<bool> m_done { false };
    std::mutex m_mutex; // guards m_thread's start; with m_finished: wait()
    std::condition_variable m_finished;
    std::thread m_thread;
};

} // namespace memscope::app
