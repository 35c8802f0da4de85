// The Insights dock: what the snapshot says at first sight (report/insights.h), as a tree of sections and items
// (InsightsModel) above the focused item's detail (numbers, PyTorch's advice, the stack). Activating an item
// follows its link: with a Session, the view moves the Session's device and cursor and selects the allocation, so
// every other view follows (they never hear from this one); without one (a diff tab) it only emits linkActivated
// for its owner. GUI thread only.
#pragma once

#include "itemmodels/insightsmodel.h"

#include <QPointer>
#include <QWidget>

class QPlainTextEdit;
class QTreeView;

namespace memscope::app {

class Session;

class InsightsView : public QWidget {
    Q_OBJECT
public:
    // `session` may be null (diff tabs). Children: "insightsTree" (QTreeView), "insightsDetail" (QPlainTextEdit).
    InsightsView(InsightsModel* model, Session* session, QWidget* parent = nullptr);

    InsightsModel* model() const { return m_model; }
    QTreeView* tree() const { return m_tree; }
    // Follows the link of the insight at `index` of the model (as a click does).
    void activate(const QModelIndex& index);

    QSize sizeHint() const override { return { 520, 320 }; }

Q_SIGNALS:
    void linkActivated(const QModelIndex& index);

private:
    void showDetail(const QModelIndex& index);
    void modelReset();

    InsightsModel* m_model = nullptr;
    QPointer<Session> m_session;
    QTreeView* m_tree = nullptr;
    QPlainTextEdit* m_detail = nullptr;
};

} // namespace memscope::app
