// Session: shared per-document view state. See session.h.
#include "document/session.h"

#include "model/consistency.h"
#include "model/framefilter.h"
#include "model/landmarks.h"
#include "report/memoryviz.h"
#include "style/displaytext.h"

#include <QDateTime>
#include <QStringBuilder>

#include <algorithm>
#include <atomic>

namespace memscope::app {

using namespace memscope::model;

std::shared_ptr<const Document> makeDocument(QString path, std::shared_ptr<const Snapshot> snapshot,
                                             const std::function<bool(double done)>& progress)
{
    auto doc = std::make_shared<Document>();
    doc->path = std::move(path);
    const int devices = std::max(1, snapshot->deviceCount());
    doc->replays.reserve(size_t(devices));
    // Each device's share of the progress is its share of the entries.
    uint64_t total = 0, before = 0;
    for (const auto& trace : snapshot->deviceTraces)
        total += trace.size();
    const std::vector<int> shown = devicesWithData(*snapshot, devices);
    const int first = shown.empty() ? 0 : shown.front();
    for (int d = 0; d < devices; ++d) {
        const uint64_t entries
            = size_t(d) < snapshot->deviceTraces.size() ? snapshot->deviceTraces[size_t(d)].size() : 0;
        ReplayOptions options;
        options.deferLabels = true; // the labels come after the document (ReplayLabelling, below)
        if (progress && total > 0)
            options.progress
                = [&](double done) { return progress((double(before) + done * double(entries)) / double(total)); };
        if (d == first) {
            // The timeline's items of the device shown first, built beside its replay's forward pass.
            options.beside = [&doc, d](std::span<const Allocation> allocations, std::span<const SegmentPiece> pieces,
                                       int64_t entryCount, const std::atomic<bool>& stop) {
                auto allocs = std::make_shared<const TimelineItems>(
                    TimelineItems::fromAllocations(allocations, entryCount, &stop, true));
                if (stop)
                    return;
                doc->firstItems.pieces
                    = std::make_shared<const TimelineItems>(TimelineItems::fromSegments(pieces, entryCount));
                doc->firstItems.allocs = std::move(allocs);
                doc->firstItems.device = d;
            };
        }
        doc->replays.push_back(Replay::build(*snapshot, d, options));
        if (doc->replays.back().stopped())
            return nullptr;
        before += entries;
    }
    doc->oomEntries.reserve(snapshot->deviceTraces.size());
    for (const Trace& trace : snapshot->deviceTraces)
        doc->oomEntries.push_back(oomEntries(trace));
    doc->warnings = snapshot->warnings;
    WarningCollector replayIssues;
    addReplayWarnings(*snapshot, doc->replays, replayIssues);
    replayIssues.appendTo(doc->warnings);
    doc->snapshot = std::move(snapshot);
    doc->labelling = std::make_unique<ReplayLabelling>(doc->replays, *doc->snapshot, ReplayLabelling::Start::Later);
    return doc;
}

Session::Session(std::shared_ptr<const Document> document, QObject* parent)
    : QObject(parent)
    , m_document(std::move(document))
    , m_growing(m_document->isLive())
{
    const auto devs = devices();
    m_device = devs.empty() ? 0 : devs.front();
    m_cursor = entryCount();
    m_knownCount = m_cursor;
    if (!m_document->labelsDone()) {
        // The labelling thread knows no Session (a document may have several, made and gone at any time): asked
        // every 100 ms, a fraction of a millisecond each, for the second or so it takes.
        m_labelPoll = new QTimer(this);
        m_labelPoll->setInterval(100);
        connect(m_labelPoll, &QTimer::timeout, this, [this] {
            if (m_document->labelsDone())
                waitForLabels();
        });
        m_labelPoll->start();
        // A window starts them once it has shown the document (DocumentWindow); other views of it, or a window
        // that never gets there, get them this long after.
        QTimer::singleShot(LabelsAtTheLatestMs, this, &Session::startLabels);
    }
}

void Session::startLabels()
{
    if (m_document->labelling)
        m_document->labelling->start();
}

void Session::waitForLabels()
{
    if (!m_labelPoll)
        return;
    if (m_document->labelling)
        m_document->labelling->wait();
    delete std::exchange(m_labelPoll, nullptr);
    m_stateValid = false; // its inactive blocks now carry their requests
    Q_EMIT labelled();
}

void Session::documentGrew()
{
    const int64_t previous = m_knownCount;
    const bool following = m_cursor >= previous;
    m_knownCount = entryCount();
    m_stateValid = false; // the state at the cursor is the same, but its allocations' lifetimes may have ended since
    Q_EMIT grown(previous);
    if (following && m_cursor != m_knownCount) {
        m_cursor = m_knownCount;
        Q_EMIT cursorChanged(m_cursor);
    }
}

std::vector<int> devicesWithData(const Snapshot& s, int deviceCount)
{
    std::vector<int> out;
    for (int d = 0; d < deviceCount; ++d) {
        const bool hasTrace = size_t(d) < s.deviceTraces.size() && !s.deviceTraces[size_t(d)].empty();
        const bool hasSegment
            = std::any_of(s.segments.begin(), s.segments.end(), [d](const Segment& seg) { return seg.device == d; });
        if (hasTrace || hasSegment)
            out.push_back(d);
    }
    return out;
}

std::vector<int> Session::devices() const { return devicesWithData(snapshot(), int(m_document->replays.size())); }

void Session::setDevice(int device)
{
    if (device == m_device || device < 0 || size_t(device) >= m_document->replays.size())
        return;
    m_device = device;
    m_stateValid = false;
    m_annotationTracker.reset();
    m_selection = m_hovered = NoAllocation;
    m_cursor = entryCount();
    m_knownCount = m_cursor;
    Q_EMIT deviceChanged(device);
    Q_EMIT selectionChanged(m_selection);
    Q_EMIT hoveredChanged(m_hovered);
    Q_EMIT cursorChanged(m_cursor);
}

const Trace& Session::entries() const
{
    static const Trace none;
    const auto& traces = snapshot().deviceTraces;
    return size_t(m_device) < traces.size() ? traces[size_t(m_device)] : none;
}

void Session::setCursor(int64_t index)
{
    index = std::clamp<int64_t>(index, 0, entryCount());
    if (index == m_cursor)
        return;
    m_cursor = index;
    m_stateValid = false;
    Q_EMIT cursorChanged(index);
}

const ReplayState& Session::state() const
{
    if (!m_stateValid) {
        replay().stateAt(m_cursor, m_state);
        m_stateValid = true;
    }
    return m_state;
}

int64_t Session::timeUsAt(int64_t index) const
{
    const auto& e = entries();
    if (e.empty())
        return 0;
    return e[size_t(std::clamp<int64_t>(index - 1, 0, int64_t(e.size()) - 1))].timeUs;
}

int64_t Session::indexAtTimeUs(int64_t timeUs) const
{
    return std::min<int64_t>(model::stateIndexAtTime(entries(), timeUs), entryCount());
}

void Session::setGrowing(bool growing)
{
    if (growing == m_growing)
        return;
    m_growing = growing;
    Q_EMIT growingChanged(growing);
}

void Session::setTimeAxis(TimeAxis axis)
{
    if (axis == m_timeAxis)
        return;
    m_timeAxis = axis;
    Q_EMIT timeAxisChanged();
}

void Session::setColorMode(ColorMode mode)
{
    if (mode == m_colorMode)
        return;
    m_colorMode = mode;
    Q_EMIT colorModeChanged();
}

void Session::setSelection(AllocationId id)
{
    if (id == m_selection)
        return;
    m_selection = id;
    Q_EMIT selectionChanged(id);
}

void Session::setHovered(AllocationId id)
{
    if (id == m_hovered)
        return;
    m_hovered = id;
    Q_EMIT hoveredChanged(id);
}

void Session::setStreamVisible(int64_t stream, bool visible)
{
    if (visible == isStreamVisible(stream))
        return;
    if (visible)
        m_hiddenStreams.erase(stream);
    else
        m_hiddenStreams.insert(stream);
    Q_EMIT filterChanged();
}

void Session::setPoolVisible(std::pair<int64_t, int64_t> pool, bool visible)
{
    if (visible == isPoolVisible(pool))
        return;
    if (visible)
        m_hiddenPools.erase(pool);
    else
        m_hiddenPools.insert(pool);
    Q_EMIT filterChanged();
}

std::vector<int64_t> Session::streams() const
{
    std::vector<int64_t> out;
    for (const SegmentPiece& p : replay().segmentPieces())
        if (std::find(out.begin(), out.end(), p.stream) == out.end())
            out.push_back(p.stream);
    return out;
}

std::vector<std::pair<int64_t, int64_t>> Session::pools() const
{
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const SegmentPiece& p : replay().segmentPieces())
        if (std::find(out.begin(), out.end(), p.poolId) == out.end())
            out.push_back(p.poolId);
    std::sort(out.begin(), out.end());
    return out;
}

