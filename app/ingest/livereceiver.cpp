// LiveReceiver (livereceiver.h): the ZeroMQ client of the Clone pattern, the same procedure as `memscope-cli
// record` (tools/cli/recordcommand.cpp): SUB connected and subscribed first, then the DEALER's state request;
// events before the reply are buffered by the Recorder. Runs on its own QThread; the GUI thread only ever sees
// immutable LiveUpdates, delivered through queued calls at most every ~250 ms (coalesced, never one per batch).
#include "ingest/livereceiver.h"

#include "recordcommand.h" // stateEndpointFor, from memscope-record
#include "wire/decoder.h"

#include <QThread>

#include <zmq.hpp>

#include <chrono>
#include <string_view>

namespace memscope::app {

namespace {

    using Clock = std::chrono::steady_clock;

    // The agent heartbeats at least once a second; 2 s of nothing means it is gone (docs/protocol.md).
    constexpr std::chrono::milliseconds SilenceLimit { 2000 };
    // How often a fresh snapshot copy goes to the GUI while events flow: copying and replaying the whole snapshot
    // costs far more than one frame, so refresh at 4 Hz rather than the 30–60 Hz the style's batch rule allows.
    constexpr std::chrono::milliseconds PublishInterval { 250 };
    constexpr std::chrono::milliseconds PollInterval { 50 };

    std::span<const uint8_t> bytesOf(const zmq::message_t& m) { return { m.data<uint8_t>(), m.size() }; }

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
    }
    return {};
}

bool LiveReceiver::isRunning() const { return m_thread && m_thread->isRunning(); }

