// The rank-group tab: one row per rank of a distributed job (RankGroupModel), the median rank tinted blue and the
// outlier red, sortable. A double click (or "Diff against median") asks for a diff of the median rank (A) against
// that rank (B); "Diff selected" diffs the two selected ranks. The view only emits diffRequested; the main window
// opens the tab. GUI thread only.
#pragma once

#include "document/rankgroup.h"

#include <QWidget>

class QLabel;
class QSortFilterProxyModel;
class QTableView;

namespace memscope::app {

class RankGroupView : public QWidget {
    Q_OBJECT
public:
    // Children for tests: "rankTable" (QTableView), "diffMedianButton", "diffSelectedButton", "rankSummary".
    explicit RankGroupView(std::shared_ptr<const RankGroup> group, QWidget* parent = nullptr);

    RankGroupModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    const RankGroup& group() const { return m_model->group(); }
    // A new group (e.g. the live ranks' figures now): the table keeps its sorting and selection.
    void setGroup(std::shared_ptr<const RankGroup> group);
    // Emits diffRequested(median, rank of `row` of the model); nothing for the median itself.
    void diffAgainstMedian(int row);

Q_SIGNALS:
    // Indices into group().documents: A, B.
    void diffRequested(int a, int b);

private:
    std::vector<int> selectedRows() const;
    void updateSummary();

    RankGroupModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QTableView* m_table;
    QLabel* m_summary;
};

} // namespace memscope::app