void Session::setFrameFilter(bool on)
{
    if (on == m_frameFilter)
        return;
    m_frameFilter = on;
    Q_EMIT filterChanged();
}

std::shared_ptr<const std::vector<AnnotationSpan>> Session::annotationSpans() const
{
    if (!m_annotationTracker) {
        m_annotationTracker = std::make_unique<model::AnnotationTracker>(m_device);
        m_annotationSpans = std::make_shared<std::vector<AnnotationSpan>>();
        m_spanOfRange.clear();
    }
    const model::AnnotationTracker::Change change = m_annotationTracker->update(snapshot(), entryCount());
    const std::vector<model::AnnotationRange>& ranges = m_annotationTracker->ranges();
    if (!change.any(ranges.size()))
        return m_annotationSpans;
    // The spans of the ranges before change.from stay (a view may still hold them: then they are copied).
    size_t keep = 0;
    for (size_t i = change.from; i-- > 0;)
        if (m_spanOfRange[i] >= 0) {
            keep = size_t(m_spanOfRange[i]) + 1;
            break;
        }
    if (m_annotationSpans.use_count() > 1)
        m_annotationSpans = std::make_shared<std::vector<AnnotationSpan>>(
            m_annotationSpans->begin(), m_annotationSpans->begin() + std::ptrdiff_t(keep));
    else
        m_annotationSpans->resize(keep);
    std::vector<AnnotationSpan>& spans = *m_annotationSpans;
    for (size_t i : change.changed)
        if (m_spanOfRange[i] >= 0) {
            AnnotationSpan& span = spans[size_t(m_spanOfRange[i])];
            span.begin = ranges[i].begin;
            span.end = ranges[i].end;
            span.endUs = ranges[i].endUs;
        }
    m_spanOfRange.resize(change.from);
    for (size_t i = change.from; i < ranges.size(); ++i) {
        const model::AnnotationRange& r = ranges[i];
        if (!m_compilerAnnotations && model::isCompilerAnnotation(r.name)) {
            m_spanOfRange.push_back(-1);
            continue;
        }
        m_spanOfRange.push_back(int32_t(spans.size()));
        AnnotationSpan span;
        span.name = displayText(r.name);
        span.begin = r.begin; // at most entryCount(): the tracker's limit
        span.end = r.end;
        span.beginUs = r.beginUs;
        span.endUs = r.endUs;
        spans.push_back(std::move(span));
    }
    return m_annotationSpans;
}

