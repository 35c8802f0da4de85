// WhatIfAnalysis: the what-if of one file's document (whatif/whatif.h) for the app, every job on the thread pool.
// The job's calls are recovered once (the exact replay of allocator-replay, which also says when the trace cannot be
// replayed); then run() replays them under the settings the user picked, stateAt() gives the replayed segments at a
// moment, and suggest() tries the settings that most often help and offers the best as an insight. Each request's
// answer comes back as a signal on the GUI thread; a newer request of the same kind makes an older answer stale
// (dropped). Live documents have no what-if (their trace is not complete). No QtWidgets.
#pragma once

#include "report/insights.h"
#include "whatif/whatif.h"

#include <QObject>
#include <QStringList>

#include <memory>
#include <mutex>
#include <vector>

namespace memscope::app {

struct Document;

class WhatIfAnalysis : public QObject {
    Q_OBJECT
public:
    explicit WhatIfAnalysis(std::shared_ptr<const Document> document, QObject* parent = nullptr);
    ~WhatIfAnalysis() override;

    // Replays the job under `sets` (PYTORCH_CUDA_ALLOC_CONF pairs over the file's own, "expandable_segments:True");
    // resultReady follows, with both runs' curves.
    void run(const QStringList& sets);
    // The segments of the last run()'s settings on `device` after trace entry `entry` (-1: before the first);
    // stateReady follows.
    void stateAt(int device, int64_t entry);
    // Tries expandable_segments:True, max_split_size_mb:128 and garbage_collection_threshold:0.8 (with the file's
    // cap); suggestionReady follows with the best one as an insight, when one removes an OOM or lowers the peak
    // reservation by a twentieth or more, else with none.
    void suggest();

    const QStringList& settings() const { return m_sets; }

    // The insight that offers `result` (a run of `sets`) when it helps (fewer OOMs, or a peak reservation lower by
    // a twentieth or more): its title names the setting and what changes. False when it does not help.
    static bool offer(const WhatIfResult& result, const QString& sets, report::Insight& out);

Q_SIGNALS:
    void resultReady(std::shared_ptr<const memscope::WhatIfResult> result);
    void stateReady(int device, qint64 entry, std::shared_ptr<const std::vector<memscope::WhatIfSegment>> segments,
                    QString error);
    // `settings`: the suggested setting ("" with no insight).
    void suggestionReady(std::vector<memscope::report::Insight> insights, QString settings);

private:
    struct Shared; // the document and the recovered calls, shared with the jobs (which may outlive this object)
    std::shared_ptr<Shared> m_shared;
    QStringList m_sets;
    uint64_t m_runGeneration = 0, m_stateGeneration = 0;
};

} // namespace memscope::app