bool LiveReceiver::start()
{
    if (m_thread)
        return true;
    if (memscope::stateEndpointFor(m_endpoint.toStdString()).empty()) {
        LiveUpdate u;
        u.state = LiveState::Failed;
        u.message = tr("%1: not an ipc:// or tcp://HOST:PORT endpoint").arg(m_endpoint);
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
        LiveUpdate u = m_latest;
        u.state = LiveState::Stopped;
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
    const std::string endpoint = m_endpoint.toStdString();
    const std::string stateEndpoint = memscope::stateEndpointFor(endpoint);
    const auto answerTimeout = std::chrono::duration<double>(m_answerTimeout);

    wire::Recorder recorder;
    LiveState state = LiveState::Connecting;
    uint64_t serial = 0;
    bool dirty = false; // the recorder changed since the last snapshot copy
    uint64_t badFrames = 0;
    QString warning;

    // Hands the GUI thread an immutable update (a queued call; dropped by Qt if this object is gone).
    auto publish = [&](LiveState s, QString message) {
        LiveUpdate u;
        u.state = s;
        if (recorder.hasState()) {
            if (dirty || serial == 0) {
                ++serial;
                dirty = false;
                u.snapshot = std::make_shared<const model::Snapshot>(recorder.snapshot());
            }
        }
        u.snapshotSerial = serial;
        u.stats = recorder.stats();
        u.lastSequence = recorder.lastSequence();
        u.pid = recorder.hello().pid;
        u.host = QString::fromUtf8(recorder.hello().host);
        u.message = message.isEmpty() ? warning : message;
        QMetaObject::invokeMethod(
            this, [this, u = std::move(u)]() mutable { deliver(std::move(u)); }, Qt::QueuedConnection);
    };
    auto fail = [&](const QString& message) { publish(LiveState::Failed, message); };

    try {
        zmq::context_t context(1);
        zmq::socket_t sub(context, zmq::socket_type::sub);
        sub.set(zmq::sockopt::linger, 0);
        sub.set(zmq::sockopt::subscribe, wire::EventsTopic);
        sub.set(zmq::sockopt::subscribe, wire::GoodbyeTopic);
        sub.set(zmq::sockopt::subscribe, wire::StacksTopic); // stack definitions (MEMSCOPE_STACKS=N in the job)
        sub.connect(endpoint);
        zmq::socket_t dealer(context, zmq::socket_type::dealer);
        dealer.set(zmq::sockopt::linger, 0);
        dealer.connect(stateEndpoint);
        auto requestState = [&] {
            const std::vector<uint8_t> request = wire::encodeRequest(wire::RequestType::State);
            (void)dealer.send(zmq::buffer(request), zmq::send_flags::dontwait);
        };
        requestState();
        bool freshRequested = false;

        const Clock::time_point start = Clock::now();
        Clock::time_point lastHeard = start, lastPublished = start;
        bool heardAnything = false;
        publish(LiveState::Connecting, {});
        while (!m_stop) {
            const Clock::time_point now = Clock::now();
            if (!recorder.hasState() && now - start >= answerTimeout) {
                fail(heardAnything ? tr("%1: the agent publishes events but did not answer the state request on %2")
                                         .arg(m_endpoint, QString::fromStdString(stateEndpoint))
                                   : tr("%1: no memscope agent answered (is the job running?)").arg(m_endpoint));
                return;
            }
            if (recorder.hasState() && state == LiveState::Live && now - lastHeard >= SilenceLimit) {
                state = LiveState::Silent; // keep listening: a hung job may come back
                publish(state, {});
                lastPublished = now;
            }

            zmq::pollitem_t items[] = { { sub.handle(), 0, ZMQ_POLLIN, 0 }, { dealer.handle(), 0, ZMQ_POLLIN, 0 } };
            zmq::poll(items, 2, PollInterval);

            if (items[1].revents & ZMQ_POLLIN) {
                // The ROUTER's reply: the state in the last frame (an empty delimiter frame may precede it).
                zmq::message_t frame;
                while (dealer.recv(frame, zmq::recv_flags::dontwait) && frame.more()) { }
                const wire::DecodedState decoded = wire::decodeState(bytesOf(frame));
                if (!decoded.ok()) {
                    fail(QString::fromStdString(decoded.error.toString(stateEndpoint)));
                    return;
                }
                heardAnything = true;
                lastHeard = Clock::now();
                if (recorder.setState(decoded))
                    dirty = true;
                freshRequested = false;
                if (state == LiveState::Connecting) {
                    state = LiveState::Live;
                    publish(state, {});
                    lastPublished = lastHeard;
                }
            }
            bool goodbye = false;
            while (items[0].revents & ZMQ_POLLIN) {
                zmq::message_t topic, body;
                if (!sub.recv(topic, zmq::recv_flags::dontwait))
                    break;
                const bool hasBody = topic.more() && sub.recv(body, zmq::recv_flags::dontwait);
                while (body.more()) { // drop unexpected extra frames of one message
                    zmq::message_t extra;
                    if (!sub.recv(extra, zmq::recv_flags::dontwait))
                        break;
                    body = std::move(extra);
                }
                heardAnything = true;
                lastHeard = Clock::now();
                if (state == LiveState::Silent)
                    state = LiveState::Live;
                const std::string_view name(topic.data<char>(), topic.size());
                if (hasBody && name == wire::EventsTopic) {
                    const wire::DecodedBatch batch = wire::decodeBatch(bytesOf(body));
                    if (!batch.ok()) {
                        if (batch.error.code == wire::DecodeErrorCode::TooNew
                            || batch.error.code == wire::DecodeErrorCode::BadMagic) {
                            fail(QString::fromStdString(batch.error.toString(endpoint)));
                            return;
                        }
                        if (badFrames++ == 0)
                            warning = tr("%1 (skipped)").arg(QString::fromStdString(batch.error.toString(endpoint)));
                        continue;
                    }
                    recorder.addEvents(batch.events);
                    dirty = true;
                } else if (hasBody && name == wire::StacksTopic) {
                    const wire::DecodedStackDef def = wire::decodeStackDef(bytesOf(body));
                    if (def.ok()) {
                        recorder.addStackDef(def);
                        dirty = true;
                    } else if (badFrames++ == 0) {
                        warning = tr("%1 (skipped)").arg(QString::fromStdString(def.error.toString(endpoint)));
                    }
                } else if (hasBody && name == wire::GoodbyeTopic) {
                    const wire::DecodedGoodbye bye = wire::decodeGoodbye(bytesOf(body));
                    if (bye.ok())
                        recorder.setGoodbye(bye.goodbye);
                    dirty = true;
                    goodbye = true;
                    break;
                } else if (badFrames++ == 0) {
                    warning = tr("%1: unexpected message on topic '%2' (skipped)")
                                  .arg(m_endpoint,
                                       QString::fromLatin1(name.data(), qsizetype(std::min<size_t>(name.size(), 16))));
                }
                if (Clock::now() - lastPublished >= PublishInterval)
                    break; // let the periodic hand-over below run even under a flood
            }
            if (goodbye) {
                if (!recorder.hasState())
                    fail(tr("%1: the job exited before answering the state request").arg(m_endpoint));
                else
                    publish(LiveState::Exited, {});
                return;
            }
            if (recorder.needsFreshState() && !freshRequested) {
                requestState(); // the subscription started late: ask for a state that includes what we missed
                freshRequested = true;
            }
            if (recorder.hasState() && dirty && Clock::now() - lastPublished >= PublishInterval) {
                publish(state, {});
                lastPublished = Clock::now();
            }
        }
    } catch (const zmq::error_t& e) {
        fail(QStringLiteral("%1: %2").arg(m_endpoint, QString::fromUtf8(e.what())));
    }
}

} // namespace memscope::app
