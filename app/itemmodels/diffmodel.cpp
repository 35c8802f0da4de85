// DiffSession, DiffTree, DiffModel, DiffProxyModel: see diffmodel.h.
#include "itemmodels/diffmodel.h"

#include "itemmodels/calltreemodel.h"
#include "style/colors.h"

#include <QFileInfo>
#include <QGuiApplication>
#include <QLocale>
#include <QPalette>
#include <QRegularExpression>

#include <cmath>

namespace memscope::app {

using model::CallNode;
using model::CallNodeId;

// ---- DiffInput ----

int DiffInput::viewDevice() const
{
    if (device != model::AllDevices)
        return device;
    if (!document)
        return 0;
    // The only device with a trace is the one an index refers to (diff.h: DiffSide::index).
    for (size_t d = 0; d < document->replays.size(); ++d)
        if (document->replays[d].entryCount() > 0)
            return int(d);
    for (const model::Segment& s : document->snapshot->segments)
        return int(s.device);
    return 0;
}

int64_t DiffInput::resolvedIndex() const
{
    if (index != model::EndOfTrace || !document)
        return index;
    const size_t d = size_t(viewDevice());
    return d < document->replays.size() ? document->replays[d].entryCount() : 0;
}

QString diffInputLabel(const DiffInput& input)
{
    const QString file = input.document ? QFileInfo(input.document->path).fileName() : QStringLiteral("?");
    QString where = input.index == model::EndOfTrace ? QCoreApplication::translate("DiffSession", "end")
                                                     : QStringLiteral("@ ") + QLocale().toString(qlonglong(input.index));
    if (input.device != model::AllDevices)
        where += QCoreApplication::translate("DiffSession", ", device %1").arg(input.device);
    return file + QStringLiteral(" (") + where + QLatin1Char(')');
}

int countSteps(const DiffInput& input)
{
    if (!input.document)
        return 0;
    Session session(input.document);
    session.setDevice(input.viewDevice());
    static const QRegularExpression step(QStringLiteral("^step[ _]?\\d+$"), QRegularExpression::CaseInsensitiveOption);
    const int64_t limit = input.resolvedIndex();
    int n = 0;
    for (const AnnotationSpan& span : session.annotations())
        if (span.end > span.begin && span.end <= limit && step.match(span.name).hasMatch())
            ++n;
    return n;
}

// ---- DiffTree ----

DiffTree buildDiffTree(std::shared_ptr<const model::DiffResult> result, model::CallTreeDirection direction,
                       DiffWeight weight, double divA, double divB, bool hideInternal)
{
    divA = divA > 0 ? divA : 1;
    divB = divB > 0 ? divB : 1;
    const bool scaled = divA != 1 || divB != 1;
    // Per-step normalisation: each side's values divided by its step count, Δ recomputed from them.
    auto deltaBytes = [&](const model::DiffStackRow& row) {
        return scaled ? int64_t(std::llround(double(row.bytesB) / divB - double(row.bytesA) / divA)) : row.deltaBytes;
    };
    auto deltaCount = [&](const model::DiffStackRow& row) {
        return scaled ? int64_t(std::llround(double(row.countB) / divB - double(row.countA) / divA)) : row.deltaCount;
    };
    DiffTree out;
    out.result = result;
    model::CallTreeOptions options;
    options.direction = direction;
    // DiffResult::frames already holds filtered stacks (and whole stacks whose every frame is hidden); filtering
    // them again changes nothing but lets hideInternal apply.
    options.frameFilter = hideInternal;
    options.hideInternal = hideInternal;
    if (!result || !result->frames) {
        out.tree = std::make_shared<model::CallTree>();
    } else {
        std::vector<model::CallSample> samples;
        samples.reserve(result->byStack.size());
        for (size_t i = 0; i < result->byStack.size(); ++i) {
            const model::DiffStackRow& row = result->byStack[i];
            const int64_t db = deltaBytes(row), dc = deltaCount(row);
            if (weight == DiffWeight::Net)
                samples.push_back({ row.stack, db, dc, uint32_t(i) });
            else if (db != 0 || dc != 0)
                samples.push_back({ row.stack, std::abs(db), std::abs(dc), uint32_t(i) });
        }
        out.tree = std::make_shared<model::CallTree>(model::CallTree::build(*result->frames, samples, options));
    }
    const size_t n = out.tree->size();
    for (auto* v : { &out.bytesA, &out.bytesB, &out.countA, &out.countB, &out.growth, &out.shrink })
        v->assign(n, 0);
    if (!result || !result->frames)
        return out;
    // Every row charged to its node and that node's ancestors: O(rows × depth).
    for (const model::DiffStackRow& row : result->byStack) {
        const int64_t db = deltaBytes(row);
        if (weight == DiffWeight::Gross && db == 0 && deltaCount(row) == 0)
            continue;
        for (CallNodeId id = out.tree->find(*result->frames, row.stack); id != model::NoCallNode;
             id = out.tree->node(id).parent) {
            const size_t k = model::raw(id);
            out.bytesA[k] += row.bytesA;
            out.bytesB[k] += row.bytesB;
            out.countA[k] += row.countA;
            out.countB[k] += row.countB;
            (db > 0 ? out.growth[k] : out.shrink[k]) += db;
        }
    }
    return out;
}

// ---- DiffSession ----

namespace {
    model::DiffSide toSide(const DiffInput& input)
    {
        model::DiffSide side;
        side.snapshot = input.document ? input.document->snapshot : nullptr;
        side.device = input.device;
        side.index = input.index;
        side.name = diffInputLabel(input).toStdString();
        if (input.document && input.index != model::EndOfTrace) {
            const size_t d = size_t(input.viewDevice());
            if (d < input.document->replays.size() && input.document->replays[d].entryCount() > 0) {
                side.replay = &input.document->replays[d];
                // Session cursors count from the replay's first entry; DiffSide indices from the trace's.
                side.index = input.index + side.replay->firstEntry();
            }
        }
        return side;
    }
} // namespace

DiffSession::DiffSession(DiffInput a, DiffInput b, QObject* parent)
    : QObject(parent)
    , m_a(std::move(a))
    , m_b(std::move(b))
{
    m_stepsA = countSteps(m_a);
    m_stepsB = countSteps(m_b);
    recompute();
}

void DiffSession::recompute()
{
    m_result = std::make_shared<const model::DiffResult>(model::computeDiff(toSide(m_a), toSide(m_b)));
}

void DiffSession::swap()
{
    std::swap(m_a, m_b);
    std::swap(m_stepsA, m_stepsB);
    m_swapped = !m_swapped;
    recompute();
    Q_EMIT diffChanged();
}

void DiffSession::setPerStep(bool on)
{
    if (on == m_perStep)
        return;
    m_perStep = on;
    Q_EMIT normalisationChanged();
}

void DiffSession::setHideInternal(bool on)
{
    if (on == m_hideInternal)
        return;
    m_hideInternal = on;
    Q_EMIT hideInternalChanged();
}

void DiffSession::setFilter(DiffFilter filter)
{
    if (filter == m_filter)
        return;
    m_filter = filter;
    Q_EMIT filterChanged();
}

// ---- DiffModel ----

DiffModel::DiffModel(QObject* parent)
    : CallTreeItemModel(ColumnCount, parent)
    , m_tree(std::make_shared<DiffTree>(buildDiffTree(nullptr, model::CallTreeDirection::BottomUp)))
{
    setCallTree(m_tree->tree);
}

void DiffModel::setTree(std::shared_ptr<const DiffTree> tree)
{
    beginResetModel();
    m_tree = tree ? std::move(tree) : std::make_shared<DiffTree>(buildDiffTree(nullptr, model::CallTreeDirection::BottomUp));
    setCallTree(m_tree->tree);
    m_labels.clear();
    m_fullTexts.clear();
    endResetModel();
}

void DiffModel::setDivisors(double divA, double divB)
{
    divA = divA > 0 ? divA : 1;
    divB = divB > 0 ? divB : 1;
    if (divA == m_divA && divB == m_divB)
        return;
    m_divA = divA;
    m_divB = divB;
    if (rowCount() > 0)
        Q_EMIT dataChanged(index(0, BytesAColumn), index(rowCount() - 1, DeltaCountColumn));
    // Descendants change too; layoutChanged makes proxies re-sort and re-filter every level.
    Q_EMIT layoutAboutToBeChanged();
    Q_EMIT layoutChanged();
}

double DiffModel::bytesA(CallNodeId node) const { return double(m_tree->bytesA[model::raw(node)]) / m_divA; }
double DiffModel::bytesB(CallNodeId node) const { return double(m_tree->bytesB[model::raw(node)]) / m_divB; }

double DiffModel::deltaBytes(CallNodeId node) const
{
    if (m_divA == 1 && m_divB == 1)
        return double(tree().node(node).bytes); // exact
    return bytesB(node) - bytesA(node);
}

double DiffModel::deltaCount(CallNodeId node) const
{
    if (m_divA == 1 && m_divB == 1)
        return double(tree().node(node).count);
    const size_t k = model::raw(node);
    return double(m_tree->countB[k]) / m_divB - double(m_tree->countA[k]) / m_divA;
}

QString DiffModel::formatSignedBytes(double bytes)
{
    const int64_t b = int64_t(std::llround(bytes));
    if (b == 0)
        return QStringLiteral("0 B");
    // U+2212 MINUS SIGN: as wide as "+", so columns of signed sizes line up.
    return (b > 0 ? QStringLiteral("+") : QString(QChar(0x2212))) + Session::formatBytes(std::abs(b));
}

namespace {
    QString formatCount(double count, bool fractional, bool sign)
    {
        QString text = fractional ? QLocale().toString(std::abs(count), 'f', 1)
                                  : QLocale().toString(qlonglong(std::llround(std::abs(count))));
        if (sign && std::llround(count * 10) != 0)
            text.prepend(count > 0 ? QStringLiteral("+") : QString(QChar(0x2212)));
        return text;
    }
} // namespace

QVariant DiffModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.model() != this)
        return {};
    const CallNodeId id = nodeOf(index);
    const CallNode& n = tree().node(id);
    const model::Snapshot& frames = *m_tree->result->frames;
    const bool fractional = m_divA != 1 || m_divB != 1;
    auto label = [&]() -> const QString& {
        if (m_labels.empty())
            m_labels.resize(frames.frames.size() + 3);
        const size_t k = model::isPseudoFrame(n.frame) ? frames.frames.size() + (UINT32_MAX - model::raw(n.frame))
                                                       : model::raw(n.frame);
        if (m_labels[k].isNull())
            m_labels[k] = frameDisplayLabel(frames, n.frame);
        return m_labels[k];
    };
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case FunctionColumn:
            return label();
        case BytesAColumn:
            return Session::formatBytes(int64_t(std::llround(bytesA(id))));
        case BytesBColumn:
            return Session::formatBytes(int64_t(std::llround(bytesB(id))));
        case DeltaBytesColumn:
            return formatSignedBytes(deltaBytes(id));
        case DeltaCountColumn:
            return formatCount(deltaCount(id), fractional, true);
        }
        return {};
    case SortRole:
        switch (index.column()) {
        case FunctionColumn:
            return label();
        case BytesAColumn:
            return bytesA(id);
        case BytesBColumn:
            return bytesB(id);
        case DeltaBytesColumn:
            return std::abs(deltaBytes(id));
        case DeltaCountColumn:
            return std::abs(deltaCount(id));
        }
        return {};
    case FilterRole:
        return frameFullText(frames, n.frame);
    case NodeRole:
        return uint(model::raw(id));
    case DeltaBytesRole:
        return deltaBytes(id);
    case DeltaCountRole:
        return deltaCount(id);
    case BytesARole:
        return bytesA(id);
    case BytesBRole:
        return bytesB(id);
    case Qt::ForegroundRole:
        if (index.column() == DeltaBytesColumn || index.column() == DeltaCountColumn) {
            const double d = index.column() == DeltaBytesColumn ? deltaBytes(id) : deltaCount(id);
            if (std::llround(d * 10) != 0)
                return colors::deltaText(d, QGuiApplication::palette());
        }
        return {};
    case Qt::TextAlignmentRole:
        return index.column() == FunctionColumn ? QVariant() : QVariant(int(Qt::AlignRight | Qt::AlignVCenter));
    case Qt::ToolTipRole: {
        const size_t k = model::raw(id);
        QString tip = frameFullText(frames, n.frame).toHtmlEscaped() + QStringLiteral("<br>");
        tip += tr("A: %1 in %2 allocations<br>B: %3 in %4 allocations<br>Δ: <b>%5</b>, %6 allocations")
                   .arg(Session::formatBytes(m_tree->bytesA[k]), QLocale().toString(qlonglong(m_tree->countA[k])),
                        Session::formatBytes(m_tree->bytesB[k]), QLocale().toString(qlonglong(m_tree->countB[k])),
                        formatSignedBytes(double(n.bytes)), formatCount(double(n.count), false, true));
        if (m_tree->growth[k] != 0 && m_tree->shrink[k] != 0)
            tip += tr("<br>grew %1 and shrank %2 below this frame")
                       .arg(formatSignedBytes(double(m_tree->growth[k])), formatSignedBytes(double(m_tree->shrink[k])));
        if (fractional)
            tip += tr("<br>(columns show per-step values)");
        return tip;
    }
    }
    return {};
}

