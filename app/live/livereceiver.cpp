// LiveReceiver (livereceiver.h): a client::AgentClient (the same client as `memscope-cli record`) feeding a
// viewer::Recorder on its own QThread; the GUI thread only ever sees immutable LiveUpdates, delivered through queued
// calls at most every ~250 ms (coalesced, never one per batch).
#include "live/livereceiver.h"

#include "wire/endpoint.h"

#include <QCoreApplication>
#include <QThread>

#include <chrono>
#include <utility>

namespace memscope::app {

namespace {

    using Clock = std::chrono::steady_clock;

    // How often a fresh snapshot copy goes to the GUI while events flow: copying and replaying the whole snapshot
    // costs far more than one frame, so refresh at 4 Hz rather than the 30–60 Hz the style's batch rule allows.
    constexpr std::chrono::milliseconds PublishInterval { 250 };
    // Incremental mode hands over only what is new, so it may refresh as often as a frame (the style's ~30 ms).
    constexpr std::chrono::milliseconds DeltaInterval { 30 };
    constexpr std::chrono::milliseconds PollInterval { 50 };

    // What the client reports, kept for the receiver loop (all on the receiver thread).
    class Listener : public client::RecordingListener {
    public:
        void onState(const viewer::DecodedState& state, const client::StateChange& change) override
        {
            client::RecordingListener::onState(state, change);
            warning.clear(); // attached (again): what went wrong before is over
            if (change.kind == client::StateKind::Restarted)
                previousPid = change.previousPid;
            changed = urgent = true;
        }
        void onEvents(std::span<const wire::EventRecord> events) override
        {
            client::RecordingListener::onEvents(events);
            changed = true;
        }
        void onStackDef(const viewer::DecodedStackDef& def) override
        {
            client::RecordingListener::onStackDef(def);
            changed = true;
        }
        void onNote(const viewer::DecodedNote& note) override
        {
            client::RecordingListener::onNote(note);
            changed = true;
        }
        void onGoodbye(const wire::Goodbye& goodbye) override
        {
            client::RecordingListener::onGoodbye(goodbye);
            changed = urgent = true;
        }
        void onLink(client::Link) override { urgent = true; }
        void onError(const client::ClientError& e) override
        {
            if (e.kind == client::ErrorKind::NoAnswer && waitForJob && !e.fatal)
                warning = QString::fromStdString(e.message) + LiveReceiver::tr(" — waiting for it");
            else if (e.fatal || e.kind == client::ErrorKind::NoAnswer)
                failure = QString::fromStdString(e.message);
            else
                warning = QString::fromStdString(e.message);
            urgent = true;
        }

