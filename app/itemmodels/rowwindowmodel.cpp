#include "itemmodels/rowwindowmodel.h"

#include <algorithm>

namespace memscope::app {

RowWindowModel::RowWindowModel(QAbstractItemModel* source, QObject* parent)
    : QAbstractTableModel(parent)
    , m_source(source)
{
    connect(source, &QAbstractItemModel::modelReset, this, &RowWindowModel::refresh);
    connect(source, &QAbstractItemModel::layoutChanged, this, &RowWindowModel::refresh);
    connect(source, &QAbstractItemModel::rowsInserted, this, &RowWindowModel::refresh);
    connect(source, &QAbstractItemModel::rowsRemoved, this, &RowWindowModel::refresh);
    connect(source, &QAbstractItemModel::columnsInserted, this, &RowWindowModel::refresh);
    connect(source, &QAbstractItemModel::columnsRemoved, this, &RowWindowModel::refresh);
    connect(source, &QAbstractItemModel::headerDataChanged, this, &QAbstractItemModel::headerDataChanged);
    connect(source, &QAbstractItemModel::dataChanged, this,
            [this](const QModelIndex& topLeft, const QModelIndex& bottomRight, const QList<int>& roles) {
                const int top = std::max(topLeft.row(), m_first);
                const int bottom = std::min(bottomRight.row(), m_first + m_rows - 1);
                if (top <= bottom)
                    Q_EMIT dataChanged(index(top - m_first, topLeft.column()),
                                       index(bottom - m_first, bottomRight.column()), roles);
            });
}

int RowWindowModel::sourceRows() const { return m_source ? m_source->rowCount() : 0; }

int RowWindowModel::clampedFirst(int first) const { return std::clamp(first, 0, std::max(0, sourceRows() - 1)); }

void RowWindowModel::setWindow(int first, int capacity)
{
    capacity = std::max(0, capacity);
    first = clampedFirst(first);
    const int rows = std::clamp(sourceRows() - first, 0, capacity);
    if (first == m_first && capacity == m_capacity && rows == m_rows)
        return;
    beginResetModel();
    m_first = first;
    m_capacity = capacity;
    m_rows = rows;
    endResetModel();
}

void RowWindowModel::refresh()
{
    beginResetModel();
    m_first = clampedFirst(m_first);
    m_rows = std::clamp(sourceRows() - m_first, 0, m_capacity);
    endResetModel();
}

int RowWindowModel::windowRow(int sourceRow) const
{
    return sourceRow >= m_first && sourceRow < m_first + m_rows ? sourceRow - m_first : -1;
}

int RowWindowModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : m_rows; }

int RowWindowModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() || !m_source ? 0 : m_source->columnCount();
}

QVariant RowWindowModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || !m_source || index.row() >= m_rows)
        return {};
    return m_source->data(m_source->index(m_first + index.row(), index.column()), role);
}

QVariant RowWindowModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (!m_source)
        return {};
    return m_source->headerData(orientation == Qt::Vertical ? m_first + section : section, orientation, role);
}

Qt::ItemFlags RowWindowModel::flags(const QModelIndex& index) const
{
    if (!index.isValid() || !m_source || index.row() >= m_rows)
        return Qt::NoItemFlags;
    return m_source->flags(m_source->index(m_first + index.row(), index.column()));
}

} // namespace memscope::app
