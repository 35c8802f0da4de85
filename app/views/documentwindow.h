// One opened snapshot in its tab: the Session and every view of it, docked around the stacked timeline, plus the
// cursor controls (slider, index box, device selector, stream/pool filters), the details pane, and a banner with
// the file's load warnings when it has any. The
// views never talk to each other; they all follow the Session this window owns. GUI thread only.
#pragma once

#include "model/landmarks.h"
#include "document/session.h"

#include <QMainWindow>

#include <memory>
#include <optional>

class QComboBox;
class QPlainTextEdit;
class QSlider;
class QSpinBox;
class QTimer;
class QToolButton;

namespace memscope::app {

class TimelineView;
class SegmentMapView;
class CallTreeView;
class EventListView;
class OverviewView;
class InsightsModel;
class InsightsView;
class WhatIfAnalysis;
class WhatIfView;

class DocumentWindow : public QMainWindow {
    Q_OBJECT
public:
    enum class View { Timeline, Segments, Tree, Events, Overview, Insights, WhatIf };
    // "timeline", "segments", "tree", "events", "overview", "insights", "whatif"
    static std::optional<View> viewFromName(const QString& name);
    static QString viewName(View view);

    explicit DocumentWindow(std::shared_ptr<const Document> document, QWidget* parent = nullptr);
    ~DocumentWindow() override;

    Session* session() const { return m_session; }
    QWidget* view(View view) const;
    // The view the user last worked in (for export); the timeline at first.
    QWidget* currentView() const;
    // Raises the dock of `view` (or focuses the timeline).
    void showView(View view);
    // The call stacks' dock shown, as a flame graph (or as the tree), or with the keyboard in its search field.
    void showFlameGraph(bool shown);
    void findInCallStacks();

    // Cursor steps: one entry, to the previous/next annotation boundary, to the start/end.
    void stepCursor(int64_t delta);
    void stepAnnotation(int direction);
    // Go ▸ Peak allocated, Peak reserved, Largest allocation, a record_function name, an index: moves the cursor
    // (model/landmarks.h), selects what the moment is about (at the peak the top consumer's largest block, at the
    // largest allocation that one; at an OOM nothing: the details pane shows the failed request) and says why in
    // the status line. Returns an
    // error line ("" when done).
    QString goTo(const model::Moment& moment);
    // Go ▸ Next / Previous OOM from the cursor; false when there is none that way.
    bool stepOom(int direction);
    // Why the cursor is where it is, after goTo() or at open ("at the first of 3 OOMs"); "" once it was moved.
    QString cursorReason() const { return m_reason; }

    // The dock layout, versioned so that a layout saved by an older memscope is not restored over the new defaults:
    // which docks are where (QMainWindow's state) and their sizes as proportions of the window (the call stacks'
    // column, their split with the details, the bottom area), which the window applies whenever it is resized until
    // the user drags a separator. Proportions, not pixels: a layout saved by one window fits the next one whatever
    // its size, and restoring it before the window is sized loses nothing.
    QByteArray saveLayout() const;
    bool restoreLayout(const QByteArray& state);
    // View > Reset Layout: the default docks and proportions.
    void resetLayout();

    InsightsModel* insights() const { return m_insights; }
    InsightsView* insightsView() const { return m_insightsView; }
    // The What-if panel and its analysis; null for a live document (its trace is not complete).
    WhatIfView* whatIfView() const { return m_whatIfView; }
    WhatIfAnalysis* whatIf() const { return m_whatIf; }
    // Raises the What-if panel and replays the job under `settings` (PYTORCH_CUDA_ALLOC_CONF syntax).
    void showWhatIf(const QString& settings);
    // The setting the what-if suggestion found (its insight), "" until then or when none helps.
    QString suggestedSettings() const { return m_suggested; }
    bool isSuggesting() const { return m_suggesting; }

    // One line for the status bar: cursor index and time, totals at the cursor.
    QString statusText() const;
    // The focused allocation's description and stack, as the details pane shows it.
    QString detailsText() const;

Q_SIGNALS:
    void statusChanged();
    void suggestionDone(); // the what-if suggestion is in the Insights (or found nothing)

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    bool event(QEvent* event) override;

private:
    void buildControls();
    void buildWarningBanner();
    void updateControls();
    void updateDetails();
    void fillFilterMenu();
    QDockWidget* addView(QWidget* widget, const QString& title, Qt::DockWidgetArea area);
    void selectAt(int64_t index, model::AllocationId preferred);
    void setReason(const QString& reason);

    Session* m_session = nullptr;
    TimelineView* m_timeline = nullptr;
    SegmentMapView* m_segments = nullptr;
    CallTreeView* m_tree = nullptr;
    EventListView* m_events = nullptr;
    OverviewView* m_overview = nullptr;
    InsightsModel* m_insights = nullptr;
    InsightsView* m_insightsView = nullptr;
    WhatIfAnalysis* m_whatIf = nullptr;
    WhatIfView* m_whatIfView = nullptr;
    QString m_suggested;
    bool m_suggesting = false;
    QPlainTextEdit* m_details = nullptr;
    QDockWidget* m_treeDock = nullptr;
    QDockWidget* m_detailsDock = nullptr;
    QDockWidget* m_insightsDock = nullptr;
    // The docks' proportions: of the window's width, the call stacks' column; of that column, the call stacks over
    // the details; of the window's height, the bottom area.
    struct Proportions {
        double right = 0.40, tree = 0.45, bottom = 0.34;
    };
    Proportions currentProportions() const;
    void applyProportions();
    Proportions m_proportions; // the defaults, or a restored layout's
    QByteArray m_defaultState; // QMainWindow's state as built, for resetLayout
    bool m_sized = false; // the user sized the docks: no more proportions
    bool m_settingCursor = false; // goTo() is moving the cursor: keep the reason
    QString m_reason;
    QTimer* m_insightsTimer = nullptr; // live documents: insights again at most every 2 s
    QWidget* m_current = nullptr;

    QComboBox* m_deviceBox = nullptr;
    QToolButton* m_filterButton = nullptr;
    QSlider* m_slider = nullptr;
    QSpinBox* m_indexBox = nullptr;
    bool m_updating = false;
};

} // namespace memscope::app
