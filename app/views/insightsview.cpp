// InsightsView: the insights tree and the detail pane. See insightsview.h.
#include "views/insightsview.h"

#include "document/session.h"

#include <QHeaderView>
#include <QPlainTextEdit>
#include <QSplitter>
#include <QTreeView>
#include <QVBoxLayout>

namespace memscope::app {

InsightsView::InsightsView(InsightsModel* model, Session* session, QWidget* parent)
    : QWidget(parent)
    , m_model(model)
    , m_session(session)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    // The list beside its detail: the dock is wide and short under the timeline.
    auto* split = new QSplitter(Qt::Horizontal, this);
    m_tree = new QTreeView(split);
    m_tree->setObjectName(QStringLiteral("insightsTree"));
    m_tree->setModel(m_model);
    m_tree->setUniformRowHeights(true);
    m_tree->setAllColumnsShowFocus(true);
    m_tree->setTextElideMode(Qt::ElideRight); // the share and the size come first
    m_tree->header()->setStretchLastSection(false);
    m_tree->header()->setSectionResizeMode(InsightsModel::TitleColumn, QHeaderView::Stretch);
    m_tree->header()->setSectionResizeMode(InsightsModel::BytesColumn, QHeaderView::ResizeToContents);
    m_detail = new QPlainTextEdit(split);
    m_detail->setObjectName(QStringLiteral("insightsDetail"));
    m_detail->setReadOnly(true);
    m_detail->setLineWrapMode(QPlainTextEdit::WidgetWidth);
    m_detail->setPlaceholderText(tr("Computing the insights…"));
    split->addWidget(m_tree);
    split->addWidget(m_detail);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    split->setChildrenCollapsible(false);
    layout->addWidget(split);

    connect(m_tree->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex& current) { showDetail(current); });
    // One click follows a link (the items read as links); keyboard users press Enter.
    connect(m_tree, &QTreeView::clicked, this, &InsightsView::activate);
    connect(m_tree, &QTreeView::activated, this, &InsightsView::activate);
    connect(m_model, &QAbstractItemModel::modelReset, this, &InsightsView::modelReset);
    modelReset();
}

void InsightsView::modelReset()
{
    m_tree->expandAll();
    if (!m_model->insights()) {
        m_detail->setPlainText({});
        return;
    }
    if (m_model->rowCount() == 0) {
        m_detail->setPlainText(tr("Nothing to point at: the snapshot has no trace and no allocations."));
        return;
    }
    // The first thing to read: the item about where the window stands (the OOM it opened at, on the device shown),
    // else the top consumer at the peak of the device shown, else the first item (the first OOM, or what grew).
    QModelIndex first, topConsumer, anyTopConsumer;
    for (int sec = 0; sec < m_model->rowCount() && !first.isValid(); ++sec) {
        const QModelIndex section = m_model->index(sec, 0);
        for (int r = 0; r < m_model->rowCount(section); ++r) {
            const QModelIndex row = m_model->index(r, 0, section);
            const report::Insight* it = m_model->insightAt(row);
            if (!it)
                continue;
            const bool here = !m_session || it->device == m_session->device();
            if (it->kind == report::InsightKind::Oom && here && m_session && it->index == m_session->cursor()) {
                first = row;
                break;
            }
            if (it->kind == report::InsightKind::TopConsumer) {
                if (here && !topConsumer.isValid())
                    topConsumer = row;
                if (!anyTopConsumer.isValid())
                    anyTopConsumer = row;
            }
        }
    }
    if (!first.isValid())
        first = topConsumer.isValid() ? topConsumer : anyTopConsumer;
    if (!first.isValid())
        first = m_model->index(0, 0, m_model->index(0, 0));
    m_tree->setCurrentIndex(first);
    showDetail(first);
}

void InsightsView::showDetail(const QModelIndex& index)
{
    const report::Insight* it = m_model->insightAt(index);
    if (!it) {
        m_detail->setPlainText(index.isValid() ? tr("Click an item to go to it: the cursor moves there and the "
                                                    "allocation it names is selected in every view.")
                                               : QString());
        return;
    }
    QString text = QString::fromStdString(it->title) + QStringLiteral("\n\n") + QString::fromStdString(it->detail);
    if (it->index >= 0)
        text += tr("\nClick to go to entry %L1.").arg(it->index);
    m_detail->setPlainText(text);
}

void InsightsView::activate(const QModelIndex& index)
{
    const QModelIndex row = index.siblingAtColumn(0);
    const report::Insight* it = m_model->insightAt(row);
    if (!it)
        return;
    if (m_tree->currentIndex() != row)
        m_tree->setCurrentIndex(row);
    if (m_session && it->index >= 0) {
        m_session->setDevice(it->device);
        m_session->setCursor(it->index);
        m_session->setSelection(it->allocation);
    }
    Q_EMIT linkActivated(row);
}

} // namespace memscope::app
