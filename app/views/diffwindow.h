// One diff in its tab: a DiffSession (the two sides and their diff) and every view of it, as tabs: the summary (totals
// per device/pool/stream with A, B and Δ, segments, same-trace lifetimes, the largest growth and shrink stacks),
// the Δ call tree (A, B, Δ bytes, Δ count, sorted by |Δ|, filterable to growth or shrink), the differential flame
// graph, the segment maps of A and B side by side with added/removed/changed segments and new/freed blocks outlined,
// and, when both sides are moments of one trace, that trace's timeline with both cursors marked and the range
// between them shaded. A toolbar swaps A and B and toggles per-step normalisation. The views observe the
// DiffSession and never call each other. GUI thread only.
#pragma once

#include "itemmodels/diffmodel.h"

#include <QMainWindow>

#include <optional>

class QLabel;
class QTabWidget;
class QTreeView;
class QTreeWidget;

namespace memscope::app {

class DiffFlameGraphView;
class InsightsModel;
class InsightsView;
class SegmentMapView;
class TimelineView;

class DiffWindow : public QMainWindow {
    Q_OBJECT
public:
    enum class View { Summary, Tree, Flame, Segments, Timeline, Insights };
    // "diff-summary", "diff-tree", "diff-flame", "diff-segments", "diff-timeline".
    static std::optional<View> viewFromName(const QString& name);
    static QString viewName(View view);

    // Children have object names for tests: "swapAction", "perStepAction", "filterBox", "directionBox",
    // "diffSearch", "diffTabs", "diffSummary" (QTreeWidget), "diffTree" (QTreeView), "diffFlameGraph",
    // "segmentsA", "segmentsB" (SegmentMapViews), "diffTimeline" (the TimelineView), "sidesLabel".
    DiffWindow(DiffInput a, DiffInput b, QWidget* parent = nullptr);
    ~DiffWindow() override;

    DiffSession* session() const { return m_session; }
    DiffModel* model() const { return m_model; }
    DiffProxyModel* proxy() const { return m_proxy; }
    QTreeView* treeView() const { return m_treeView; }
    QTreeWidget* summaryView() const { return m_summary; }
    DiffFlameGraphView* flameGraph() const { return m_flame; }
    // Null when not both sides are one document.
    TimelineView* timeline() const { return m_timeline; }
    // The per-side Sessions behind the segment maps (cursor at the side's index) and the timeline.
    Session* sessionA() const { return m_sessionA; }
    Session* sessionB() const { return m_sessionB; }

    // The tab page of `view` (null for Timeline when there is none); showView raises it.
    QWidget* view(View view) const;
    void showView(View view);
    // The page of the tab shown now (what File ▸ Export View writes).
    QWidget* currentView() const;
    // "Δ diff_before.pickle → diff_after.pickle": the tab title.
    QString title() const;
    // Every summary line as "label\tA\tB\tΔ" (tab separated), depth first: what tests and copy/paste read.
    QString summaryText() const;
    // Expands the Δ tree's largest change down to a leaf and makes it current.
    void expandLargest();

private:
    void rebuild(); // after diffChanged: new tree, summary, side sessions
    void applyNormalisation();
    void fillSummary();
    void rebuildSides();

    DiffSession* m_session = nullptr;
    DiffModel* m_model = nullptr;
    DiffProxyModel* m_proxy = nullptr;
    QTabWidget* m_tabs = nullptr;
    InsightsModel* m_insights = nullptr;
    InsightsView* m_insightsView = nullptr;
    QLabel* m_sides = nullptr;
    QTreeWidget* m_summary = nullptr;
    QWidget* m_treePage = nullptr;
    QTreeView* m_treeView = nullptr;
    QWidget* m_flamePage = nullptr;
    DiffFlameGraphView* m_flame = nullptr;
    QWidget* m_segmentsPage = nullptr;
    QWidget* m_timelinePage = nullptr;
    TimelineView* m_timeline = nullptr;
    Session* m_sessionA = nullptr;
    Session* m_sessionB = nullptr;
    Session* m_timelineSession = nullptr;
    model::CallTreeDirection m_direction = model::CallTreeDirection::BottomUp;
};

} // namespace memscope::app
