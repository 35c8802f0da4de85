// One opened snapshot in its tab: the Session and every view of it, docked around the stacked timeline, plus the
// cursor controls (slider, index box, device selector, stream/pool filters) and the details pane. The
// views never talk to each other; they all follow the Session this window owns. GUI thread only.
#pragma once

#include "models/session.h"

#include <QMainWindow>

#include <memory>
#include <optional>

class QComboBox;
class QPlainTextEdit;
class QSlider;
class QSpinBox;
class QToolButton;

namespace memscope::app {

class TimelineView;
class SegmentMapView;
class CallTreeView;
class EventListView;
class OverviewView;

class DocumentWindow : public QMainWindow {
    Q_OBJECT
public:
    enum class View { Timeline, Segments, Tree, Events, Overview };
    static std::optional<View> viewFromName(const QString& name); // "timeline", "segments", "tree", ...
    static QString viewName(View view);

    explicit DocumentWindow(std::shared_ptr<const Document> document, QWidget* parent = nullptr);
    ~DocumentWindow() override;

    Session* session() const { return m_session; }
    QWidget* view(View view) const;
    // The view the user last worked in (for export); the timeline at first.
    QWidget* currentView() const;
    // Raises the dock of `view` (or focuses the timeline).
    void showView(View view);

    // Cursor steps: one entry, to the previous/next annotation boundary, to the start/end.
    void stepCursor(int64_t delta);
    void stepAnnotation(int direction);

    // One line for the status bar: cursor index and time, totals at the cursor.
    QString statusText() const;
    // The focused allocation's description and stack, as the details pane shows it.
    QString detailsText() const;

Q_SIGNALS:
    void statusChanged();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void buildControls();
    void updateControls();
    void updateDetails();
    void fillFilterMenu();
    QDockWidget* addView(QWidget* widget, const QString& title, Qt::DockWidgetArea area);

    Session* m_session = nullptr;
    TimelineView* m_timeline = nullptr;
    SegmentMapView* m_segments = nullptr;
    CallTreeView* m_tree = nullptr;
    EventListView* m_events = nullptr;
    OverviewView* m_overview = nullptr;
    QPlainTextEdit* m_details = nullptr;
    QWidget* m_current = nullptr;

    QComboBox* m_deviceBox = nullptr;
    QToolButton* m_filterButton = nullptr;
    QSlider* m_slider = nullptr;
    QSpinBox* m_indexBox = nullptr;
    bool m_updating = false;
};

} // namespace memscope::app
