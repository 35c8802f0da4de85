// The generic tree model over a model::CallTree (hotspot's pattern: one tree model, sorting and searching only in a
// QSortFilterProxyModel on top, see makeCallTreeProxy). Rows are the root's children and their descendants
// (CallTreeItemModel's navigation, which DiffModel shares); the root itself is not a row (its totals are what "% of
// live" divides by). Also the frame labels and colours that the
// tree and the flame graph share. GUI thread only; the CallTree and Snapshot it holds are immutable and shared.
#pragma once

#include "model/calltree.h"
#include "model/snapshot.h"
#include "itemmodels/calltreeitemmodel.h"

#include <QColor>

#include <memory>
#include <vector>

class QSortFilterProxyModel;

namespace memscope::app {

// "basename:line:name" as PyTorch's _memory_viz._frame_fmt prints it (report::formatFrame), or the label of a
// pseudo frame ("<no stack recorded>", "<frames hidden by the filter>", "all live allocations").
QString frameLabel(const model::Snapshot& snapshot, model::FrameId frame);
// The same with the full filename: what search matches and tooltips show.
QString frameFullText(const model::Snapshot& snapshot, model::FrameId frame);
// What the tree's Function column shows: frameLabel with the function name shortened by shortFunctionName, so
// that 50-deep C++ stacks stay readable ("RegisterCUDA_0.cpp:0:at::(anonymous)::wrapper_CUDA_empty(…)"); the
// tooltip and the search keep the whole text.
QString frameDisplayLabel(const model::Snapshot& snapshot, model::FrameId frame);
// The function name with C++ template arguments and parameter lists collapsed ("a::b<…>::call(…)"), for labels
// too narrow for the whole name. Pseudo frames give their label.
QString shortFunctionName(const model::Snapshot& snapshot, model::FrameId frame);

enum class FrameColoring : uint8_t { ByFunction, ByFile };
// A stable fill for a frame: hashed from its function name (or filename), so a function keeps its colour across
// cursor positions and snapshots; Python frames in cool hues, native ones in warm hues (flamegraph.pl's "hot" and
// "aqua" palettes), pseudo frames grey. `dark`: for a dark palette (lower lightness).
QColor frameColor(const model::Snapshot& snapshot, model::FrameId frame, FrameColoring coloring, bool dark);

class CallTreeModel : public CallTreeItemModel {
    Q_OBJECT
public:
    enum Columns { FunctionColumn, BytesColumn, CountColumn, PercentColumn, SelfBytesColumn, ColumnCount };
    enum Roles {
        SortRole = Qt::UserRole + 1, // the raw value of the column: QString, qint64 or double
        FilterRole, // frameFullText, what the search matches
        NodeRole, // raw(CallNodeId)
        BytesRole, // qint64 inclusive bytes
        CountRole, // qint64 inclusive count
        SelfBytesRole, // qint64
        SelfCountRole, // qint64
        PercentRole, // double, inclusive bytes / root bytes × 100
        SamplesRole, // uint: samples (allocations) through the node
        KeyRole, // uint: the key of the node's one sample (raw AllocationId) when SamplesRole is 1
    };

    explicit CallTreeModel(QObject* parent = nullptr);

    // Replaces the tree (beginResetModel / endResetModel). `snapshot` names the tree's frames.
    void setTree(std::shared_ptr<const model::Snapshot> snapshot, std::shared_ptr<const model::CallTree> tree);
    const model::Snapshot* snapshot() const { return m_snapshot.get(); }

    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    const QString& label(model::FrameId frame) const;
    const QString& fullText(model::FrameId frame) const;

    std::shared_ptr<const model::Snapshot> m_snapshot;
    mutable std::vector<QString> m_labels; // frameDisplayLabel per frame, filled on first use
    mutable std::vector<QString> m_fullTexts; // frameFullText likewise (searching reads every node's)
};

// The proxy the call tree view uses: sorts by SortRole (bytes descending to start with), searches frameFullText
// case-insensitively with recursive filtering (a row shows when it or a descendant matches).
QSortFilterProxyModel* makeCallTreeProxy(CallTreeModel* source, QObject* parent);

} // namespace memscope::app