QVariant DiffModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case FunctionColumn:
        return tr("Function");
    case BytesAColumn:
        return tr("A bytes");
    case BytesBColumn:
        return tr("B bytes");
    case DeltaBytesColumn:
        return tr("Δ bytes");
    case DeltaCountColumn:
        return tr("Δ count");
    }
    return {};
}

// ---- DiffProxyModel ----

DiffProxyModel::DiffProxyModel(QObject* parent)
    : QSortFilterProxyModel(parent)
{
    setSortRole(DiffModel::SortRole);
    setFilterRole(DiffModel::FilterRole);
    setFilterCaseSensitivity(Qt::CaseInsensitive);
    setRecursiveFilteringEnabled(true);
    setDynamicSortFilter(true);
    sort(DiffModel::DeltaBytesColumn, Qt::DescendingOrder);
}

void DiffProxyModel::setFilter(DiffFilter filter)
{
    if (filter == m_filter)
        return;
    m_filter = filter;
    invalidateFilter();
}

bool DiffProxyModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const
{
    const QModelIndex i = sourceModel()->index(sourceRow, 0, sourceParent);
    if (m_filter != DiffFilter::All) {
        const double d = i.data(DiffModel::DeltaBytesRole).toDouble();
        if (m_filter == DiffFilter::Growth ? !(d >= 0.5) : !(d <= -0.5))
            return false;
    }
    return QSortFilterProxyModel::filterAcceptsRow(sourceRow, sourceParent);
}

} // namespace memscope::app
