// The call tree view: where the live bytes at the Session cursor were allocated, as a sortable, searchable tree
// (top-down or bottom-up) or as a flame graph of the same tree. A toolbar switches the direction, PyTorch's frame
// filter (Session::setFrameFilter), the search, "expand largest" and tree ↔ flame graph. The tree follows the
// Session's cursor, device, stream/pool filters and frame filter; rebuilds are coalesced (one per event-loop pass),
// skipped while hidden, and run on the thread pool above asyncThreshold() samples with stale results dropped (job
// id). Selecting a row reached by a single allocation selects it in the Session; a Session selection made elsewhere
// selects its call path here. GUI thread only.
#pragma once

#include "model/calltree.h"
#include "itemmodels/calltreemodel.h"
#include "document/session.h"

#include <QWidget>

#include <cstdint>
#include <memory>
#include <vector>

class QAction;
class QLabel;
class QLineEdit;
class QScrollArea;
class QSortFilterProxyModel;
class QStackedWidget;
class QTimer;
class QTreeView;

namespace memscope::app {

class FlameGraphView;

class CallTreeView : public QWidget {
    Q_OBJECT
public:
    // Children have object names for tests: actions "topDownAction", "bottomUpAction", "frameFilterAction",
    // "expandLargestAction", "treeAction", "flameGraphAction", "colorByFileAction"; "searchEdit", "summaryLabel",
    // "callTree" (the QTreeView), "flameGraph" (the FlameGraphView).
    explicit CallTreeView(Session* session, QWidget* parent = nullptr);
    ~CallTreeView() override;

    CallTreeModel* model() const { return m_model; }
    QSortFilterProxyModel* proxy() const { return m_proxy; }
    QTreeView* treeView() const { return m_treeView; }
    FlameGraphView* flameGraph() const { return m_flame; }
    const model::CallTree& tree() const { return m_model->tree(); }

    model::CallTreeDirection direction() const { return m_direction; }
    void setDirection(model::CallTreeDirection direction);
    // Filters the rows as typing in the search field does, without its debounce.
    void setSearchText(const QString& text);
    // Puts the keyboard in the search field, its text selected (Edit > Find in Call Stacks).
    void focusSearch();
    // Expands, from the top level, the largest child of each node down to a leaf, makes that leaf current and
    // returns it (NoCallNode when the tree is empty). Never changes the Session's selection.
    model::CallNodeId expandToLargest();
    bool isFlameGraphShown() const;
    void setFlameGraphShown(bool shown);

    // Rebuilds the tree now, synchronously, whatever the widget's visibility and the tree's size.
    void rebuildNow();
    // Starts a rebuild on the thread pool whatever the tree's size; treeRebuilt follows unless a newer rebuild
    // starts first (its result is then dropped).
    void rebuildInBackground();
    bool isRebuildPending() const { return m_pending; }
    // Rebuilds of more samples than this run on the thread pool (default DefaultAsyncThreshold).
    void setAsyncThreshold(size_t samples) { m_asyncThreshold = samples; }
    static constexpr size_t DefaultAsyncThreshold = 10000;
    static constexpr int SearchDebounceMs = 200;

Q_SIGNALS:
    // A new tree is on screen (after a Session change, a direction change or rebuildNow()).
    void treeRebuilt();

protected:
    void showEvent(QShowEvent* event) override;
    // Narrow (a dock beside the timeline on a 1280 px screen): Count and Self bytes hide, so the frames keep room.
    void resizeEvent(QResizeEvent* event) override;

private:
    void scheduleRebuild(bool resetLayout);
    enum class Run : uint8_t { Auto, Now, InBackground };
    void startRebuild(Run run);
    void applyTree(uint64_t job, std::shared_ptr<const model::CallTree> tree);
    void applySearch();
    void onCurrentChanged(const QModelIndex& current);
    void onFlameClicked(model::CallNodeId node);
    void syncToSelection();
    void updateSummary();
    QModelIndex proxyIndex(model::CallNodeId node) const;
    void collectExpanded(const QModelIndex& parent, std::vector<std::vector<model::FrameId>>& out) const;

    Session* m_session;
    CallTreeModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QTreeView* m_treeView = nullptr;
    FlameGraphView* m_flame = nullptr;
    QScrollArea* m_flameScroll = nullptr;
    QStackedWidget* m_stack = nullptr;
    QAction* m_topDown = nullptr;
    QAction* m_bottomUp = nullptr;
    QAction* m_frameFilter = nullptr;
    QAction* m_treeAction = nullptr;
    QAction* m_flameAction = nullptr;
    QLineEdit* m_search = nullptr;
    QLabel* m_summary = nullptr;
    QTimer* m_rebuildTimer = nullptr;
    QTimer* m_searchTimer = nullptr;

    model::CallTreeDirection m_direction = model::CallTreeDirection::TopDown;
    size_t m_asyncThreshold = DefaultAsyncThreshold;
    uint64_t m_job = 0; // the newest rebuild; results of older ones are dropped
    bool m_pending = false; // a rebuild is due (waiting for the event loop or for the widget to show)
    bool m_resetLayout = true; // the next tree starts from "expand largest" instead of the saved expansion
    bool m_syncing = false; // the current row is being moved by code: don't write the Session selection
    bool m_selectionPending = false; // the Session's selection is not shown yet (the tree of its cursor is coming)
    uint64_t m_shownJob = 0; // the rebuild whose tree is on screen (m_job when none is under way)
    int64_t m_builtCursor = -1; // what the newest rebuild is for
    int m_builtDevice = -1;
};

} // namespace memscope::app