void Session::setCompilerAnnotationsShown(bool shown)
{
    if (shown == m_compilerAnnotations)
        return;
    m_compilerAnnotations = shown;
    m_annotationTracker.reset();
    Q_EMIT filterChanged();
}

std::vector<int64_t> Session::oomIndices(int64_t fromEntry) const
{
    // A file's document found them at the load (Document::oomEntries); a live one's trace grows: read it.
    const auto& known = m_document->oomEntries;
    const bool kept = !m_document->isLive() && size_t(m_device) < known.size();
    const std::vector<int64_t> read
        = kept ? std::vector<int64_t>() : model::oomEntries(entries(), size_t(std::max<int64_t>(fromEntry, 0)));
    std::vector<int64_t> out;
    for (int64_t entry : kept ? known[size_t(m_device)] : read)
        if (entry >= fromEntry)
            out.push_back(entry + 1);
    return out;
}

QString Session::allocationName(AllocationId id) const
{
    if (id == NoAllocation || raw(id) >= replay().allocations().size())
        return {};
    const Allocation& a = replay().allocation(id);
    // MemoryViz.js formatAddr: 'b' + hex address + '_' + version.
    return QLatin1Char('b') + QString::number(quint64(a.address), 16) + QLatin1Char('_') + QString::number(a.version);
}

QString Session::formatBytes(int64_t bytes)
{
    const ScaledBytes b = scaleBytes(bytes);
    if (b.whole)
        return QString::number(bytes) + QLatin1String(" B");
    return QString::number(b.value, 'f', b.value < 10 ? 2 : 1) + QLatin1Char(' ') + QLatin1String(b.unit);
}

