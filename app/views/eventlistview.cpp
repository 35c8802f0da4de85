// EventListView: the filter bar, the table, and the two-way link between the table's current row and the Session
// cursor (guarded by m_syncing so that neither direction echoes back). GUI thread only.
#include "views/eventlistview.h"

#include "style/colors.h"

#include <QAction>
#include <QComboBox>
#include <QCoreApplication>
#include <QEvent>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMenu>
#include <QMouseEvent>
#include <QPushButton>
#include <QScrollBar>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
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

    m_window = new RowWindowModel(m_model, this);
    m_table = new QTableView(this);
    m_table->setObjectName(QStringLiteral("eventTable"));
    m_table->setModel(m_window);
    // The window is a screenful: the view's own scroll bar moves it, and nothing scrolls the table itself.
    m_table->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_table->setAutoScroll(false);
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
    m_table->setColumnWidth(EventListModel::MetadataColumn, widthOf("{\"phase\": \"warmup\"}0"));
    m_table->setColumnHidden(EventListModel::MetadataColumn, !m_session->hasUserMetadata());
    m_scroll = new QScrollBar(Qt::Vertical, this);
    m_scroll->setObjectName(QStringLiteral("eventScrollBar"));
    connect(m_scroll, &QScrollBar::valueChanged, this, [this] { updateWindow(); });
    connect(m_scroll, &QScrollBar::actionTriggered, this, [this] { m_centerOnResize = false; });
    auto* tableRow = new QHBoxLayout;
    tableRow->setContentsMargins(0, 0, 0, 0);
    tableRow->setSpacing(0);
    tableRow->addWidget(m_table, 1);
    m_scrollColumn = new QVBoxLayout; // beside the rows only, as the table's own bar would be (updateWindow)
    m_scrollColumn->setContentsMargins(0, 0, 0, 0);
    m_scrollColumn->addWidget(m_scroll);
    tableRow->addLayout(m_scrollColumn);
    layout->addLayout(tableRow, 1);

    // (A reset of the window keeps the table's selection model; setModel alone replaces it.)
    connect(m_table->selectionModel(), &QItemSelectionModel::currentChanged, this,
            [this](const QModelIndex& current) { onCurrentChanged(current); });
    // A click on the row that is already current (e.g. the cursor's row) still picks its allocation.
    connect(m_table, &QAbstractItemView::clicked, this, [this](const QModelIndex& index) { onCurrentChanged(index); });
    connect(m_table, &QAbstractItemView::entered, this, [this](const QModelIndex& index) {
        m_session->setHovered(AllocationId(m_window->data(index, EventListModel::AllocationRole).toUInt()));
    });
    m_table->viewport()->installEventFilter(this);
    m_table->installEventFilter(this);
    // The model's rows changed (a filter, another device, a live document's growth): the scroll bar's range, the
    // window, and the current and selected rows, which are the model's and meant other entries before a reset.
    connect(m_model, &QAbstractItemModel::modelReset, this, [this] {
        m_currentRow = m_selectedRow = -1;
        updateWindow();
    });
    connect(m_model, &QAbstractItemModel::rowsInserted, this, [this] { updateWindow(); });

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
    const int row = m_window->sourceRow(current.row());
    const int64_t entry = m_model->entryOfRow(row);
    if (entry < 0)
        return;
    m_currentRow = m_selectedRow = row;
    m_syncing = true;
    m_session->setSelection(
        AllocationId(m_model->data(m_model->index(row, 0), EventListModel::AllocationRole).toUInt()));
    m_session->setCursor(m_model->stateAfterEntry(entry));
    m_syncing = false;
}

void EventListView::chooseRow(int row)
{
    row = std::clamp(row, 0, m_model->rowCount() - 1);
    if (row < 0)
        return;
    if (!isOnScreen(row))
        scrollToRow(row, false);
    const int windowRow = m_window->windowRow(row);
    if (windowRow < 0)
        return;
    const QModelIndex index = m_window->index(windowRow, std::max(0, m_table->currentIndex().column()));
    m_table->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    onCurrentChanged(index); // also when it was current already (the cursor's row, filtered out of the selection)
}

int EventListView::pageRows() const
{
    const int rowHeight = std::max(1, m_table->verticalHeader()->defaultSectionSize());
    return std::max(1, m_table->viewport()->height() / rowHeight);
}

