// EventListModel and its pure helpers (filtering, size parsing). See eventlistmodel.h.
// The model runs on the GUI thread; jobs run the pure functions on the thread pool over the immutable Document.
#include "itemmodels/eventlistmodel.h"

#include "model/addressmap.h"
#include "model/framefilter.h"
#include "style/displaytext.h"
#include "report/memoryviz.h"
#include "style/colors.h"

#include <QBrush>
#include <QFont>
#include <QFuture>
#include <QFutureWatcher>
#include <QStringBuilder>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <cmath>

namespace memscope::app {

using namespace memscope::model;

namespace {

    bool isSegmentAction(Action a)
    {
        return a == Action::SegmentAlloc || a == Action::SegmentFree || a == Action::SegmentMap
            || a == Action::SegmentUnmap;
    }

    void toLowerAscii(std::string& s)
    {
        for (char& c : s)
            if (c >= 'A' && c <= 'Z')
                c = char(c - 'A' + 'a');
    }

    const Trace& traceOf(const Snapshot& s, int device)
    {
        static const Trace none;
        return device >= 0 && size_t(device) < s.deviceTraces.size() ? s.deviceTraces[size_t(device)] : none;
    }

    QString fromUtf8(std::string_view v) { return displayText(v); }

} // namespace

bool EventFilter::passesEverything() const
{
    return actions == AllActions && minSize <= 0 && maxSize == std::numeric_limits<ByteCount>::max() && !stream
        && hiddenStreams.empty() && frameText.empty();
}

std::vector<uint8_t> stacksMatchingText(const Snapshot& snapshot, std::string_view text, bool caseSensitive)
{
    std::string needle(text);
    if (!caseSensitive)
        toLowerAscii(needle);
    // Stacks are interned and share frames: test each frame once, then each stack is a scan of flags.
    std::vector<uint8_t> frameMatches(snapshot.frames.size(), 0);
    std::string line;
    for (size_t f = 0; f < snapshot.frames.size(); ++f) {
        const Frame& fr = snapshot.frames[f];
        line.assign(snapshot.str(fr.filename));
        line += ':';
        line += fr.line.toString();
        line += ':';
        line += snapshot.str(fr.name);
        if (!caseSensitive)
            toLowerAscii(line);
        frameMatches[f] = line.find(needle) != std::string::npos;
    }
    std::vector<uint8_t> out(snapshot.stackCount(), 0);
    for (size_t k = 0; k < out.size(); ++k) {
        const StackId id { uint32_t(k) };
        out[k] = std::any_of(snapshot.stackBegin(id), snapshot.stackEnd(id),
                             [&](FrameId f) { return frameMatches[raw(f)] != 0; });
    }
    return out;
}

std::vector<uint32_t> filterEntries(const Snapshot& snapshot, int device, const EventFilter& filter, size_t begin)
{
    const Trace& trace = traceOf(snapshot, device);
    std::vector<uint8_t> stackMatches;
    const bool byText = !filter.frameText.empty();
    if (byText)
        stackMatches = stacksMatchingText(snapshot, filter.frameText, filter.caseSensitive);
    std::vector<uint32_t> out;
    for (size_t i = begin; i < trace.size(); ++i) {
        const TraceEntry& e = trace[i];
        if (!(filter.actions & EventFilter::bit(e.action)) || e.size < filter.minSize || e.size > filter.maxSize)
            continue;
        if (filter.stream && snapshot.stream(e) != *filter.stream)
            continue;
        if (!filter.hiddenStreams.empty()
            && std::binary_search(filter.hiddenStreams.begin(), filter.hiddenStreams.end(), snapshot.stream(e)))
            continue;
        if (byText && !stackMatches[raw(e.stack)])
            continue;
        out.push_back(uint32_t(i));
    }
    return out;
}

std::optional<ByteCount> parseByteSize(const QString& text)
{
    const QString t = text.trimmed();
    qsizetype split = 0;
    while (split < t.size() && (t[split].isDigit() || t[split] == QLatin1Char('.')))
        ++split;
    if (split == 0)
        return std::nullopt;
    bool ok = false;
    const double number = t.left(split).toDouble(&ok);
    if (!ok || !std::isfinite(number) || number < 0)
        return std::nullopt;
    const QString unit = t.mid(split).trimmed().toLower();
    double scale = 0;
    static const char* const prefixes = "kmgt";
    if (unit.isEmpty() || unit == QLatin1String("b")) {
        scale = 1;
    } else {
        const int power = int(std::string_view(prefixes).find(char(unit[0].toLatin1()))) + 1;
        const QString rest = unit.mid(1);
        if (power > 0
            && (rest.isEmpty() || rest == QLatin1String("b") || rest == QLatin1String("i")
                || rest == QLatin1String("ib")))
            scale = std::pow(1024.0, power);
    }
    if (scale == 0)
        return std::nullopt;
    const double bytes = std::round(number * scale);
    if (bytes > double(int64_t(1) << 62))
        return std::nullopt;
    return ByteCount(bytes);
}

QString eventAddressName(const TraceEntry& e, uint32_t version)
{
    // MemoryViz.js formatEvent / formatAddr: the prefix is 's' for actions starting with "segment", else 'b'.
    switch (e.action) {
    case Action::Oom:
        return QStringLiteral("OOM");
    case Action::Snapshot:
        return {};
    case Action::Unknown:
        return QLatin1Char('b') + QString::number(quint64(e.addr), 16);
    default:
        break;
    }
    const QLatin1Char prefix(isSegmentAction(e.action) ? 's' : 'b');
    return prefix + QString::number(quint64(e.addr), 16) + QLatin1Char('_') + QString::number(version);
}

// ---------------------------------------------------------------------------------------------------------------

struct EventListModel::JobResult {
    uint64_t id = 0;
    int device = 0;
    bool identity = true;
    std::vector<uint32_t> rows;
    std::vector<int64_t> streams; // the device's streams: filled for a job of a device other than the rows'
    size_t covered = 0; // the trace's length when the job read it
};

EventListModel::EventListModel(Session* session, QObject* parent)
    : QAbstractTableModel(parent)
    , m_session(session)
    , m_document(session->documentPtr())
    , m_frameFilter(session->frameFilter())
    , m_selection(session->selection())
{
    m_topFrame.assign(m_document->snapshot->stackCount(), -2);
    connect(session, &Session::deviceChanged, this, &EventListModel::onDeviceChanged);
    connect(session, &Session::grown, this, &EventListModel::onGrown);
    connect(session, &Session::filterChanged, this, &EventListModel::onSessionFilterChanged);
    connect(session, &Session::selectionChanged, this, [this](AllocationId id) {
        if (id == m_selection)
            return;
        m_selection = id;
        if (rowCount() > 0) // bold rows follow the selection; views repaint only what is visible
            Q_EMIT dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1), { Qt::FontRole });
    });
    onSessionFilterChanged(); // picks up the hidden streams and starts the first job
    if (m_pendingJob == 0)
        startJob();
}

