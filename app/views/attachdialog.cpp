// AttachDialog (attachdialog.h).
#include "views/attachdialog.h"

#include <QDialogButtonBox>
#include <QDir>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::app {

namespace {

    bool processAlive(qint64 pid)
    {
        // kill(pid, 0) checks existence without signalling; EPERM means it exists but is someone else's.
        return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
    }

} // namespace

std::vector<FoundEndpoint> discoverEndpoints()
{
    QStringList dirs;
    const QString runtime = qEnvironmentVariable("XDG_RUNTIME_DIR");
    if (!runtime.isEmpty())
        dirs << runtime;
    dirs << QStringLiteral("/tmp/memscope-%1").arg(::getuid());
    std::vector<FoundEndpoint> found;
    for (const QString& dir : dirs) {
        const QFileInfoList entries = QDir(dir).entryInfoList({ QStringLiteral("memscope-*") },
                                                              QDir::System | QDir::Files | QDir::NoDotAndDotDot);
        for (const QFileInfo& info : entries) {
            const QString name = info.fileName();
            if (name.endsWith(QLatin1String("-state")))
                continue; // the ROUTER beside each PUB socket
            struct stat st { };
            if (::stat(QFile::encodeName(info.absoluteFilePath()).constData(), &st) != 0 || !S_ISSOCK(st.st_mode))
                continue;
            FoundEndpoint e;
            e.endpoint = QStringLiteral("ipc://") + info.absoluteFilePath();
            bool ok = false;
            e.pid = QStringView(name).mid(int(qstrlen("memscope-"))).toLongLong(&ok);
            if (!ok)
                e.pid = 0;
            e.alive = e.pid == 0 || processAlive(e.pid);
            if (std::none_of(found.begin(), found.end(),
                             [&](const FoundEndpoint& f) { return f.endpoint == e.endpoint; }))
                found.push_back(e);
        }
    }
    std::sort(found.begin(), found.end(), [](const FoundEndpoint& a, const FoundEndpoint& b) {
        return a.alive != b.alive ? a.alive : a.pid > b.pid;
    });
    return found;
}

AttachDialog::AttachDialog(QWidget* parent)
    : QDialog(parent)
{
    setWindowTitle(tr("Attach to a running job"));
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(new QLabel(tr("Jobs publishing on this machine (run with the memscope agent; "
                                    "MEMSCOPE_ENDPOINT sets another endpoint):"),
                                 this));
    m_list = new QListWidget(this);
    m_list->setObjectName(QStringLiteral("endpoints"));
    layout->addWidget(m_list, 1);
    layout->addWidget(new QLabel(tr("Endpoint (ipc://PATH or tcp://HOST:PORT):"), this));
    m_edit = new QLineEdit(this);
    m_edit->setObjectName(QStringLiteral("endpoint"));
    m_edit->setPlaceholderText(QStringLiteral("ipc:///tmp/job"));
    layout->addWidget(m_edit);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    buttons->button(QDialogButtonBox::Ok)->setText(tr("Attach"));
    QPushButton* rescan = buttons->addButton(tr("Refresh"), QDialogButtonBox::ResetRole);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(rescan, &QPushButton::clicked, this, &AttachDialog::refresh);
    connect(m_list, &QListWidget::currentItemChanged, this, [this](QListWidgetItem* item) {
        if (item)
            m_edit->setText(item->data(Qt::UserRole).toString());
    });
    connect(m_list, &QListWidget::itemDoubleClicked, this, &QDialog::accept);
    auto updateOk = [this, buttons] {
        const QString t = m_edit->text().trimmed();
        buttons->button(QDialogButtonBox::Ok)
            ->setEnabled(t.startsWith(QLatin1String("ipc://")) || t.startsWith(QLatin1String("tcp://")));
    };
    connect(m_edit, &QLineEdit::textChanged, this, updateOk);
    refresh();
    updateOk();
    resize(560, 360);
}

void AttachDialog::refresh()
{
    m_list->clear();
    for (const FoundEndpoint& e : discoverEndpoints()) {
        QString text = e.endpoint;
        if (e.pid)
            text += e.alive ? tr(" — pid %1").arg(e.pid) : tr(" — pid %1, exited").arg(e.pid);
        auto* item = new QListWidgetItem(text, m_list);
        item->setData(Qt::UserRole, e.endpoint);
        if (!e.alive)
            item->setForeground(palette().color(QPalette::Disabled, QPalette::Text));
    }
    if (m_list->count() > 0 && m_edit->text().isEmpty())
        m_list->setCurrentRow(0);
}

QString AttachDialog::endpoint() const { return m_edit->text().trimmed(); }

QStringList AttachDialog::listedRows() const
{
    QStringList rows;
    for (int i = 0; i < m_list->count(); ++i)
        rows << m_list->item(i)->text();
    return rows;
}

} // namespace memscope::app
