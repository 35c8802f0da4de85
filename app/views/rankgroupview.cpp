// RankGroupView: see rankgroupview.h.
#include "views/rankgroupview.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>

namespace memscope::app {

RankGroupView::RankGroupView(std::shared_ptr<const RankGroup> group, QWidget* parent)
    : QWidget(parent)
    , m_model(new RankGroupModel(this))
    , m_proxy(new QSortFilterProxyModel(this))
{
    setObjectName(QStringLiteral("rankGroupView"));
    m_model->setGroup(std::move(group));
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(RankGroupModel::SortRole);

    auto* layout = new QVBoxLayout(this);
    m_summary = new QLabel(this);
    m_summary->setObjectName(QStringLiteral("rankSummary"));
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setWordWrap(true);
    updateSummary();
    layout->addWidget(m_summary);

    m_table = new QTableView(this);
    m_table->setObjectName(QStringLiteral("rankTable"));
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(RankGroupModel::RankColumn, Qt::AscendingOrder);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setSectionResizeMode(RankGroupModel::FileColumn, QHeaderView::Stretch);
    connect(m_table, &QTableView::doubleClicked, this,
            [this](const QModelIndex& i) { diffAgainstMedian(m_proxy->mapToSource(i).row()); });
    layout->addWidget(m_table, 1);

    auto* buttons = new QHBoxLayout;
    auto* median = new QPushButton(tr("Diff against median"), this);
    median->setObjectName(QStringLiteral("diffMedianButton"));
    connect(median, &QPushButton::clicked, this, [this] {
        const auto rows = selectedRows();
        if (!rows.empty())
            diffAgainstMedian(rows.front());
    });
    auto* selected = new QPushButton(tr("Diff selected (first → second)"), this);
    selected->setObjectName(QStringLiteral("diffSelectedButton"));
    connect(selected, &QPushButton::clicked, this, [this] {
        const auto rows = selectedRows();
        if (rows.size() == 2)
            Q_EMIT diffRequested(rows[0], rows[1]);
    });
    buttons->addWidget(median);
    buttons->addWidget(selected);
    buttons->addStretch(1);
    layout->addLayout(buttons);
}

void RankGroupView::updateSummary()
{
    const RankGroup& g = m_model->group();
    QString text = tr("<b>%1 ranks</b>.").arg(g.ranks.size());
    if (g.median >= 0)
        text += tr(" Median peak allocated: rank %1, %2.")
                    .arg(g.ranks[size_t(g.median)].rank)
                    .arg(Session::formatBytes(g.ranks[size_t(g.median)].peakAllocated));
    if (g.outlier >= 0)
        text += tr(" <span style=\"color:#b01010\"><b>Outlier: rank %1</b> (peak %2, %3 vs the median)</span>.")
                    .arg(g.ranks[size_t(g.outlier)].rank)
                    .arg(Session::formatBytes(g.ranks[size_t(g.outlier)].peakAllocated),
                         m_model->index(g.outlier, RankGroupModel::DeviationColumn).data().toString());
    text += tr(" Double-click a rank to diff it against the median.");
    m_summary->setText(text);
}

void RankGroupView::setGroup(std::shared_ptr<const RankGroup> group)
{
    const std::vector<int> selected = selectedRows();
    m_model->setGroup(std::move(group));
    for (int row : selected)
        if (row < m_model->rowCount())
            m_table->selectionModel()->select(m_proxy->mapFromSource(m_model->index(row, 0)),
                                              QItemSelectionModel::Select | QItemSelectionModel::Rows);
    updateSummary();
}

void RankGroupView::diffAgainstMedian(int row)
{
    const int median = m_model->group().median;
    if (median >= 0 && row >= 0 && row != median)
        Q_EMIT diffRequested(median, row);
}

std::vector<int> RankGroupView::selectedRows() const
{
    std::vector<int> rows;
    for (const QModelIndex& i : m_table->selectionModel()->selectedRows())
        rows.push_back(m_proxy->mapToSource(i).row());
    std::sort(rows.begin(), rows.end());
    return rows;
}

} // namespace memscope::app
