// RankGroup and RankGroupModel: see rankgroup.h.
#include "document/rankgroup.h"

#include <QBrush>
#include <QColor>
#include <QFileInfo>
#include <QLocale>
#include <QRegularExpression>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace memscope::app {

RankStats rankStats(const Document& document, int position)
{
    RankStats r;
    r.path = document.path;
    static const QRegularExpression rankRe(QStringLiteral("rank[_-]?(\\d+)"), QRegularExpression::CaseInsensitiveOption);
    const QRegularExpressionMatch m = rankRe.match(QFileInfo(document.path).fileName());
    r.rank = m.hasMatch() ? m.captured(1).toInt() : position;
    model::ByteCount active = 0;
    if (document.isLive()) {
        // A live document's snapshot holds the state it joined at; its replays end where the job is now.
        for (const model::Replay& replay : document.replays) {
            const model::ReplaySeries& s = replay.series();
            if (s.size() == 0)
                continue;
            r.reserved += s.reserved.back();
            r.allocated += s.allocated.back();
            active += s.active.back();
        }
    } else {
        for (const model::Segment& s : document.snapshot->segments) {
            r.reserved += s.totalSize;
            r.allocated += s.allocatedSize;
            active += s.activeSize;
        }
    }
    r.fragmentation = r.reserved - active;
    r.fragmentationRatio = r.reserved > 0 ? double(r.fragmentation) / double(r.reserved) : 0.0;
    // Peaks: per device the largest value of its series; devices without a trace count their final state. Summed
    // over devices (an upper bound when devices peak at different times; ranks usually have one device each).
    std::vector<model::ByteCount> endAllocated, endReserved;
    for (const model::Segment& s : document.snapshot->segments) {
        const size_t d = size_t(std::max(0, s.device));
        if (endAllocated.size() <= d) {
            endAllocated.resize(d + 1, 0);
            endReserved.resize(d + 1, 0);
        }
        endAllocated[d] += s.allocatedSize;
        endReserved[d] += s.totalSize;
    }
    const size_t devices = std::max(endAllocated.size(), document.replays.size());
    for (size_t d = 0; d < devices; ++d) {
        const model::Replay* replay = d < document.replays.size() ? &document.replays[d] : nullptr;
        if (replay && replay->entryCount() > 0) {
            const model::ReplaySeries& s = replay->series();
            r.peakAllocated += *std::max_element(s.allocated.begin(), s.allocated.end());
            r.peakReserved += *std::max_element(s.reserved.begin(), s.reserved.end());
            if (d < document.snapshot->deviceTraces.size())
                for (const model::TraceEntry& e : document.snapshot->deviceTraces[d])
                    r.ooms += e.action == model::Action::Oom ? 1 : 0;
        } else if (d < endAllocated.size()) {
            r.peakAllocated += endAllocated[d];
            r.peakReserved += endReserved[d];
        }
    }
    return r;
}

RankGroup makeRankGroup(std::vector<std::shared_ptr<const Document>> documents)
{
    RankGroup g;
    g.documents = std::move(documents);
    for (size_t i = 0; i < g.documents.size(); ++i)
        g.ranks.push_back(rankStats(*g.documents[i], int(i)));
    if (g.ranks.empty())
        return g;
    std::vector<size_t> order(g.ranks.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return g.ranks[a].peakAllocated < g.ranks[b].peakAllocated; });
    g.median = int(order[(order.size() - 1) / 2]);
    if (g.ranks.size() >= 3) {
        model::ByteCount worst = 0;
        for (size_t i = 0; i < g.ranks.size(); ++i) {
            const model::ByteCount d = std::abs(g.deviation(i));
            if (d > worst) {
                worst = d;
                g.outlier = int(i);
            }
        }
    }
    return g;
}

RankGroupModel::RankGroupModel(QObject* parent)
    : QAbstractTableModel(parent)
    , m_group(std::make_shared<RankGroup>())
{
}

void RankGroupModel::setGroup(std::shared_ptr<const RankGroup> group)
{
    beginResetModel();
    m_group = group ? std::move(group) : std::make_shared<RankGroup>();
    endResetModel();
}

int RankGroupModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_group->ranks.size());
}

int RankGroupModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RankGroupModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.model() != this || size_t(index.row()) >= m_group->ranks.size())
        return {};
    const size_t i = size_t(index.row());
    const RankStats& r = m_group->ranks[i];
    const bool median = int(i) == m_group->median;
    const bool outlier = int(i) == m_group->outlier;
    auto value = [&](int column) -> QVariant {
        switch (column) {
        case RankColumn:
            return r.rank;
        case FileColumn:
            return QFileInfo(r.path).fileName();
        case PeakAllocatedColumn:
            return qint64(r.peakAllocated);
        case PeakReservedColumn:
            return qint64(r.peakReserved);
        case AllocatedColumn:
            return qint64(r.allocated);
        case ReservedColumn:
            return qint64(r.reserved);
        case FragmentationColumn:
            return r.fragmentationRatio;
        case OomColumn:
            return r.ooms;
        case DeviationColumn:
            return qint64(m_group->deviation(i));
        }
        return {};
    };
    switch (role) {
    case SortRole:
        return value(index.column());
    case IsMedianRole:
        return median;
    case IsOutlierRole:
        return outlier;
    case Qt::DisplayRole:
        switch (index.column()) {
        case RankColumn:
            return QString(QString::number(r.rank) + (median ? tr("  (median)") : outlier ? tr("  (outlier)") : QString()));
        case FileColumn:
            return value(FileColumn);
        case PeakAllocatedColumn:
        case PeakReservedColumn:
        case AllocatedColumn:
        case ReservedColumn:
            return Session::formatBytes(value(index.column()).toLongLong());
        case FragmentationColumn:
            return tr("%1 (%2%)").arg(Session::formatBytes(r.fragmentation)).arg(100.0 * r.fragmentationRatio, 0, 'f', 1);
        case OomColumn:
            return r.ooms;
        case DeviationColumn: {
            const qint64 d = m_group->deviation(i);
            if (d == 0)
                return median ? tr("—") : QStringLiteral("0 B");
            return QString((d > 0 ? QStringLiteral("+") : QString(QChar(0x2212))) + Session::formatBytes(std::abs(d)));
        }
        }
        return {};
    case Qt::TextAlignmentRole:
        return index.column() >= PeakAllocatedColumn ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant();
    case Qt::BackgroundRole:
        if (outlier)
            return QBrush(QColor(0xfd, 0xd8, 0xd5));
        if (median)
            return QBrush(QColor(0xe3, 0xec, 0xfa));
        return {};
    case Qt::ForegroundRole:
        if (outlier || median)
            return QBrush(QColor(0x10, 0x10, 0x10)); // readable on the fixed backgrounds in dark palettes too
        if (index.column() == OomColumn && r.ooms > 0)
            return QBrush(QColor(0xb0, 0x20, 0x10));
        return {};
    case Qt::ToolTipRole:
        return r.path;
    }
    return {};
}

QVariant RankGroupModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case RankColumn:
        return tr("Rank");
    case FileColumn:
        return tr("File");
    case PeakAllocatedColumn:
        return tr("Peak allocated");
    case PeakReservedColumn:
        return tr("Peak reserved");
    case AllocatedColumn:
        return tr("Allocated (end)");
    case ReservedColumn:
        return tr("Reserved (end)");
    case FragmentationColumn:
        return tr("Fragmentation (end)");
    case OomColumn:
        return tr("OOMs");
    case DeviationColumn:
        return tr("Peak vs median");
    }
    return {};
}

} // namespace memscope::app