QString Session::stackText(StackId stack, bool shortPaths) const
{
    const Snapshot& s = snapshot();
    QString out;
    // With the frame filter on: the site first (model/framefilter.h), then the frames of the user's code and model
    // libraries; the internal ones (native, the interpreter's, PyTorch's own Python) are counted, not listed.
    const int site = m_frameFilter ? model::siteIndex(s, stack) : -1;
    size_t hidden = 0;
    if (site >= 0) {
        std::string line = report::displayFrame(s, s.frame(s.stackBegin(stack)[site]));
        if (const int what = model::whatIndex(s, stack, site); what >= 0)
            line += " via " + report::displayFrame(s, s.frame(s.stackBegin(stack)[what]));
        out += tr("at ") + displayText(line) + QLatin1Char('\n');
    }
    for (const FrameId* f = s.stackBegin(stack); f != s.stackEnd(stack); ++f) {
        const Frame& fr = s.frame(*f);
        if (m_frameFilter
            && (!model::keepFrame(s.str(fr.name), s.str(fr.filename))
                || model::isInternalFrame(s.str(fr.name), s.str(fr.filename)))) {
            ++hidden;
            continue;
        }
        std::string line = report::formatFrame(s, fr, true);
        if (shortPaths) {
            for (std::string_view marker :
                 { "site-packages/", "dist-packages/", "site-packages\\", "dist-packages\\" }) {
                const size_t at = line.rfind(marker);
                const size_t colon = line.find(':');
                if (at != std::string::npos && at < colon) {
                    line.erase(0, at + marker.size());
                    break;
                }
            }
        }
        out += displayText(line) + QLatin1Char('\n');
    }
    if (hidden > 0 && !out.isEmpty())
        out += tr("(%n internal frame(s) hidden)\n", nullptr, int(hidden));
    if (out.isEmpty())
        out = s.stackSize(stack) == 0 ? tr("(no stack recorded)\n") : tr("(every frame hidden by the frame filter)\n");
    return out;
}

QString Session::describeAllocation(AllocationId id, bool shortPaths) const
{
    if (id == NoAllocation || raw(id) >= replay().allocations().size())
        return {};
    const Allocation& a = replay().allocation(id);
    const Snapshot& s = snapshot();
    const auto& e = entries();
    auto str = [&](StringId sid) { return displayText(s.str(sid)); };
    QString text = allocationName(id) + QLatin1String("  ") + formatBytes(a.requestedSize) + tr(" requested, ")
        + formatBytes(a.size) + (a.sizeIsExact ? tr(" block") : tr(" block (estimated)")) + QLatin1Char('\n');
    text += tr("address 0x%1, version %2\n").arg(QString::number(quint64(a.address), 16)).arg(a.version);
    if (a.allocIndex >= 0 && size_t(a.allocIndex) < e.size()) {
        const TraceEntry& alloc = e[size_t(a.allocIndex)];
        const EntryForm& form = s.form(alloc);
        const int streamNumber = s.streamNumber(form.stream);
        text += tr("stream %1 (0x%2)\n").arg(streamNumber).arg(QString::number(quint64(form.stream), 16));
        text += tr("allocated at entry %1, %2\n")
                    .arg(a.allocIndex)
                    .arg(QDateTime::fromMSecsSinceEpoch(alloc.timeUs / 1000, Qt::UTC)
                             .toString(QStringLiteral("yyyy-MM-dd hh:mm:ss.zzz")));
        if (form.compileContext != EmptyString && s.str(form.compileContext) != "N/A") // PyTorch's "none"
            text += tr("compile context: %1\n").arg(str(form.compileContext));
        if (form.userMetadata != EmptyString)
            text += tr("user metadata: %1\n").arg(str(form.userMetadata));
    } else {
        text += tr("allocated before the trace began\n");
    }
    if (a.freeCompletedIndex < entryCount())
        text += tr("freed at entry %1\n").arg(a.freeCompletedIndex);
    else
        text += tr("alive at the end of the trace\n");
    // The pool of the segment holding it, at the cursor (trace entries carry no pool).
    for (const ReplaySegment& seg : state().segments) {
        if (a.address >= seg.address && a.address < seg.address + seg.totalSize) {
            text += tr("pool (%1, %2)%3\n")
                        .arg(seg.poolId.first)
                        .arg(seg.poolId.second)
                        .arg(seg.isExpandable ? tr(", expandable segment") : QString());
            break;
        }
    }
    text += QLatin1Char('\n') + stackText(a.stack, shortPaths);
    // Made in backward for an autograd node whose forward traceback PyTorch kept (anomaly mode, forward_frames):
    // where that node came from, as MemoryViz.js lists it after the stack.
    if (a.allocIndex >= 0 && size_t(a.allocIndex) < e.size()) {
        const StackId forward = s.forwardStack(e[size_t(a.allocIndex)]);
        if (forward != EmptyStack && s.stackSize(forward) > 0)
            text += tr("\nthe backward of (its forward pass):\n") + stackText(forward, shortPaths);
    }
    return text;
}

