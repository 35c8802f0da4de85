// The event list view: a filter bar (actions, size range, stream, frame text) above a table of the Session's trace
// entries (EventListModel). Selecting a row (click or up/down) moves the Session cursor to the state right after
// that entry and selects its allocation; a cursor moved elsewhere selects and reveals the matching row. Hovering a
// row sets the Session's hovered allocation. GUI thread only.
#pragma once

#include "itemmodels/eventlistmodel.h"

#include <QWidget>

class QComboBox;
class QLabel;
class QLineEdit;
class QMenu;
class QTableView;
class QTimer;
class QPushButton;

namespace memscope::app {

class EventListView : public QWidget {
    Q_OBJECT
public:
    // Children have object names for tests: "actionButton" (a menu of checkable actions), "minSizeEdit",
    // "maxSizeEdit", "streamCombo", "searchEdit", "countLabel", "eventTable".
    explicit EventListView(Session* session, QWidget* parent = nullptr);

    EventListModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
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
    void syncToCursor();
    bool isOnScreen(const QModelIndex& index) const;
    void updateCountLabel();

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
    QTimer* m_debounce = nullptr;
    bool m_syncing = false; // the selection is being moved to follow the Session: don't write it back
};

} // namespace memscope::app
