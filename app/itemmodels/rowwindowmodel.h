// A window onto a flat table model: rows [first, first + capacity) of the source, no more, so that a QTableView over
// millions of rows holds only the rows it shows.
//
// A QTableView's vertical QHeaderView keeps one record per row of its model and rebuilds them all at every reset
// and filter change (Qt 6.4, qheaderview.cpp: initializeSections -> createSectionItems), hidden or not: measured
// offscreen, 102 MB and 0.68 s of the GUI thread for 13.4 M rows, 408 MB and 2.9 s for 67 M. Through a window the
// table has a screenful of rows; the view that owns the window scrolls over the source's rows with a scroll bar of
// its own and moves the window (views/eventlistview.h).
//
// Any change of the window, a reset of the source or rows added to or removed from it resets this model (a screenful
// of rows: cheap); a source dataChanged is passed on for the rows in the window. Plain table sources only (no
// children, no row moves). GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <QPointer>

namespace memscope::app {

class RowWindowModel : public QAbstractTableModel {
    Q_OBJECT
public:
    explicit RowWindowModel(QAbstractItemModel* source, QObject* parent = nullptr);

    QAbstractItemModel* source() const { return m_source; }
    // The source row of window row 0, and the most rows the window shows.
    int first() const { return m_first; }
    int capacity() const { return m_capacity; }
    // Moves and sizes the window; `first` is clamped to the source's rows (a window at the end shows fewer rows).
    // Resets this model when anything changes.
    void setWindow(int first, int capacity);
    // The source row of a window row, and the window row of a source row (-1 outside the window).
    int sourceRow(int row) const { return m_first + row; }
    int windowRow(int sourceRow) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;

private:
    int sourceRows() const;
    int clampedFirst(int first) const;
    void refresh(); // the window after a change of the source's rows: clamped again, this model reset

    QPointer<QAbstractItemModel> m_source;
    int m_first = 0;
    int m_capacity = 0;
    int m_rows = 0; // rows shown now
};

} // namespace memscope::app
