// LiveWindow (livewindow.h): a live recording's tab: the widgets, their layout and the user's actions; the
// LiveController does the rest.
#include "views/livewindow.h"

#include "views/documentwindow.h"

#include <QCheckBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <utility>

namespace memscope::app {

LiveWindow::LiveWindow(const QString& endpoint, AfterExit afterExit, QWidget* parent, const Keys& keys)
    : QWidget(parent)
    , m_controller(new LiveController(endpoint, afterExit, keys, this))
{
    m_layout = new QVBoxLayout(this);
    m_layout->setContentsMargins(0, 0, 0, 0);
    auto* bar = new QHBoxLayout;
    bar->setContentsMargins(6, 4, 6, 0);
    m_status = new QLabel(this);
    m_status->setObjectName(QStringLiteral("liveStatus"));
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_status->setWordWrap(true); // a long message (an endpoint and its error) wraps instead of widening the tab
    m_status->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    m_save = new QPushButton(tr("Save…"), this);
    m_save->setObjectName(QStringLiteral("liveSave"));
    m_save->setToolTip(tr("Write what has been recorded so far as a snapshot file"));
    m_save->setEnabled(false);
    connect(m_save, &QPushButton::clicked, this, &LiveWindow::chooseSave);
    auto* triggers = new QPushButton(tr("Triggers…"), this);
    triggers->setObjectName(QStringLiteral("liveTriggers"));
    triggers->setToolTip(tr("Save the recording automatically when reserved memory crosses a threshold or at an OOM"));
    connect(triggers, &QPushButton::clicked, this, &LiveWindow::chooseTrigger);
    m_history = new QToolButton(this);
    m_history->setObjectName(QStringLiteral("liveHistory"));
    m_history->setText(tr("Earlier history"));
    m_history->setToolTip(tr("Prepend a snapshot of this job from before the attach; open the parts of this "
                             "recording written to disk to bound its memory"));
    m_history->setPopupMode(QToolButton::InstantPopup);
    m_historyMenu = new QMenu(m_history);
    m_history->setMenu(m_historyMenu);
    updateHistoryMenu();
    m_retry = new QPushButton(tr("Retry"), this);
    m_retry->setObjectName(QStringLiteral("liveRetry"));
    m_retry->setToolTip(tr("Attach to the job again"));
    m_retry->hide();
    connect(m_retry, &QPushButton::clicked, this, &LiveWindow::retry);
    bar->addWidget(m_status, 1);
    bar->addWidget(m_retry);
    bar->addWidget(m_history);
    bar->addWidget(triggers);
    bar->addWidget(m_save);
    m_layout->addLayout(bar);
    m_placeholder = new QLabel(tr("Waiting for %1…").arg(endpoint), this);
    m_placeholder->setAlignment(Qt::AlignCenter);
    m_layout->addWidget(m_placeholder, 1);

    connect(m_controller, &LiveController::documentChanged, this, &LiveWindow::onDocumentChanged);
    connect(m_controller, &LiveController::updated, this, &LiveWindow::onUpdate);
    connect(m_controller, &LiveController::growthReady, this, [this] {
        if (m_document)
            m_document->session()->documentGrew();
    });
    connect(m_controller, &LiveController::grew, this, &LiveWindow::grew);
    connect(m_controller, &LiveController::growingChanged, this, [this](bool growing) {
        if (m_document)
            m_document->session()->setGrowing(growing);
    });
    connect(m_controller, &LiveController::statusChanged, this,
            [this] { m_status->setText(m_controller->statusText()); });
    connect(m_controller, &LiveController::spilled, this, &LiveWindow::updateHistoryMenu);
    connect(m_controller, &LiveController::saved, this, [this](const QString& path, const QString& error) {
        if (m_saving.remove(path) && !error.isEmpty())
            QMessageBox::warning(this, tr("Save failed"), error);
    });
    connect(m_controller, &LiveController::earlierHistoryLoaded, this,
            [this](const QString& path, const QString& error) {
                if (m_prepending.remove(path) && !error.isEmpty())
                    QMessageBox::warning(this, tr("Earlier history"), error);
            });
    m_status->setText(m_controller->statusText());
    m_controller->start();
}

LiveWindow::~LiveWindow()
{
    // Join the receiver thread (its last update comes through) before the widgets and the document go.
    m_controller->stop();
}

std::shared_ptr<const model::Snapshot> LiveWindow::snapshot() const
{
    return m_document ? m_document->session()->document().snapshot : nullptr;
}

void LiveWindow::onUpdate(const LiveUpdate& update)
{
    if (update.state == LiveState::Failed && !m_document)
        m_placeholder->setText(update.message);
    else if (!m_document && !update.message.isEmpty())
        m_placeholder->setText(tr("Waiting for %1…").arg(m_controller->endpoint()) + QLatin1Char('\n')
                               + update.message);
    m_retry->setVisible(update.state == LiveState::Failed && !m_document);
    m_save->setEnabled(m_controller->liveDocument() != nullptr || update.snapshot != nullptr);
}

void LiveWindow::retry()
{
    if (m_document)
        return; // (the button shows only while nothing was recorded)
    m_retry->hide();
    m_placeholder->setText(tr("Waiting for %1…").arg(m_controller->endpoint()));
    m_controller->retry();
}

void LiveWindow::onDocumentChanged(std::shared_ptr<const Document> document)
{
    if (m_document)
        replaceDocument(std::move(document));
    else
        showDocument(std::move(document));
}

// After a rotation: a new DocumentWindow on the new document, with the old one's device, dock layout and follow
// mode; the old one goes (its document lives on while the spill writer holds it).
void LiveWindow::replaceDocument(std::shared_ptr<const Document> document)
{
    DocumentWindow* old = m_document;
    auto* next = new DocumentWindow(std::move(document), this);
    next->setWindowFlags(Qt::Widget);
    if (old) {
        const std::vector<int> devices = next->session()->devices();
        if (std::find(devices.begin(), devices.end(), old->session()->device()) != devices.end())
            next->session()->setDevice(old->session()->device());
        next->restoreLayout(old->saveLayout());
        delete m_layout->replaceWidget(old, next); // the old widget's layout item is ours to delete (QLayout docs)
        old->hide();
        // A rotated-out document holds gigabytes: giving them back to the system takes a good part of a second.
        // Its last reference goes to the thread pool once the old window (and its views) are gone.
        auto keep = std::make_shared<std::shared_ptr<const Document>>(old->session()->documentPtr());
        connect(old, &QObject::destroyed, this,
                [keep] { (void)QtConcurrent::run([document = std::move(*keep)]() mutable { document.reset(); }); });
        old->deleteLater();
    }
    m_document = next;
    next->show();
    Q_EMIT documentChanged(next);
}

void LiveWindow::showDocument(std::shared_ptr<const Document> document)
{
    auto* next = new DocumentWindow(std::move(document), this);
    next->setWindowFlags(Qt::Widget); // a QMainWindow is a top-level window unless told otherwise
    delete m_layout->replaceWidget(m_placeholder, next); // the placeholder's layout item is ours to delete
    m_placeholder->hide();
    m_document = next;
    next->show();
    Q_EMIT documentChanged(next);
}

void LiveWindow::updateHistoryMenu()
{
    m_historyMenu->clear();
    m_historyMenu->addAction(tr("Prepend a Snapshot of This Job…"), this, &LiveWindow::chooseEarlierHistory);
    const QStringList& spilled = m_controller->spilledFiles();
    if (!spilled.isEmpty())
        m_historyMenu->addSection(tr("Written to disk (bounded history)"));
    for (const QString& path : spilled)
        m_historyMenu->addAction(QFileInfo(path).fileName(), this, [this, path] { Q_EMIT openRequested(path); });
}

void LiveWindow::chooseEarlierHistory()
{
    const QString path
        = QFileDialog::getOpenFileName(this, tr("A snapshot of this job from before the attach"), QString(),
                                       tr("Snapshots (*.pickle *.pkl *.json *.xz);;All files (*)"));
    if (path.isEmpty())
        return;
    m_prepending.insert(path);
    m_controller->loadEarlierHistory(path);
}

void LiveWindow::chooseTrigger()
{
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Capture triggers"));
    auto* form = new QFormLayout(&dialog);
    auto* reserved = new QDoubleSpinBox(&dialog);
    reserved->setRange(0, 1 << 20);
    reserved->setDecimals(2);
    reserved->setSuffix(tr(" GiB"));
    reserved->setSpecialValueText(tr("off"));
    reserved->setValue(double(m_controller->trigger().reservedAbove) / double(1 << 30));
    auto* oom = new QCheckBox(tr("at an out-of-memory error"), &dialog);
    oom->setChecked(m_controller->trigger().onOom);
    auto* folder = new QLineEdit(
        m_controller->trigger().folder.isEmpty() ? QDir::homePath() : m_controller->trigger().folder, &dialog);
    form->addRow(tr("Save when reserved memory rises above"), reserved);
    form->addRow(QString(), oom);
    form->addRow(tr("Into the folder"), folder);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    form->addRow(buttons);
    if (dialog.exec() != QDialog::Accepted)
        return;
    LiveTrigger t;
    t.reservedAbove = model::ByteCount(reserved->value() * double(1 << 30));
    t.onOom = oom->isChecked();
    t.folder = folder->text().trimmed();
    if (t.reservedAbove > 0 || t.onOom) {
        if (!QFileInfo(t.folder).isDir()) {
            QMessageBox::warning(this, tr("Capture triggers"), tr("%1: not a folder").arg(t.folder));
            return;
        }
    }
    m_controller->setTrigger(std::move(t));
}

void LiveWindow::chooseSave()
{
    const QString recording = tr("memscope recording: PyTorch's format, with the job and its losses (*.pickle *.json)");
    const QString plain = tr("PyTorch snapshot (*.pickle *.json)");
    QString filter = recording;
    const QString path = QFileDialog::getSaveFileName(this, tr("Save the recording"), QStringLiteral("live.pickle"),
                                                      recording + QStringLiteral(";;") + plain, &filter);
    if (path.isEmpty())
        return;
    if (!m_controller->liveDocument())
        return;
    m_saving.insert(path);
    m_controller->save(path,
                       filter != plain ? LiveController::SaveFormat::Recording : LiveController::SaveFormat::PyTorch);
}

} // namespace memscope::app
