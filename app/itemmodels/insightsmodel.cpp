// InsightsModel: insights as sections and items. See insightsmodel.h.
#include "itemmodels/insightsmodel.h"

#include "document/session.h"

#include <QCoreApplication>
#include <QFutureWatcher>
#include <QtConcurrent>

namespace memscope::app {

namespace {
    // Internal ids: 0 for sections, section + 1 for their items.
    constexpr quintptr SectionId = 0;
    // The kinds that share a section with the one before them.
    report::InsightKind sectionKind(report::InsightKind kind)
    {
        using K = report::InsightKind;
        switch (kind) {
        case K::TopConsumer:
        case K::Fragmentation:
            return K::Peak;
        case K::LateSurvivor:
            return K::LeakSuspect;
        default:
            return kind;
        }
    }
} // namespace

InsightsModel::InsightsModel(QObject* parent)
    : QAbstractItemModel(parent)
{
}

QString InsightsModel::sectionTitle(report::InsightKind kind)
{
    using K = report::InsightKind;
    switch (kind) {
    case K::Peak:
    case K::TopConsumer:
    case K::Fragmentation:
        return tr("At the peak");
    case K::Oom:
        return tr("Out of memory");
    case K::LeakSuspect:
    case K::LateSurvivor:
        return tr("Leak suspects");
    case K::PendingFree:
        return tr("Waiting for other streams (record_stream)");
    case K::Growth:
        return tr("What changed");
    case K::WhatIf:
        return tr("What would help");
    case K::Count:
        break;
    }
    return {};
}

void InsightsModel::compute(std::shared_ptr<const Document> document)
{
    const uint64_t generation = ++m_generation;
    m_computing = true;
    auto* watcher = new QFutureWatcher<std::shared_ptr<const report::Insights>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
        watcher->deleteLater();
        if (generation != m_generation) // a newer job or setInsights came since: this result is stale
            return;
        m_computing = false;
        setInsights(watcher->result());
        Q_EMIT computed();
    });
    watcher->setFuture(QtConcurrent::run([document = std::move(document)] {
        const auto lock = document->readLock(); // a live document does not grow while this reads it
        auto out = std::make_shared<report::Insights>(report::computeInsights(*document->snapshot, document->replays));
        out->source = document->path.toStdString();
        return std::shared_ptr<const report::Insights>(std::move(out));
    }));
}

void InsightsModel::setInsights(std::shared_ptr<const report::Insights> insights)
{
    ++m_generation;
    m_base = std::move(insights);
    rebuild();
}

void InsightsModel::setExtraInsights(std::vector<report::Insight> extra)
{
    m_extra = std::move(extra);
    rebuild();
}

void InsightsModel::rebuild()
{
    beginResetModel();
    if (m_extra.empty() || !m_base) {
        m_insights = m_base;
    } else {
        auto merged = std::make_shared<report::Insights>(*m_base);
        merged->items.insert(merged->items.end(), m_extra.begin(), m_extra.end());
        m_insights = std::move(merged);
    }
    m_sections.clear();
    if (m_insights) {
        for (size_t i = 0; i < m_insights->items.size(); ++i) {
            const report::InsightKind kind = sectionKind(m_insights->items[i].kind);
            auto it
                = std::find_if(m_sections.begin(), m_sections.end(), [&](const Section& s) { return s.kind == kind; });
            if (it == m_sections.end())
                it = m_sections.insert(m_sections.end(), Section { kind, {} });
            it->items.push_back(i);
        }
    }
    endResetModel();
}

const report::Insight* InsightsModel::insightAt(const QModelIndex& index) const
{
    if (!index.isValid() || index.internalId() == SectionId || !m_insights)
        return nullptr;
    const Section& s = m_sections[size_t(index.internalId() - 1)];
    return &m_insights->items[s.items[size_t(index.row())]];
}

QModelIndex InsightsModel::firstOf(report::InsightKind kind) const
{
    for (size_t s = 0; s < m_sections.size(); ++s)
        for (size_t r = 0; r < m_sections[s].items.size(); ++r)
            if (m_insights->items[m_sections[s].items[r]].kind == kind)
                return createIndex(int(r), 0, quintptr(s + 1));
    return {};
}

QModelIndex InsightsModel::index(int row, int column, const QModelIndex& parent) const
{
    if (row < 0 || column < 0 || column >= ColumnCount)
        return {};
    if (!parent.isValid())
        return size_t(row) < m_sections.size() ? createIndex(row, column, SectionId) : QModelIndex();
    if (parent.internalId() != SectionId || size_t(parent.row()) >= m_sections.size())
        return {};
    return size_t(row) < m_sections[size_t(parent.row())].items.size()
        ? createIndex(row, column, quintptr(parent.row() + 1))
        : QModelIndex();
}

QModelIndex InsightsModel::parent(const QModelIndex& child) const
{
    if (!child.isValid() || child.internalId() == SectionId)
        return {};
    return createIndex(int(child.internalId() - 1), 0, SectionId);
}

int InsightsModel::rowCount(const QModelIndex& parent) const
{
    if (!parent.isValid())
        return int(m_sections.size());
    if (parent.column() != 0 || parent.internalId() != SectionId)
        return 0;
    return int(m_sections[size_t(parent.row())].items.size());
}

int InsightsModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QVariant InsightsModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid())
        return {};
    if (index.internalId() == SectionId) {
        const Section& s = m_sections[size_t(index.row())];
        switch (role) {
        case Qt::DisplayRole:
            if (index.column() != TitleColumn)
                return {};
            return QString(sectionTitle(s.kind) + QStringLiteral(" (%1)").arg(s.items.size()));
        case KindRole:
            return int(s.kind);
        case IsSectionRole:
            return true;
        default:
            return {};
        }
    }
    const report::Insight* it = insightAt(index);
    if (!it)
        return {};
    switch (role) {
    case Qt::DisplayRole:
        if (index.column() == TitleColumn)
            return QString::fromStdString(it->title);
        return it->bytes != 0 ? Session::formatBytes(it->bytes) : QString();
    case Qt::ToolTipRole:
        return QString::fromStdString(it->title + "\n\n" + it->detail);
    case Qt::TextAlignmentRole:
        return index.column() == BytesColumn ? QVariant(Qt::AlignRight | Qt::AlignVCenter) : QVariant();
    case KindRole:
        return int(it->kind);
    case DeviceRole:
        return it->device;
    case IndexRole:
        return qint64(it->index);
    case AllocationRole:
        return uint(model::raw(it->allocation));
    case StackRole:
        return uint(model::raw(it->stack));
    case DetailRole:
        return QString::fromStdString(it->detail);
    case IsSectionRole:
        return false;
    default:
        return {};
    }
}

QVariant InsightsModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    return section == TitleColumn ? tr("Insight") : tr("Size");
}

} // namespace memscope::app