        bool waitForJob = false; // LiveReceiver::setWaitForJob
        bool changed = false; // the recorder changed since the last snapshot copy
        bool urgent = false; // hand an update over now (not at the next interval)
        uint32_t previousPid = 0;
        QString failure, warning;
    };

} // namespace

LiveReceiver::LiveReceiver(QString endpoint, QObject* parent)
    : QObject(parent)
    , m_endpoint(std::move(endpoint))
{
}

LiveReceiver::~LiveReceiver() { stop(); }

QString LiveReceiver::stateName(LiveState state)
{
    switch (state) {
    case LiveState::Connecting:
        return tr("connecting");
    case LiveState::Live:
        return tr("live");
    case LiveState::Silent:
        return tr("silent");
    case LiveState::Exited:
        return tr("the job exited");
    case LiveState::Failed:
        return tr("failed");
    case LiveState::Stopped:
        return tr("stopped");
    case LiveState::Reconnecting:
        return tr("reconnecting…");
    }
    return {};
}

bool LiveReceiver::restart()
{
    if (m_thread) {
        m_stop = true;
        m_thread->wait();
        delete m_thread;
        m_thread = nullptr;
    }
    QCoreApplication::removePostedEvents(this, QEvent::MetaCall); // the old run's last updates
    m_finished = false;
    m_haveLast = false;
    m_lastDelta = nullptr;
    m_lastSnapshot = nullptr;
    m_latest = LiveUpdate {};
    return start();
}

bool LiveReceiver::isRunning() const { return m_thread && m_thread->isRunning(); }

bool LiveReceiver::start()
{
    if (m_thread)
        return true;
    if (const std::string why = wire::endpointProblem(m_endpoint.toStdString()); !why.empty()) {
        LiveUpdate u;
        u.state = LiveState::Failed;
        u.message = tr("%1: %2").arg(m_endpoint, QString::fromStdString(why));
        deliver(std::move(u));
        return false;
    }
    m_stop = false;
    m_thread = QThread::create([this] { run(); });
    m_thread->setObjectName(QStringLiteral("memscope-live"));
    m_thread->start();
    return true;
}

void LiveReceiver::stop()
{
    if (!m_thread)
        return;
    m_stop = true;
    m_thread->wait();
    delete m_thread;
    m_thread = nullptr;
    if (!m_finished) {
        // Updates the thread queued before it ended come first: in incremental mode each carries a delta.
        QCoreApplication::sendPostedEvents(this, QEvent::MetaCall);
        LiveUpdate u = m_latest;
        u.state = LiveState::Stopped;
        u.initial = nullptr;
        u.delta = std::move(m_lastDelta);
        if (m_lastSnapshot)
            u.snapshot = std::move(m_lastSnapshot);
        if (std::exchange(m_haveLast, false)) {
            u.stats = m_lastStats;
            u.lastSequence = m_lastSequence;
        }
        deliver(std::move(u));
    }
}

void LiveReceiver::deliver(LiveUpdate update)
{
    if (m_finished)
        return; // a queued update that arrives after the end (e.g. after stop()) changes nothing
    if (!update.snapshot)
        update.snapshot = m_latest.snapshot; // nothing new recorded: the previous copy still holds
    m_latest = std::move(update);
    const LiveState state = m_latest.state;
    m_finished = state == LiveState::Exited || state == LiveState::Failed || state == LiveState::Stopped;
    Q_EMIT updated(m_latest);
    if (m_finished)
        Q_EMIT finished(state);
}

void LiveReceiver::run()
{
    client::ClientOptions options;
    options.endpoint = m_endpoint.toStdString();
    options.answerTimeout = std::chrono::milliseconds(int64_t(m_answerTimeout * 1000));
    options.curveServerKeyFile = m_curveServerKey.toStdString();
    options.curveSecretKeyFile = m_curveSecretKey.toStdString();
    Listener listener;
    listener.waitForJob = m_waitForJob;
    if (m_incremental)
        listener.recorder().setKeepTaken(false); // the GUI's LiveDocument keeps (and bounds) the history
    const viewer::Recorder& recorder = listener.recorder();
    client::AgentClient agent(options, listener);
    uint64_t serial = 0;

    // Incremental mode: what the recorder gained since the last update (null when nothing).
    bool sentInitial = false;
    auto takeDelta = [&]() -> std::shared_ptr<const viewer::Recorder::Delta> {
        auto delta = std::make_shared<viewer::Recorder::Delta>();
        listener.recorder().takeDelta(*delta);
        if (delta->entries.empty() && delta->notes.empty() && delta->stacks.empty() && !delta->settings)
            return nullptr;
        return delta;
    };

    // Hands the GUI thread an immutable update (a queued call; dropped by Qt if this object is gone).
    auto publish = [&](LiveState s, QString message) {
        LiveUpdate u;
        u.state = s;
        u.deviceCount = int(recorder.hello().deviceCount);
        if (recorder.hasState() && m_incremental) {
            if (!sentInitial) {
                sentInitial = true;
                u.initial = std::make_shared<const model::Snapshot>(recorder.joinSnapshot());
            }
            u.delta = takeDelta();
            const bool ended = s == LiveState::Exited || s == LiveState::Failed;
            if (ended || m_wantSnapshot.exchange(false)) {
                ++serial;
                u.snapshot = std::make_shared<const model::Snapshot>(recorder.snapshot());
            }
            listener.changed = false;
        } else if (recorder.hasState()) {
            if (listener.changed || serial == 0) {
                ++serial;
                listener.changed = false;
                u.snapshot = std::make_shared<const model::Snapshot>(recorder.snapshot());
            }
        }
        u.snapshotSerial = serial;
        u.stats = recorder.stats();
        u.clientStats = agent.stats();
        u.lastSequence = recorder.lastSequence();
        u.pid = recorder.hello().pid;
        u.previousPid = listener.previousPid;
        u.host = QString::fromUtf8(recorder.hello().host);
        u.message = message.isEmpty() ? listener.warning : message;
        listener.urgent = false;
        QMetaObject::invokeMethod(
            this, [this, u = std::move(u)]() mutable { deliver(std::move(u)); }, Qt::QueuedConnection);
    };
    auto stateOf = [&] {
        switch (agent.link()) {
        case client::Link::Joining:
            return LiveState::Connecting;
        case client::Link::Live:
        case client::Link::Resyncing:
            return LiveState::Live;
        case client::Link::Silent:
            // A closed connection without a goodbye: the job exited (or was killed) and its goodbye never came.
            if (agent.silenceIsClosed())
                return m_reconnect ? LiveState::Reconnecting : LiveState::Exited;
            return LiveState::Silent;
        case client::Link::Gone:
            return m_reconnect ? LiveState::Reconnecting : LiveState::Exited;
        }
        return LiveState::Live;
    };

    publish(LiveState::Connecting, {});
    if (!agent.start()) {
        publish(LiveState::Failed, listener.failure);
        return;
    }
    Clock::time_point lastPublished = Clock::now();
    while (!m_stop) {
        agent.poll(PollInterval);
        if (!listener.failure.isEmpty() && (agent.failed() || !agent.hasState())) {
            publish(LiveState::Failed, listener.failure);
            return;
        }
        if (agent.link() == client::Link::Gone && !agent.hasState()) {
            publish(LiveState::Failed, tr("%1: the job exited before answering the state request").arg(m_endpoint));
            return;
        }
        const LiveState state = stateOf();
        if (state == LiveState::Exited) {
            publish(state, {});
            return;
        }
        const Clock::time_point now = Clock::now();
        const auto interval = m_incremental ? DeltaInterval : PublishInterval;
        if (listener.urgent || m_wantSnapshot
            || (listener.changed && recorder.hasState() && now - lastPublished >= interval)) {
            publish(state, {});
            lastPublished = now;
        }
    }
    // Stopped: stop() hands over what is left after joining this thread.
    if (m_incremental && recorder.hasState()) {
        // (Without an `initial` handed over yet, the final snapshot alone says it all.)
        m_lastDelta = takeDelta();
        m_lastSnapshot = std::make_shared<const model::Snapshot>(recorder.snapshot());
        m_lastStats = recorder.stats();
        m_lastSequence = recorder.lastSequence();
        m_haveLast = true;
    }
}

} // namespace memscope::app