EventListModel::~EventListModel() = default;

const Trace& EventListModel::rowEntries() const
{
    return traceOf(*m_document->snapshot, m_rowsDevice);
}

int64_t EventListModel::totalEntries() const { return int64_t(rowEntries().size()); }

int EventListModel::rowCount(const QModelIndex& parent) const
{
    if (parent.isValid() || m_rowsDevice < 0)
        return 0;
    return m_identity ? int(m_covered) : int(m_rows.size());
}

int EventListModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

int64_t EventListModel::entryOfRow(int row) const
{
    if (row < 0 || row >= rowCount())
        return -1;
    return m_identity ? row : int64_t(m_rows[size_t(row)]);
}

int EventListModel::rowOfEntry(int64_t entry) const
{
    if (entry < 0 || m_rowsDevice < 0)
        return -1;
    if (m_identity)
        return entry < int64_t(m_covered) ? int(entry) : -1;
    auto it = std::lower_bound(m_rows.begin(), m_rows.end(), uint64_t(entry),
                               [](uint32_t r, uint64_t e) { return uint64_t(r) < e; });
    return it != m_rows.end() && *it == entry ? int(it - m_rows.begin()) : -1;
}

int EventListModel::rowAtOrBefore(int64_t entry) const
{
    if (entry < 0 || rowCount() == 0)
        return -1;
    if (m_identity)
        return int(std::min<int64_t>(entry, rowCount() - 1));
    auto it = std::upper_bound(m_rows.begin(), m_rows.end(), uint64_t(entry),
                               [](uint64_t e, uint32_t r) { return e < uint64_t(r); });
    return int(it - m_rows.begin()) - 1;
}

