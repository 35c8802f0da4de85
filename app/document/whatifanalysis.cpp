// WhatIfAnalysis: what-if jobs on the thread pool. See whatifanalysis.h.
#include "document/whatifanalysis.h"

#include "document/session.h"

#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrentRun>

namespace memscope::app {

struct WhatIfAnalysis::Shared {
    std::shared_ptr<const Document> document;
    std::mutex mutex; // guards job
    std::shared_ptr<const RecoveredJob> job; // recovered by the first job that needs it

    std::shared_ptr<const RecoveredJob> recovered()
    {
        std::lock_guard lock(mutex);
        if (!job) {
            AllocatorReplayOptions options;
            options.curves = true;
            job = std::make_shared<const RecoveredJob>(recoverJob(*document->snapshot, options));
        }
        return job;
    }

    static WhatIfOptions optionsOf(const QStringList& sets)
    {
        WhatIfOptions options;
        options.curves = true;
        for (const QString& s : sets)
            options.sets.push_back(s.trimmed().toStdString());
        return options;
    }
};

WhatIfAnalysis::WhatIfAnalysis(std::shared_ptr<const Document> document, QObject* parent)
    : QObject(parent)
    , m_shared(std::make_shared<Shared>())
{
    m_shared->document = std::move(document);
}

WhatIfAnalysis::~WhatIfAnalysis() = default;

void WhatIfAnalysis::run(const QStringList& sets)
{
    m_sets = sets;
    const uint64_t generation = ++m_runGeneration;
    auto* watcher = new QFutureWatcher<std::shared_ptr<const WhatIfResult>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
        watcher->deleteLater();
        if (generation == m_runGeneration)
            Q_EMIT resultReady(watcher->result());
    });
    watcher->setFuture(QtConcurrent::run([shared = m_shared, options = Shared::optionsOf(sets)] {
        return std::make_shared<const WhatIfResult>(whatIf(*shared->recovered(), options));
    }));
}

void WhatIfAnalysis::stateAt(int device, int64_t entry)
{
    const uint64_t generation = ++m_stateGeneration;
    using Answer = std::pair<std::shared_ptr<const std::vector<WhatIfSegment>>, QString>;
    auto* watcher = new QFutureWatcher<Answer>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation, device, entry] {
        watcher->deleteLater();
        if (generation == m_stateGeneration)
            Q_EMIT stateReady(device, entry, watcher->result().first, watcher->result().second);
    });
    watcher->setFuture(QtConcurrent::run([shared = m_shared, options = Shared::optionsOf(m_sets), device, entry] {
        std::string error;
        auto segments = std::make_shared<std::vector<WhatIfSegment>>();
        if (entry >= 0)
            *segments = whatIfStateAt(*shared->recovered(), options, device, size_t(entry), &error);
        return Answer(std::move(segments), QString::fromStdString(error));
    }));
}

bool WhatIfAnalysis::offer(const WhatIfResult& result, const QString& sets, report::Insight& out)
{
    if (!result.ok)
        return false;
    for (const WhatIfDevice& d : result.devices) {
        const size_t before = d.original.ooms.size(), after = d.replayed.ooms.size();
        const bool fewerOoms = after < before;
        const bool lower = d.replayed.peakReserved * 20 <= d.original.peakReserved * 19;
        if (!fewerOoms && !lower)
            continue;
        out = report::Insight {};
        out.kind = report::InsightKind::WhatIf;
        out.device = d.device;
        out.bytes = model::ByteCount(d.original.peakReserved) - model::ByteCount(d.replayed.peakReserved);
        out.count = int64_t(before) - int64_t(after);
        // The first OOM that would not happen is certain (the requests up to it are the job's either way); what
        // follows it is the recorded job's, which went on after that OOM.
        QString title;
        if (fewerOoms && after == 0)
            title = before == 1 ? QObject::tr("With %1 the OOM would not have happened").arg(sets)
                                : QObject::tr("With %1 none of the %2 OOMs would have happened").arg(sets).arg(before);
        else if (fewerOoms)
            title = QObject::tr("With %1 the first OOM would not have happened (%2 of the %3 replayed would)")
                        .arg(sets)
                        .arg(after)
                        .arg(before);
        else
            title = QObject::tr("With %1 the peak reservation would be lower").arg(sets);
        if (d.replayed.peakReserved * 100 < d.original.peakReserved * 99
            || d.replayed.peakReserved * 100 > d.original.peakReserved * 101)
            title += QObject::tr(": peak reserved %1 instead of %2")
                         .arg(Session::formatBytes(int64_t(d.replayed.peakReserved)),
                              Session::formatBytes(int64_t(d.original.peakReserved)));
        else
            title += QObject::tr(", under the same peak reservation (%1)")
                         .arg(Session::formatBytes(int64_t(d.original.peakReserved)));
        out.title = title.toStdString();
        out.detail = QObject::tr("memscope replayed the job's requests under PYTORCH_CUDA_ALLOC_CONF=%1 "
                                 "(whatif/, `memscope-cli whatif FILE --set %2`); the What-if panel shows both "
                                 "reservations over time. The requests are the job's as recorded: a job that reacts "
                                 "to an OOM would have asked differently after one.")
                         .arg(QString::fromStdString(result.newSettings), sets)
                         .toStdString();
        return true;
    }
    return false;
}

void WhatIfAnalysis::suggest()
{
    using Answer = std::pair<std::vector<report::Insight>, QString>;
    auto* watcher = new QFutureWatcher<Answer>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher] {
        watcher->deleteLater();
        Q_EMIT suggestionReady(watcher->result().first, watcher->result().second);
    });
    watcher->setFuture(QtConcurrent::run([shared = m_shared] {
        std::vector<report::Insight> best;
        QString bestSettings;
        const std::shared_ptr<const RecoveredJob> job = shared->recovered();
        bool anyOom = false;
        for (const RecoveredDevice& d : job->devices)
            anyOom = anyOom || !d.original.ooms.empty();
        // Ranked by OOMs removed, then by the peak reservation saved.
        auto better = [](const report::Insight& a, const report::Insight& b) {
            return a.count != b.count ? a.count > b.count : a.bytes > b.bytes;
        };
        for (const char* setting :
             { "expandable_segments:True", "max_split_size_mb:128", "garbage_collection_threshold:0.8" }) {
            WhatIfOptions options;
            options.sets = { setting };
            const WhatIfResult r = whatIf(*job, options);
            report::Insight it;
            if (!offer(r, QString::fromLatin1(setting), it))
                continue;
            if (anyOom && it.count <= 0)
                continue; // where the job failed, the answer is what avoids the failure
            if (best.empty() || better(it, best.front())) {
                best = { it };
                bestSettings = QString::fromLatin1(setting);
            }
        }
        return Answer(std::move(best), bestSettings);
    }));
}

} // namespace memscope::app