model::StringId Session::userMetadata(AllocationId id) const
{
    if (id == NoAllocation || raw(id) >= replay().allocations().size())
        return EmptyString;
    const Allocation& a = replay().allocation(id);
    const int64_t entry = replay().firstEntry() + a.allocIndex;
    const auto& e = entries();
    if (a.allocIndex < 0 || entry < 0 || size_t(entry) >= e.size())
        return EmptyString;
    return snapshot().form(e[size_t(entry)]).userMetadata;
}

model::StackId Session::treeStack(AllocationId id) const
{
    if (id == NoAllocation || raw(id) >= replay().allocations().size())
        return EmptyStack;
    const Allocation& a = replay().allocation(id);
    const Snapshot& s = snapshot();
    if (s.stackSize(a.stack) > 0 || s.forwardStacks.empty())
        return a.stack;
    const auto& e = entries();
    if (a.allocIndex < 0 || size_t(a.allocIndex) >= e.size())
        return a.stack;
    const StackId forward = s.forwardStack(e[size_t(a.allocIndex)]);
    return forward != EmptyStack && s.stackSize(forward) > 0 ? forward : a.stack;
}

bool Session::hasUserMetadata() const
{
    const Snapshot& s = snapshot();
    // Entries share their forms (stream, compile context, metadata): a few of them to look at, not every entry.
    for (size_t f = 0; f < s.entryForms.size(); ++f)
        if (s.entryForms.get(model::FormId { uint32_t(f) }).userMetadata != EmptyString)
            return true;
    return false;
}

QString Session::aliveBeforeTheTrace() const
{
    if (entryCount() == 0)
        return {};
    const ReplayState first = replay().stateAt(0);
    int64_t blocks = 0, bytes = 0;
    for (const ReplayBlock& b : first.blocks)
        if (b.state != model::BlockState::Inactive) {
            ++blocks;
            bytes += b.size;
        }
    if (blocks == 0)
        return {};
    QString why = tr("recording began later");
    // PyTorch's history is a ring of max_entries events; it says when it overwrote older ones (memory_snapshot.cpp
    // writes allocator_settings.trace_alloc_overflowed and trace_alloc_max_entries).
    const Snapshot& s = snapshot();
    const model::Value* overflowed = s.allocatorSettings ? s.allocatorSettings->find("trace_alloc_overflowed") : nullptr;
    if (overflowed && (overflowed->kind == model::Value::Kind::Bool ? overflowed->boolean : overflowed->integer != 0)) {
        const model::Value* max = s.allocatorSettings->find("trace_alloc_max_entries");
        why = max && max->kind == model::Value::Kind::Int
            ? tr("PyTorch's history kept its last %1 events only").arg(max->integer)
            : tr("PyTorch's history overwrote its older events");
    }
    return tr("%1 block(s) (%2) alive before the trace: %3").arg(blocks).arg(formatBytes(bytes)).arg(why);
}

QString Session::describeOomAtCursor(bool shortPaths) const
{
    const int64_t entry = cursor() - 1 + replay().firstEntry();
    const auto& e = entries();
    if (cursor() < 1 || entry < 0 || size_t(entry) >= e.size() || e[size_t(entry)].action != model::Action::Oom)
        return {};
    const TraceEntry& oom = e[size_t(entry)];
    const Snapshot& s = snapshot();
    const EntryForm& form = s.form(oom);
    // PyTorch's OOM entry: the request's size and stream, and in `addr` the device's free memory then
    // (CUDACachingAllocator.cpp, malloc: record_trace(TraceEntry::OOM, device_free, ...)).
    QString text = tr("Out of memory: %1 requested (%2 B)\n").arg(formatBytes(oom.size), QString::number(oom.size));
    text += tr("stream %1 (0x%2)\n").arg(s.streamNumber(form.stream)).arg(QString::number(quint64(form.stream), 16));
    text += tr("free on the device then: %1\n").arg(formatBytes(ByteCount(oom.addr)));
    text += tr("entry %1, %2\n")
                .arg(entry)
                .arg(QDateTime::fromMSecsSinceEpoch(oom.timeUs / 1000, Qt::UTC)
                         .toString(QStringLiteral("yyyy-MM-dd hh:mm:ss.zzz")));
    if (form.compileContext != EmptyString && s.str(form.compileContext) != "N/A") // PyTorch's "none"
        text += tr("compile context: %1\n").arg(displayText(s.str(form.compileContext)));
    if (form.userMetadata != EmptyString)
        text += tr("user metadata: %1\n").arg(displayText(s.str(form.userMetadata)));
    text += tr("The request failed: no block was made. Click a block to see what held the memory.\n");
    return text + QLatin1Char('\n') + stackText(oom.stack, shortPaths);
}

} // namespace memscope::app