int64_t EventListModel::stateAfterEntry(int64_t entry) const
{
    const Replay& replay = m_document->replays[size_t(m_rowsDevice >= 0 ? m_rowsDevice : m_session->device())];
    return std::clamp<int64_t>(entry - replay.firstEntry() + 1, 0, replay.entryCount());
}

int64_t EventListModel::entryBeforeState(int64_t state) const
{
    const Replay& replay = m_document->replays[size_t(m_rowsDevice >= 0 ? m_rowsDevice : m_session->device())];
    return state - 1 + replay.firstEntry();
}

void EventListModel::setFilter(EventFilter filter)
{
    filter.hiddenStreams = m_filter.hiddenStreams; // the Session's stream filter always applies
    m_filter = std::move(filter);
    startJob();
}

void EventListModel::onDeviceChanged()
{
    // The rows name entries of the old device: drop them now, the job brings the new ones.
    beginResetModel();
    m_rowsDevice = -1;
    m_identity = true;
    m_rows.clear();
    m_covered = 0;
    m_streams.clear();
    endResetModel();
    startJob();
}

void EventListModel::onSessionFilterChanged()
{
    if (m_session->frameFilter() != m_frameFilter) {
        m_frameFilter = m_session->frameFilter();
        std::fill(m_topFrame.begin(), m_topFrame.end(), -2);
        if (rowCount() > 0)
            Q_EMIT dataChanged(index(0, FrameColumn), index(rowCount() - 1, FrameColumn));
    }
    std::vector<int64_t> hidden;
    for (int64_t s : m_document->snapshot->streams)
        if (!m_session->isStreamVisible(s))
            hidden.push_back(s);
    std::sort(hidden.begin(), hidden.end());
    if (hidden != m_filter.hiddenStreams) {
        m_filter.hiddenStreams = std::move(hidden);
        startJob();
    }
}

void EventListModel::startJob()
{
    const uint64_t id = ++m_pendingJob;
    const int device = m_session->device();
    // The streams depend on the device only: found again only for another device.
    const bool newDevice = device != m_rowsDevice;
    QFuture<std::shared_ptr<JobResult>> future
        = QtConcurrent::run([doc = m_document, device, filter = m_filter, newDevice, id]() {
              const auto lock = doc->readLock(); // a live document does not grow meanwhile
              auto r = std::make_shared<JobResult>();
              r->id = id;
              r->device = device;
              const Snapshot& s = *doc->snapshot;
              if (newDevice) {
                  std::vector<uint8_t> seen(s.streams.size(), 0);
                  for (const TraceEntry& e : traceOf(s, device)) {
                      const int n = s.streamNumber(s.stream(e));
                      if (n >= 0)
                          seen[size_t(n)] = 1;
                  }
                  for (size_t k = 0; k < seen.size(); ++k)
                      if (seen[k])
                          r->streams.push_back(s.streams[k]);
              }
              r->covered = traceOf(s, device).size();
              r->identity = filter.passesEverything();
              if (!r->identity)
                  r->rows = filterEntries(s, device, filter);
              return r;
          });
    // A watcher delivers the result through the event loop, even when the job is already done by now, so that
    // rowsReady always comes after setFilter returns; it dies with the model, so a late job calls nothing.
    auto* watcher = new QFutureWatcher<std::shared_ptr<JobResult>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher] {
        watcher->deleteLater();
        applyResult(watcher->result());
    });
    watcher->setFuture(future);
    if (id == m_appliedJob + 1)
        Q_EMIT busyChanged(true);
}

