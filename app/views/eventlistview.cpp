// EventListView: the filter bar, the table, and the two-way link between the table's current row and the Session
// cursor (guarded by m_syncing so that neither direction echoes back). GUI thread only.
#include "views/eventlistview.h"

#include "style/colors.h"

#include <QAction>
#include <QComboBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMenu>
#include <QMouseEvent>
#include <QPushButton>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <bit>

namespace memscope::app {

using namespace memscope::model;

EventListView::EventListView(Session* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
    , m_model(new EventListModel(session, this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(2);

    auto* bar = new QHBoxLayout;
    bar->setContentsMargins(4, 2, 4, 2);
    layout->addLayout(bar);

    m_actionButton = new QPushButton(this);
    m_actionButton->setObjectName(QStringLiteral("actionButton"));
    m_actionButton->setToolTip(tr("Actions shown"));
    m_actionMenu = new QMenu(m_actionButton);
    m_actionMenu->setObjectName(QStringLiteral("actionMenu"));
    m_actionMenu->installEventFilter(this); // keeps the menu open while actions are toggled
    auto setAll = [this](bool on) {
        for (QAction* a : m_actionMenu->actions())
            if (a->isCheckable()) {
                const QSignalBlocker block(a);
                a->setChecked(on);
            }
        applyBar();
    };
    m_actionMenu->addAction(tr("Show all"), this, [setAll] { setAll(true); });
    m_actionMenu->addAction(tr("Show none"), this, [setAll] { setAll(false); });
    m_actionMenu->addSeparator();
    for (uint32_t a = 0; a < uint32_t(Action::Count); ++a) {
        const auto name = actionName(Action(a));
        QAction* action = m_actionMenu->addAction(QString::fromUtf8(name.data(), qsizetype(name.size())));
        action->setCheckable(true);
        action->setChecked(true);
        action->setData(a);
        connect(action, &QAction::toggled, this, &EventListView::applyBar);
    }
    m_actionButton->setMenu(m_actionMenu);
    // Sized for its longest text, so that the bar does not jump as the text changes.
    m_actionButton->setText(tr("Actions: %1 of %2").arg(int(Action::Count)).arg(int(Action::Count)));
    m_actionButton->setMinimumWidth(m_actionButton->sizeHint().width());
    m_actionButton->setText(tr("Actions: all"));
    bar->addWidget(m_actionButton);

    auto sizeEdit = [this](const char* name, const QString& placeholder) {
        auto* edit = new QLineEdit(this);
        edit->setObjectName(QLatin1String(name));
        edit->setPlaceholderText(placeholder);
        edit->setClearButtonEnabled(true);
        edit->setToolTip(tr("A size such as 4096, 512 KiB, 1.5M or 2 GiB (powers of 1024)"));
        edit->setMaximumWidth(fontMetrics().horizontalAdvance(QLatin1Char('0')) * 14);
        connect(edit, &QLineEdit::textEdited, this, [this] { m_debounce->start(); });
        return edit;
    };
    bar->addWidget(new QLabel(tr("Size"), this));
    m_minSize = sizeEdit("minSizeEdit", tr("min"));
    bar->addWidget(m_minSize);
    bar->addWidget(new QLabel(QStringLiteral("–"), this));
    m_maxSize = sizeEdit("maxSizeEdit", tr("max"));
    bar->addWidget(m_maxSize);

    m_stream = new QComboBox(this);
    m_stream->setObjectName(QStringLiteral("streamCombo"));
    m_stream->addItem(tr("All streams"));
    connect(m_stream, &QComboBox::currentIndexChanged, this, &EventListView::applyBar);
    bar->addWidget(m_stream);

    m_search = new QLineEdit(this);
    m_search->setObjectName(QStringLiteral("searchEdit"));
    m_search->setPlaceholderText(tr("Frame text (file:line:function)…"));
    m_search->setClearButtonEnabled(true);
    m_search->setToolTip(tr("Show entries with this text in any frame of their stack (case-insensitive)"));
    connect(m_search, &QLineEdit::textEdited, this, [this] { m_debounce->start(); });
    // The clear button changes the text without textEdited.
    connect(m_search, &QLineEdit::textChanged, this, [this](const QString& t) {
        if (t.isEmpty())
            m_debounce->start();
    });
    bar->addWidget(m_search, 1);

    m_count = new QLabel(this);
    m_count->setObjectName(QStringLiteral("countLabel"));
    m_count->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
    m_count->setMinimumWidth(m_count->fontMetrics().horizontalAdvance(
                                 tr("%1 of %2 entries").arg(QLocale().toString(99999999), QLocale().toString(99999999)))
                             + 8);
    bar->addWidget(m_count);

    m_debounce = new QTimer(this);
    m_debounce->setSingleShot(true);
    m_debounce->setInterval(DebounceMs);
    connect(m_debounce, &QTimer::timeout, this, &EventListView::applyBar);

    m_table = new QTableView(this);
    m_table->setObjectName(QStringLiteral("eventTable"));
    m_table->setModel(m_model);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setShowGrid(false);
    m_table->setWordWrap(false);
    m_table->setAlternatingRowColors(true);
    m_table->setMouseTracking(true);
    m_table->setHorizontalScrollMode(QAbstractItemView::ScrollPerPixel);
    // Uniform rows: a fixed vertical header never measures a row, so millions of rows cost nothing to lay out.
    QHeaderView* rows = m_table->verticalHeader();
    rows->setSectionResizeMode(QHeaderView::Fixed);
    rows->setDefaultSectionSize(m_table->fontMetrics().height() + 6);
    rows->hide();
    // Fixed column widths from sample text: ResizeToContents would measure rows.
    QHeaderView* columns = m_table->horizontalHeader();
    columns->setStretchLastSection(true);
    columns->setHighlightSections(false);
    const QFontMetrics fm = m_table->fontMetrics();
    auto widthOf = [&fm](const char* sample) { return fm.horizontalAdvance(QLatin1String(sample)) + 16; };
    m_table->setColumnWidth(EventListModel::IndexColumn, widthOf("00000000"));
    m_table->setColumnWidth(EventListModel::TimeColumn, widthOf("Time (s)000"));
    m_table->setColumnWidth(EventListModel::ActionColumn, widthOf("segment_unmap0"));
    m_table->setColumnWidth(EventListModel::AddressColumn, widthOf("b000000000000_0000"));
    m_table->setColumnWidth(EventListModel::SizeColumn, widthOf("1000.0 MiB0"));
    m_table->setColumnWidth(EventListModel::StreamColumn, widthOf("Stream0"));
    layout->addWidget(m_table, 1);

    connect(m_table->selectionModel(), &QItemSelectionModel::currentChanged, this,
            [this](const QModelIndex& current) { onCurrentChanged(current); });
    // A click on the row that is already current (e.g. the cursor's row) still picks its allocation.
    connect(m_table, &QAbstractItemView::clicked, this, [this](const QModelIndex& index) { onCurrentChanged(index); });
    connect(m_table, &QAbstractItemView::entered, this, [this](const QModelIndex& index) {
        m_session->setHovered(AllocationId(m_model->data(index, EventListModel::AllocationRole).toUInt()));
    });
    m_table->viewport()->installEventFilter(this);

    connect(m_model, &EventListModel::rowsReady, this, [this] {
        fillStreams();
        updateCountLabel();
        syncToCursor();
    });
    connect(m_model, &EventListModel::busyChanged, this, &EventListView::updateCountLabel);
    connect(m_session, &Session::grown, this, &EventListView::updateCountLabel); // after the model appended rows
    connect(m_session, &Session::cursorChanged, this, &EventListView::syncToCursor);
    updateCountLabel();
}

EventFilter EventListView::filterFromBar() const
{
    EventFilter f;
    f.actions = 0;
    for (const QAction* a : m_actionMenu->actions())
        if (a->isCheckable() && a->isChecked())
            f.actions |= EventFilter::bit(Action(a->data().toUInt()));
    if (const auto min = parseByteSize(m_minSize->text()))
        f.minSize = *min;
    if (const auto max = parseByteSize(m_maxSize->text()))
        f.maxSize = *max;
    const QVariant stream = m_stream->currentData();
    if (stream.isValid())
        f.stream = stream.toLongLong();
    f.frameText = m_search->text().trimmed().toStdString();
    return f;
}

void EventListView::applyBar()
{
    m_debounce->stop();
    // Size fields that do not parse are shown in red and ignored.
    for (QLineEdit* edit : { m_minSize, m_maxSize }) {
        QPalette p = palette();
        if (!edit->text().trimmed().isEmpty() && !parseByteSize(edit->text()))
            p.setColor(QPalette::Text, colors::oom());
        edit->setPalette(p);
    }
    const EventFilter f = filterFromBar();
    const int shown = std::popcount(f.actions);
    m_actionButton->setText(f.actions == EventFilter::AllActions
                                ? tr("Actions: all")
                                : tr("Actions: %1 of %2").arg(shown).arg(int(Action::Count)));
    m_model->setFilter(f);
}

void EventListView::fillStreams()
{
    const QVariant current = m_stream->currentData();
    const QSignalBlocker block(m_stream);
    while (m_stream->count() > 1)
        m_stream->removeItem(1);
    const Snapshot& s = m_session->snapshot();
    for (int64_t raw : m_model->streams()) {
        m_stream->addItem(tr("Stream %1").arg(s.streamNumber(raw)), qlonglong(raw));
        m_stream->setItemData(m_stream->count() - 1, tr("cudaStream_t 0x%1").arg(QString::number(quint64(raw), 16)),
                              Qt::ToolTipRole);
    }
    const int keep = current.isValid() ? m_stream->findData(current) : 0;
    m_stream->setCurrentIndex(keep >= 0 ? keep : 0);
}

void EventListView::updateCountLabel()
{
    if (m_model->isBusy()) {
        m_count->setText(tr("filtering…"));
        return;
    }
    const QLocale locale;
    m_count->setText(
        tr("%1 of %2 entries")
            .arg(locale.toString(m_model->rowCount()), locale.toString(qlonglong(m_model->totalEntries()))));
}

void EventListView::onCurrentChanged(const QModelIndex& current)
{
    if (m_syncing || !current.isValid())
        return;
    const int64_t entry = m_model->entryOfRow(current.row());
    if (entry < 0)
        return;
    m_syncing = true;
    m_session->setSelection(AllocationId(m_model->data(current, EventListModel::AllocationRole).toUInt()));
    m_session->setCursor(m_model->stateAfterEntry(entry));
    m_syncing = false;
}

void EventListView::syncToCursor()
{
    if (m_syncing || m_model->device() != m_session->device())
        return;
    m_syncing = true;
    QItemSelectionModel* sel = m_table->selectionModel();
    const int64_t entry = m_model->entryBeforeState(m_session->cursor());
    const int row = m_model->rowOfEntry(entry);
    if (row >= 0) {
        const QModelIndex index = m_model->index(row, 0);
        const bool onScreen = isOnScreen(index); // before setCurrentIndex auto-scrolls it to an edge
        if (sel->currentIndex().row() != row || !sel->isRowSelected(row))
            sel->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
        if (!onScreen) // a jump from elsewhere lands mid-view, with context on both sides
            m_table->scrollTo(index, QAbstractItemView::PositionAtCenter);
    } else {
        // The cursor's entry is filtered out (or the cursor is before the first entry): select nothing, but keep
        // the nearest earlier row current so that up/down continue from the right place.
        sel->clearSelection();
        const int near = m_model->rowAtOrBefore(entry);
        if (near >= 0) {
            const bool onScreen = isOnScreen(m_model->index(near, 0));
            sel->setCurrentIndex(m_model->index(near, 0), QItemSelectionModel::NoUpdate);
            if (!onScreen)
                m_table->scrollTo(m_model->index(near, 0), QAbstractItemView::PositionAtCenter);
        } else {
            sel->clearCurrentIndex();
            m_table->scrollToTop();
        }
    }
    m_syncing = false;
}

bool EventListView::isOnScreen(const QModelIndex& index) const
{
    return m_table->viewport()->rect().contains(m_table->visualRect(index));
}

bool EventListView::eventFilter(QObject* watched, QEvent* event)
{
    if (m_table && watched == m_table->viewport() && event->type() == QEvent::Leave) {
        m_session->setHovered(NoAllocation);
    } else if (m_table && watched == m_table->viewport() && event->type() == QEvent::MouseMove) {
        // `entered` reports rows only: below the last row, nothing is hovered.
        if (!m_table->indexAt(static_cast<QMouseEvent*>(event)->position().toPoint()).isValid())
            m_session->setHovered(NoAllocation);
    } else if (watched == m_actionMenu && event->type() == QEvent::MouseButtonRelease) {
        // Toggle checkable actions without closing the menu, so that several can be changed in one visit.
        QAction* action = m_actionMenu->activeAction();
        if (action && action->isCheckable()) {
            action->trigger();
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

} // namespace memscope::app
