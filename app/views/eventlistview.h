// The event list view: a filter bar (actions, size range, stream, frame text) above a table of the Session's trace
// entries (EventListModel). Selecting a row (click or up/down) moves the Session cursor to the state right after
// that entry and selects its allocation; a cursor moved elsewhere selects and reveals the matching row. Hovering a
// row sets the Session's hovered allocation.
//
// The table shows a window of the model's rows, a screenful (RowWindowModel: a QTableView keeps a record per row of
// its model, 102 MB and 0.7 s of the GUI thread per reset for 13.4 M entries), and the view's own scroll bar moves
// the window over all of them: the wheel and the navigation keys (up, down, page up, page down, home, end) go to it.
// Rows below are the model's (EventListModel) rows, never the window's. GUI thread only.
#pragma once

#include "itemmodels/eventlistmodel.h"
#include "itemmodels/rowwindowmodel.h"

#include <QRect>
#include <QWidget>

class QComboBox;
class QKeyEvent;
class QLabel;
class QLineEdit;
class QMenu;
class QTableView;
class QTimer;
class QVBoxLayout;
class QPushButton;
class QScrollBar;

namespace memscope::app {

class EventListView : public QWidget {
    Q_OBJECT
public:
    // Children have object names for tests: "actionButton" (a menu of checkable actions), "minSizeEdit",
    // "maxSizeEdit", "streamCombo", "searchEdit", "countLabel", "eventTable".
    explicit EventListView(Session* session, QWidget* parent = nullptr);

    EventListModel* model() const { return m_model; }
    // The table (over a window of the model's rows) and the scroll bar over all of them.
    QTableView* table() const { return m_table; }
    QScrollBar* scrollBar() const { return m_scroll; }
    // The model row that is current (keyboard moves start there) and the selected one; -1: none.
    int currentRow() const { return m_currentRow; }
    int selectedRow() const { return m_selectedRow; }
    // Where a model row's cell is in the table's viewport; empty when the row is not in the window.
    QRect visualRect(int row, int column = 0) const;
    // Scrolls so that `row` is on screen (PositionAtCenter: mid-view; otherwise just inside the nearer edge).
    void scrollToRow(int row, bool center = true);
    // The filter the bar describes now (applied to the model after the search debounce).
    EventFilter filterFromBar() const;

    // Milliseconds between the last keystroke in the search field (or a size field) and the filter job.
    static constexpr int DebounceMs = 250;

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void applyBar();
    void fillStreams();
    void onCurrentChanged(const QModelIndex& current);
    void chooseRow(int row); // a row picked by the user: current, selected, on screen, the Session moved there
    void syncToCursor();
    bool isOnScreen(int row) const;
    void updateCountLabel();
    int pageRows() const; // rows that fit the viewport whole (at least 1)
    void updateWindow(); // the scroll bar's range and the window after a resize or a change of the model's rows
    void showRowState(); // the table's current and selected index from m_currentRow and m_selectedRow
    bool handleKey(QKeyEvent* event);

    Session* m_session;
    EventListModel* m_model;
    QPushButton* m_actionButton = nullptr;
    QMenu* m_actionMenu = nullptr;
    QLineEdit* m_minSize = nullptr;
    QLineEdit* m_maxSize = nullptr;
    QComboBox* m_stream = nullptr;
    QLineEdit* m_search = nullptr;
    QLabel* m_count = nullptr;
    QTableView* m_table = nullptr;
    RowWindowModel* m_window = nullptr;
    QScrollBar* m_scroll = nullptr;
    QVBoxLayout* m_scrollColumn = nullptr;
    int m_currentRow = -1;
    int m_selectedRow = -1;
    bool m_centerOnResize = false; // the cursor's row was scrolled to mid-view and the user has not scrolled since
    QTimer* m_debounce = nullptr;
    bool m_syncing = false; // the selection is being moved to follow the Session: don't write it back
};

} // namespace memscope::app