void EventListView::updateWindow()
{
    const int rows = m_model->rowCount();
    const int page = pageRows();
    {
        const QSignalBlocker block(m_scroll); // a range that clamps the value moves the window below
        m_scroll->setRange(0, std::max(0, rows - page));
        m_scroll->setPageStep(page);
        m_scroll->setSingleStep(3);
    }
    const int top = m_table->viewport()->geometry().top(); // under the column headers
    const int bottom = m_table->height() - m_table->viewport()->geometry().bottom() - 1;
    if (m_scrollColumn->contentsMargins() != QMargins(0, top, 0, bottom))
        m_scrollColumn->setContentsMargins(0, top, 0, bottom);
    // One row more than fits whole: the last one shows in part, as a table's would.
    m_window->setWindow(m_scroll->value(), page + 1);
    showRowState();
}

void EventListView::showRowState()
{
    const bool wasSyncing = m_syncing;
    m_syncing = true;
    QItemSelectionModel* sel = m_table->selectionModel();
    const int column = std::max(0, m_table->currentIndex().column());
    const int selected = m_window->windowRow(m_selectedRow);
    const int current = m_window->windowRow(m_currentRow);
    if (selected >= 0 && m_selectedRow == m_currentRow) {
        if (sel->currentIndex().row() != selected || !sel->isRowSelected(selected))
            sel->setCurrentIndex(m_window->index(selected, column),
                                 QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    } else {
        sel->clearSelection();
        if (current >= 0)
            sel->setCurrentIndex(m_window->index(current, column), QItemSelectionModel::NoUpdate);
        else
            sel->clearCurrentIndex();
    }
    m_syncing = wasSyncing;
}

void EventListView::scrollToRow(int row, bool center)
{
    const int page = pageRows();
    int first = m_scroll->value();
    if (center)
        first = row - page / 2;
    else if (row < first)
        first = row;
    else if (row >= first + page)
        first = row - page + 1;
    m_scroll->setValue(first); // valueChanged moves the window
    updateWindow(); // also when the value did not change (a window not yet sized)
}

QRect EventListView::visualRect(int row, int column) const
{
    const int windowRow = m_window->windowRow(row);
    return windowRow < 0 ? QRect() : m_table->visualRect(m_window->index(windowRow, column));
}

bool EventListView::handleKey(QKeyEvent* event)
{
    if (event->modifiers() & ~Qt::KeypadModifier)
        return false;
    m_centerOnResize = false;
    const int rows = m_model->rowCount();
    if (rows == 0)
        return false;
    const int from = m_currentRow >= 0 ? m_currentRow : m_scroll->value();
    const int page = pageRows();
    int to = from;
    switch (event->key()) {
    case Qt::Key_Up: to = m_currentRow >= 0 ? from - 1 : from; break;
    case Qt::Key_Down: to = m_currentRow >= 0 ? from + 1 : from; break;
    case Qt::Key_PageUp: to = from - page; break;
    case Qt::Key_PageDown: to = from + page; break;
    case Qt::Key_Home: to = 0; break;
    case Qt::Key_End: to = rows - 1; break;
    default: return false;
    }
    chooseRow(to);
    return true;
}

void EventListView::syncToCursor()
{
    if (m_syncing || m_model->device() != m_session->device())
        return;
    const int64_t entry = m_model->entryBeforeState(m_session->cursor());
    const int row = m_model->rowOfEntry(entry);
    // The cursor's entry filtered out (or the cursor before the first entry): nothing selected, but the nearest
    // earlier row current, so that up/down continue from the right place.
    m_selectedRow = row;
    m_currentRow = row >= 0 ? row : m_model->rowAtOrBefore(entry);
    if (m_currentRow >= 0 && !isOnScreen(m_currentRow)) {
        scrollToRow(m_currentRow); // a jump from elsewhere lands mid-view, with context on both sides
        m_centerOnResize = true; // and stays there when the view gets its size (a window being laid out)
    }
    else if (m_currentRow < 0)
        m_scroll->setValue(0);
    updateWindow();
}

bool EventListView::isOnScreen(int row) const
{
    const int windowRow = m_window->windowRow(row);
    return windowRow >= 0 && m_table->viewport()->rect().contains(m_table->visualRect(m_window->index(windowRow, 0)));
}

bool EventListView::eventFilter(QObject* watched, QEvent* event)
{
    if (m_table && watched == m_table->viewport() && event->type() == QEvent::Wheel) {
        m_centerOnResize = false;
        QCoreApplication::sendEvent(m_scroll, event); // the window scrolls, not the table
        return true;
    } else if (m_table && watched == m_table->viewport() && event->type() == QEvent::Resize) {
        QTimer::singleShot(0, this, [this] { // after the table laid itself out
            if (m_centerOnResize && m_currentRow >= 0)
                scrollToRow(m_currentRow);
            else
                updateWindow();
        });
    } else if (m_table && watched == m_table && event->type() == QEvent::KeyPress) {
        if (handleKey(static_cast<QKeyEvent*>(event)))
            return true;
    } else if (m_table && watched == m_table->viewport() && event->type() == QEvent::Leave) {
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