void EventListModel::applyResult(std::shared_ptr<JobResult> r)
{
    if (r->id != m_pendingJob)
        return; // stale: a newer job was started after this one and will be applied instead
    const bool newDevice = r->device != m_rowsDevice;
    beginResetModel();
    m_rowsDevice = r->device;
    m_identity = r->identity;
    m_rows = std::move(r->rows);
    m_covered = r->covered;
    if (newDevice) {
        m_streams = std::move(r->streams);
        const auto& trace = rowEntries();
        m_firstTimeUs = trace.empty() ? 0 : trace.front().timeUs;
    }
    endResetModel();
    m_appliedJob = r->id;
    extendRows(); // a live document may have grown while the job ran
    Q_EMIT busyChanged(false);
    Q_EMIT rowsReady(rowCount());
}

void EventListModel::onGrown()
{
    m_topFrame.resize(m_document->snapshot->stackCount(), -2);
    if (!isBusy())
        extendRows(); // else the job's result is extended when it arrives
}

// Rows for the entries appended since the rows were made: all of them, or those that pass the filter.
void EventListModel::extendRows()
{
    if (m_rowsDevice < 0 || m_rowsDevice != m_session->device())
        return;
    const size_t total = rowEntries().size();
    if (total <= m_covered)
        return;
    if (m_covered == 0)
        m_firstTimeUs = rowEntries().front().timeUs; // times count from the first entry (none when the job ran)
    if (m_identity) {
        beginInsertRows({}, int(m_covered), int(total) - 1);
        m_covered = total;
        endInsertRows();
        return;
    }
    std::vector<uint32_t> more = filterEntries(*m_document->snapshot, m_rowsDevice, m_filter, m_covered);
    m_covered = total;
    if (more.empty())
        return;
    beginInsertRows({}, int(m_rows.size()), int(m_rows.size() + more.size()) - 1);
    m_rows.insert(m_rows.end(), more.begin(), more.end());
    endInsertRows();
}

QString EventListModel::topFrame(StackId stack) const
{
    const Snapshot& s = *m_document->snapshot;
    int32_t& cached = m_topFrame[raw(stack)];
    if (cached == -2) // with the filter on, the stack's site (model/framefilter.h); off, its innermost frame
        cached = s.stackSize(stack) == 0 ? -1 : m_frameFilter ? model::siteIndex(s, stack) : 0;
    if (cached < 0)
        return {};
    return fromUtf8(report::displayFrame(s, s.frame(s.stackBegin(stack)[cached])));
}

QString EventListModel::addressName(int64_t entry) const
{
    const TraceEntry& e = rowEntries()[size_t(entry)];
    return eventAddressName(e, e.version);
}

