// AttachDialog (attachdialog.h).
#include "views/attachdialog.h"

#include "client/agentclient.h"
#include "wire/endpoint.h"

#include <QDateTime>
#include <QDialogButtonBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSettings>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <chrono>
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

    // When process `pid` started, in seconds since the epoch; 0 when unknown. proc(5): field 22 of /proc/PID/stat is
    // the start time in clock ticks after boot, and /proc/stat's btime the boot time.
    qint64 processStartSecsSinceEpoch(qint64 pid)
    {
        QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
        QFile system(QStringLiteral("/proc/stat"));
        if (!stat.open(QIODevice::ReadOnly) || !system.open(QIODevice::ReadOnly))
            return 0;
        const QByteArray line = stat.readAll();
        const qsizetype close = line.lastIndexOf(')'); // the command name may hold spaces and parentheses
        if (close < 0)
            return 0;
        const QList<QByteArray> fields = line.mid(close + 2).split(' '); // from field 3 (state) on
        if (fields.size() < 20)
            return 0;
        bool ok = false;
        const qint64 ticks = fields[19].toLongLong(&ok);
        const long hz = ::sysconf(_SC_CLK_TCK);
        if (!ok || hz <= 0)
            return 0;
        qint64 boot = 0;
        for (const QByteArray& l : system.readAll().split('\n'))
            if (l.startsWith("btime "))
                boot = l.mid(6).trimmed().toLongLong();
        return boot > 0 ? boot + ticks / hz : 0;
    }

} // namespace

std::vector<FoundEndpoint> discoverEndpoints()
{
    // The agent's default folders and names (wire/endpoint.h).
    QStringList dirs;
    if (const std::string runtime = wire::runtimeSocketFolder(); !runtime.empty())
        dirs << QString::fromStdString(runtime);
    dirs << QString::fromStdString(wire::fallbackSocketFolder());
    std::vector<FoundEndpoint> found;
    for (const QString& dir : dirs) {
        const QString pattern = QString::fromStdString(std::string(wire::SocketNamePrefix)) + QLatin1Char('*');
        const QFileInfoList entries
            = QDir(dir).entryInfoList({ pattern }, QDir::System | QDir::Files | QDir::NoDotAndDotDot);
        for (const QFileInfo& info : entries) {
            const wire::SocketName name = wire::parseSocketName(QFile::encodeName(info.fileName()).toStdString());
            if (!name.memscope || name.state)
                continue; // the ROUTER beside each PUB socket
            struct stat st { };
            if (::stat(QFile::encodeName(info.absoluteFilePath()).constData(), &st) != 0 || !S_ISSOCK(st.st_mode))
                continue;
            FoundEndpoint e;
            e.endpoint = QStringLiteral("ipc://") + info.absoluteFilePath();
            e.pid = name.pid; // 0: a name the user chose
            e.alive = e.pid == 0 || processAlive(e.pid);
            // A socket older than the process with its pid is a dead job's whose pid was reused.
            if (e.alive && e.pid > 0) {
                const qint64 started = processStartSecsSinceEpoch(e.pid);
                if (started > 0 && info.lastModified().toSecsSinceEpoch() + 2 < started)
                    e.alive = false;
            }
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

AgentInfo queryAgent(const QString& endpoint, int timeoutMs)
{
    struct Hello : client::Listener {
        void onState(const viewer::DecodedState& state, const client::StateChange&) override
        {
            info.answered = true;
            info.devices = state.hello.deviceCount;
            info.agentVersion = QString::fromUtf8(state.hello.agentVersion);
            info.host = QString::fromUtf8(state.hello.host);
            info.startedMsecsSinceEpoch = qint64(state.hello.clockBaseNs / 1000000);
        }
        void onEvents(std::span<const wire::EventRecord>) override { }
        void onError(const client::ClientError& e) override { info.error = QString::fromStdString(e.message); }
        AgentInfo info;
    } listener;
    client::ClientOptions options;
    options.endpoint = endpoint.toStdString();
    options.answerTimeout = std::chrono::milliseconds(timeoutMs);
    client::AgentClient agent(options, listener);
    if (!agent.start())
        return listener.info;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (!listener.info.answered && listener.info.error.isEmpty() && std::chrono::steady_clock::now() < deadline)
        agent.poll(std::chrono::milliseconds(20));
    return listener.info;
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
    ++m_generation;
    m_list->clear();
    QStringList listed;
    for (const FoundEndpoint& e : discoverEndpoints()) {
        QString text = e.endpoint;
        if (e.pid)
            text += e.alive ? tr(" — pid %1").arg(e.pid) : tr(" — pid %1, exited").arg(e.pid);
        if (e.alive && e.ageSeconds >= 0)
            text += tr(", publishing for %1").arg(formatAge(e.ageSeconds));
        auto* item = new QListWidgetItem(text, m_list);
        item->setData(Qt::UserRole + 1, text); // the head; the agent's answer goes between it and the command
        item->setData(Qt::UserRole + 2, e.commandLine.left(120));
        if (!e.commandLine.isEmpty())
            item->setText(text + QStringLiteral(" — ") + e.commandLine.left(120));
        item->setData(Qt::UserRole, e.endpoint);
        item->setToolTip(e.commandLine);
        if (!e.alive)
            item->setForeground(palette().color(QPalette::Disabled, QPalette::Text));
        listed << e.endpoint;
        if (!e.alive)
            continue;
        // The agent's own word on its devices, version and host, asked off the GUI thread; the row gains it.
        auto* watcher = new QFutureWatcher<AgentInfo>(this);
        const int generation = m_generation;
        const QString endpoint = e.endpoint;
        connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation, endpoint] {
            watcher->deleteLater();
            if (generation != m_generation)
                return;
            const AgentInfo info = watcher->result();
            for (int r = 0; r < m_list->count(); ++r) {
                QListWidgetItem* it = m_list->item(r);
                if (it->data(Qt::UserRole).toString() != endpoint || !info.answered)
                    continue;
                const QString devices
                    = info.devices == 1 ? tr("1 device") : tr("%1 devices").arg(info.devices);
                QString row = it->data(Qt::UserRole + 1).toString()
                    + tr(" — %1, agent %2 on %3").arg(devices, info.agentVersion, info.host);
                if (const QString command = it->data(Qt::UserRole + 2).toString(); !command.isEmpty())
                    row += QStringLiteral(" — ") + command;
                it->setText(row);
            }
        });
        watcher->setFuture(QtConcurrent::run(queryAgent, endpoint, 800));
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
    // Key files are remembered per endpoint (their paths, never their contents), as long as the endpoint is recent:
    // the keys of one that left the list go with it (they had piled up, two entries for every endpoint ever attached
    // to, keys or none).
    auto group = [](const QString& e) { return QString::fromLatin1(e.toUtf8().toHex()); };
    QStringList kept;
    for (const QString& e : recent)
        kept.append(group(e));
    settings.beginGroup(QStringLiteral("live/keys"));
    for (const QString& g : settings.childGroups())
        if (!kept.contains(g))
            settings.remove(g);
    if (serverKey.isEmpty() && secretKey.isEmpty()) {
        settings.remove(group(endpoint));
    } else {
        settings.setValue(group(endpoint) + QStringLiteral("/server"), serverKey);
        settings.setValue(group(endpoint) + QStringLiteral("/secret"), secretKey);
    }
    settings.endGroup();
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
