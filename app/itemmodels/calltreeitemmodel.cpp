// CallTreeItemModel: see calltreeitemmodel.h. GUI thread only.
#include "itemmodels/calltreeitemmodel.h"

namespace memscope::app {

using model::CallNode;
using model::CallNodeId;

CallTreeItemModel::CallTreeItemModel(int columnCount, QObject* parent)
    : QAbstractItemModel(parent)
    , m_callTree(std::make_shared<model::CallTree>())
    , m_columnCount(columnCount)
{
}

void CallTreeItemModel::setCallTree(std::shared_ptr<const model::CallTree> tree)
{
    m_callTree = tree ? std::move(tree) : std::make_shared<model::CallTree>();
}

QModelIndex CallTreeItemModel::indexOf(CallNodeId node, int column) const
{
    if (node == model::NoCallNode || node == model::CallTreeRoot || model::raw(node) >= m_callTree->size())
        return {};
    return createIndex(int(m_callTree->row(node)), column, quintptr(model::raw(node)));
}

CallNodeId CallTreeItemModel::nodeOf(const QModelIndex& index) const
{
    return index.isValid() ? CallNodeId { uint32_t(index.internalId()) } : model::CallTreeRoot;
}

QModelIndex CallTreeItemModel::index(int row, int column, const QModelIndex& parent) const
{
    if (row < 0 || column < 0 || column >= m_columnCount || (parent.isValid() && parent.column() != 0))
        return {};
    const CallNode& p = m_callTree->node(nodeOf(parent));
    if (uint32_t(row) >= p.childCount)
        return {};
    return createIndex(row, column, quintptr(p.firstChild + uint32_t(row)));
}

QModelIndex CallTreeItemModel::parent(const QModelIndex& child) const
{
    if (!child.isValid())
        return {};
    const CallNodeId parent = m_callTree->node(nodeOf(child)).parent;
    if (parent == model::CallTreeRoot || parent == model::NoCallNode)
        return {};
    return createIndex(int(m_callTree->row(parent)), 0, quintptr(model::raw(parent)));
}

int CallTreeItemModel::rowCount(const QModelIndex& parent) const
{
    if (parent.isValid() && parent.column() != 0)
        return 0;
    return int(m_callTree->node(nodeOf(parent)).childCount);
}

int CallTreeItemModel::columnCount(const QModelIndex&) const { return m_columnCount; }

bool CallTreeItemModel::hasChildren(const QModelIndex& parent) const { return rowCount(parent) > 0; }

} // namespace memscope::app