QVariant EventListModel::data(const QModelIndex& index, int role) const
{
    const int64_t entry = index.isValid() ? entryOfRow(index.row()) : -1;
    if (entry < 0 || index.column() >= ColumnCount)
        return {};
    const Snapshot& s = *m_document->snapshot;
    const TraceEntry& e = rowEntries()[size_t(entry)];
    auto allocation = [&] {
        const Replay& replay = m_document->replays[size_t(m_rowsDevice)];
        const int64_t r = entry - replay.firstEntry();
        return r < 0 ? NoAllocation : replay.allocationOfEntry(r);
    };
    auto actionText = [&] {
        const StringId name = s.form(e).actionName;
        return fromUtf8(e.action == Action::Unknown && name != EmptyString ? s.str(name) : actionName(e.action));
    };
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case IndexColumn:
            return QString::number(entry);
        case TimeColumn:
            return QString::number(double(e.timeUs - m_firstTimeUs) / 1e6, 'f', 3);
        case ActionColumn:
            return actionText();
        case AddressColumn:
            return addressName(entry);
        case SizeColumn:
            return Session::formatBytes(e.size);
        case StreamColumn:
            return QString::number(s.streamNumber(s.stream(e)));
        case MetadataColumn:
            return fromUtf8(s.str(s.form(e).userMetadata));
        case FrameColumn:
            return topFrame(e.stack);
        default:
            return {};
        }
    case Qt::ToolTipRole: {
        QString head = actionText() + QLatin1Char(' ') + addressName(entry) + QLatin1String("  ")
            + Session::formatBytes(e.size) + QLatin1String(" (") + QString::number(e.size) + QLatin1String(" B)");
        if (e.action == Action::Oom) // snapshot-format.md: oom entries carry device_free in place of addr
            head += tr(", CUDA had %1 free").arg(Session::formatBytes(e.addr));
        const int64_t stream = s.stream(e);
        head += tr("\nstream %1 (0x%2)\n").arg(s.streamNumber(stream)).arg(QString::number(quint64(stream), 16));
        if (const StringId metadata = s.form(e).userMetadata; metadata != EmptyString)
            head += tr("user metadata: %1\n").arg(fromUtf8(s.str(metadata)));
        head += QLatin1Char('\n');
        return QString(head + m_session->stackText(e.stack));
    }
    case Qt::TextAlignmentRole:
        switch (index.column()) {
        case IndexColumn:
        case TimeColumn:
        case SizeColumn:
        case StreamColumn:
            return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
        default:
            return {};
        }
    case Qt::FontRole:
        if (m_selection != NoAllocation && allocation() == m_selection) {
            QFont bold;
            bold.setBold(true);
            return bold;
        }
        return {};
    case Qt::ForegroundRole:
        if (e.action == Action::Oom)
            return QBrush(colors::oom());
        return {};
    case EntryIndexRole:
        return qlonglong(entry);
    case StateIndexRole:
        return qlonglong(stateAfterEntry(entry));
    case SizeRole:
        return qlonglong(e.size);
    case RawStreamRole:
        return qlonglong(s.stream(e));
    case ActionRole:
        return int(e.action);
    case AllocationRole:
        return uint(raw(allocation()));
    default:
        return {};
    }
}

QVariant EventListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || section < 0 || section >= ColumnCount)
        return {};
    if (role == Qt::DisplayRole) {
        switch (section) {
        case IndexColumn:
            return tr("#");
        case TimeColumn:
            return tr("Time (s)");
        case ActionColumn:
            return tr("Action");
        case AddressColumn:
            return tr("Address");
        case SizeColumn:
            return tr("Size");
        case StreamColumn:
            return tr("Stream");
        case MetadataColumn:
            return tr("User metadata");
        case FrameColumn:
            return tr("Top frame");
        default:
            return {};
        }
    }
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case IndexColumn:
            return tr("Index of the entry in the device's trace");
        case TimeColumn:
            return tr("Seconds since the device's first trace entry");
        case AddressColumn:
            return tr("PyTorch's viewer name: b<address>_<version> for blocks, s<...> for segments");
        case SizeColumn:
            return tr("Requested bytes (segment bytes for segment actions)");
        case StreamColumn:
            return tr("Stream number, in order of first appearance");
        case MetadataColumn:
            return tr("What the job set with torch.cuda.memory._set_memory_metadata when the entry was made");
        case FrameColumn:
            return tr("Innermost frame kept by the frame filter (file:line:function)");
        default:
            return {};
        }
    }
    if (role == Qt::TextAlignmentRole)
        return QVariant::fromValue(Qt::Alignment(Qt::AlignLeft | Qt::AlignVCenter));
    return {};
}

} // namespace memscope::app
