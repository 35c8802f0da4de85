// AttachDialog (attachdialog.h).
#include "views/attachdialog.h"

#include <QDateTime>
#include <QDialogButtonBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSettings>
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
            if (e.pid > 0 && e.alive) {
                QFile cmdline(QStringLiteral("/proc/%1/cmdline").arg(e.pid));
                if (cmdline.open(QIODevice::ReadOnly)) {
                    QByteArray raw = cmdline.read(4096);
                    while (raw.endsWith('\0'))
                        raw.chop(1);
                    e.commandLine = QString::fromLocal8Bit(raw.replace('\0', ' '));
                }
            }
            e.ageSeconds = std::max<qint64>(0, info.lastModified().secsTo(QDateTime::currentDateTime()));
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
    auto* keys = new QFormLayout;
    m_serverKey = new QLineEdit(this);
    m_serverKey->setObjectName(QStringLiteral("curveServerKey"));
    m_serverKey->setPlaceholderText(tr("only for agents that require CURVE (remote tcp://)"));
    m_secretKey = new QLineEdit(this);
    m_secretKey->setObjectName(QStringLiteral("curveSecretKey"));
    m_secretKey->setPlaceholderText(tr("memscope-cli keygen NAME writes NAME.key and NAME.pub"));
    keys->addRow(tr("Agent's public key file:"), m_serverKey);
    keys->addRow(tr("Your secret key file:"), m_secretKey);
    layout->addLayout(keys);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    buttons->button(QDialogButtonBox::Ok)->setText(tr("Attach"));
    QPushButton* rescan = buttons->addButton(tr("Refresh"), QDialogButtonBox::ResetRole);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(rescan, &QPushButton::clicked, this, &AttachDialog::refresh);
    connect(m_list, &QListWidget::currentItemChanged, this, [this](QListWidgetItem* item) {
        if (!item)
            return;
        const QString endpoint = item->data(Qt::UserRole).toString();
        m_edit->setText(endpoint);
        QSettings settings;
        const QString key = QString::fromLatin1(endpoint.toUtf8().toHex());
        m_serverKey->setText(settings.value(QStringLiteral("live/keys/%1/server").arg(key)).toString());
        m_secretKey->setText(settings.value(QStringLiteral("live/keys/%1/secret").arg(key)).toString());
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

namespace {
    QString formatAge(qint64 seconds)
    {
        if (seconds < 120)
            return QObject::tr("%1 s").arg(seconds);
        if (seconds < 7200)
            return QObject::tr("%1 min").arg(seconds / 60);
        if (seconds < 2 * 86400)
            return QObject::tr("%1 h").arg(seconds / 3600);
        return QObject::tr("%1 days").arg(seconds / 86400);
    }
} // namespace

void AttachDialog::refresh()
{
    m_list->clear();
    QStringList listed;
    for (const FoundEndpoint& e : discoverEndpoints()) {
        QString text = e.endpoint;
        if (e.pid)
            text += e.alive ? tr(" — pid %1").arg(e.pid) : tr(" — pid %1, exited").arg(e.pid);
        if (e.alive && e.ageSeconds >= 0)
            text += tr(", publishing for %1").arg(formatAge(e.ageSeconds));
        if (!e.commandLine.isEmpty())
            text += QStringLiteral(" — ") + e.commandLine.left(120);
        auto* item = new QListWidgetItem(text, m_list);
        item->setData(Qt::UserRole, e.endpoint);
        item->setToolTip(e.commandLine);
        if (!e.alive)
            item->setForeground(palette().color(QPalette::Disabled, QPalette::Text));
        listed << e.endpoint;
    }
    for (const QString& recent : recentEndpoints()) {
        if (listed.contains(recent))
            continue;
        auto* item = new QListWidgetItem(tr("%1 — recent").arg(recent), m_list);
        item->setData(Qt::UserRole, recent);
    }
    if (m_list->count() > 0 && m_edit->text().isEmpty())
        m_list->setCurrentRow(0);
}

QStringList AttachDialog::recentEndpoints()
{
    return QSettings().value(QStringLiteral("live/recentEndpoints")).toStringList();
}

void AttachDialog::rememberEndpoint(const QString& endpoint, const QString& serverKey, const QString& secretKey)
{
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("live/recentEndpoints")).toStringList();
    recent.removeAll(endpoint);
    recent.prepend(endpoint);
    while (recent.size() > 10)
        recent.removeLast();
    settings.setValue(QStringLiteral("live/recentEndpoints"), recent);
    // Key files are remembered per endpoint (their paths, never their contents).
    settings.setValue(QStringLiteral("live/keys/%1/server").arg(QString::fromLatin1(endpoint.toUtf8().toHex())), serverKey);
    settings.setValue(QStringLiteral("live/keys/%1/secret").arg(QString::fromLatin1(endpoint.toUtf8().toHex())), secretKey);
}

QString AttachDialog::curveServerKey() const { return m_serverKey->text().trimmed(); }
QString AttachDialog::curveSecretKey() const { return m_secretKey->text().trimmed(); }

QString AttachDialog::endpoint() const { return m_edit->text().trimmed(); }

QStringList AttachDialog::listedRows() const
{
    QStringList rows;
    for (int i = 0; i < m_list->count(); ++i)
        rows << m_list->item(i)->text();
    return rows;
}

} // namespace memscope::app
