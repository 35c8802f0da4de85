// CallTreeItemModel, the navigation every tree model over a model::CallTree shares (CallTreeModel's live bytes,
// DiffModel's A, B and Δ): rows are the root's children and their descendants, the root itself is not a row, and
// each index's internalId is its node's index in the tree, so index() and parent() are O(1). Subclasses say what the
// columns hold (data, headerData) and hand the tree over in setCallTree. GUI thread only; the CallTree it holds is
// immutable and shared.
#pragma once

#include "model/calltree.h"

#include <QAbstractItemModel>

#include <memory>

namespace memscope::app {

class CallTreeItemModel : public QAbstractItemModel {
    Q_OBJECT
public:
    // The tree shown (an empty one until a subclass sets one; never null).
    const model::CallTree& tree() const { return *m_callTree; }
    std::shared_ptr<const model::CallTree> treePtr() const { return m_callTree; }

    // The index of a node (invalid for the root and NoCallNode), and back (CallTreeRoot for an invalid index).
    QModelIndex indexOf(model::CallNodeId node, int column = 0) const;
    model::CallNodeId nodeOf(const QModelIndex& index) const;

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    bool hasChildren(const QModelIndex& parent = {}) const override;

protected:
    // `columnCount`: the subclass's ColumnCount, the same at every level.
    explicit CallTreeItemModel(int columnCount, QObject* parent = nullptr);

    // Replaces the tree (null: an empty one). Call between beginResetModel and endResetModel.
    void setCallTree(std::shared_ptr<const model::CallTree> tree);

private:
    std::shared_ptr<const model::CallTree> m_callTree;
    int m_columnCount;
};

} // namespace memscope::app
