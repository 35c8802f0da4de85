// AgentClient (agentclient.h): the Clone pattern's client (ZeroMQ Guide, chapter 5: "Clone", with its snapshot
// request after the subscription) plus the resynchronisation docs/protocol.md asks of a viewer after a gap, and
// reconnection to a restarted job. cppzmq over libzmq; one thread.
#include "client/agentclient.h"

#include "client/curvekeys.h"
#include "wire/endpoint.h"

#include <zmq.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>
#include <utility>

#include <sys/stat.h>
#include <unistd.h>

namespace memscope::client {

namespace {

    using Clock = std::chrono::steady_clock;

    // SUB messages handled per poll() at most, so a caller's own work (a periodic hand-over) runs under a flood.
    constexpr int MessagesPerPoll = 2000;

    // The largest message a peer at the endpoint may send us (zmq_setsockopt(3), ZMQ_MAXMSGSIZE: a larger one
    // closes that connection at its header, during the handshake too), from the protocol's own bounds
    // (docs/protocol.md). On the SUB: a compressed batch of MaxCompressedBatchRecords records, the largest frame the
    // decoder takes (its LZ4 block at most LZ4_COMPRESSBOUND of the records, lz4.h: n + n/255 + 16), ~72.3 MiB;
    // every other topic's frame is far smaller. On the DEALER: a state reply lists every segment and block of the
    // job, 40 bytes each after 144: 1 GiB holds 26.8 million, beyond any job's allocator.
    constexpr uint64_t MaxBatchRecordBytes = uint64_t(wire::MaxCompressedBatchRecords) * sizeof(wire::EventRecord);
    constexpr int64_t MaxSubMessageBytes
        = int64_t(sizeof(wire::BatchHeader) + MaxBatchRecordBytes + MaxBatchRecordBytes / 255 + 16);
    constexpr int64_t MaxStateReplyBytes = int64_t(1) << 30;

    std::span<const uint8_t> bytesOf(const zmq::message_t& m) { return { m.data<uint8_t>(), m.size() }; }

    uint64_t wallClockNs()
    {
        timespec ts {};
        clock_gettime(CLOCK_REALTIME, &ts);
        return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
    }

} // namespace

void RecordingListener::onState(const viewer::DecodedState& state, const StateChange& change)
{
    if (change.kind == StateKind::Initial && m_recorder.setState(state))
        return;
    m_recorder.resync(state, change.reason);
}

struct AgentClient::Sockets {
    zmq::context_t context { 1 };
    zmq::socket_t sub;
    zmq::socket_t dealer;
    zmq::socket_t monitor; // PAIR: the SUB's connection events (zmq_socket_monitor), for clearer errors
    bool connected = false; // the SUB's transport connected at least once
    bool up = false; // ... and is connected now (ZMQ_EVENT_DISCONNECTED clears it)
    bool handshook = false; // ... and completed the ZMTP (CURVE) handshake
    int authStatus = 0; // a ZAP refusal's status code (RFC 27: 400), from ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
    bool mechanismMismatch = false; // the agent's security mechanism is not ours (CURVE on one side only)

    // Closing a monitored socket does not stop its monitor: libzmq's own PAIR stays behind in the I/O thread with
    // what it still had to send (libzmq issues #2083 and #3575: stop it with a null endpoint first, then close the
    // receiving end, then the socket). Members go in reverse order afterwards: the sockets, then the context.
    ~Sockets()
    {
        if (monitor) {
            if (sub)
                zmq_socket_monitor(sub.handle(), nullptr, 0);
            monitor.close();
        }
    }
};

AgentClient::AgentClient(ClientOptions options, Listener& listener)
    : m_options(std::move(options))
    , m_listener(listener)
{
}

AgentClient::~AgentClient() = default;

namespace {

    // Who may be believed at an ipc:// endpoint: the socket file must belong to this user (the agent makes it 0600
    // and ours, agent/src/publisher.cpp); root may watch any user's job. Another user's file at the path (in a
    // shared folder such as /tmp anyone may bind a name first) is refused. Empty: trusted; else why not.
    std::string ipcOwnerProblem(const std::string& endpoint)
    {
        if (endpoint.rfind("ipc://", 0) != 0)
            return {};
        const std::string path = endpoint.substr(6);
        struct stat st {};
        if (::lstat(path.c_str(), &st) != 0)
            return {}; // gone again: nothing answers there
        const uid_t me = ::geteuid();
        if (me == 0 || st.st_uid == me)
            return {};
        return endpoint + ": the socket belongs to another user (uid " + std::to_string(st.st_uid)
            + "), not to you: refusing to record it (someone else's job, or one pretending to be yours)";
    }

} // namespace

void AgentClient::fail(ErrorKind kind, const std::string& reason)
{
    m_failed = true;
    m_listener.onError(ClientError { kind, true, reason });
}

void AgentClient::report(ErrorKind kind, const std::string& reason)
{
    m_listener.onError(ClientError { kind, false, reason });
}

void AgentClient::setLink(Link link)
{
    if (m_link == link)
        return;
    m_link = link;
    m_listener.onLink(link);
}

bool AgentClient::start()
{
    if (m_started)
        return !m_failed;
    m_started = true;
    const std::string& endpoint = m_options.endpoint;
    // The agent's rule for endpoints (wire/endpoint.h): inproc://, abstract ipc and other transports refused.
    if (const std::string why = wire::endpointProblem(endpoint); !why.empty()) {
        fail(ErrorKind::BadEndpoint, endpoint + ": " + why);
        return false;
    }
    m_stateEndpoint = wire::stateEndpointFor(endpoint);
    if (std::string why = ipcOwnerProblem(endpoint); !why.empty()) {
        fail(ErrorKind::Untrusted, why);
        return false;
    }
    const bool wantsCurve = !m_options.curveServerKeyFile.empty() || !m_options.curveSecretKeyFile.empty();
    if (wantsCurve) {
        if (m_options.curveServerKeyFile.empty() || m_options.curveSecretKeyFile.empty()) {
            fail(ErrorKind::Curve, endpoint + ": CURVE needs both the agent's public key file and our secret key file");
            return false;
        }
        if (!curveAvailable()) {
            fail(ErrorKind::Curve, endpoint + ": this libzmq was built without CURVE (libsodium)");
            return false;
        }
        const wire::KeyResult server = wire::readKeyFile(m_options.curveServerKeyFile, wire::KeyKind::Public);
        if (!server.ok()) {
            fail(ErrorKind::Curve, server.error);
            return false;
        }
        const wire::KeyResult secret = wire::readKeyFile(m_options.curveSecretKeyFile, wire::KeyKind::Secret);
        if (!secret.ok()) {
            fail(ErrorKind::Curve, secret.error);
            return false;
        }
        m_serverKey = server.key;
        m_secretKey = secret.key;
        m_publicKey = publicKeyOf(m_secretKey);
        if (m_publicKey.empty()) {
            fail(ErrorKind::Curve, m_options.curveSecretKeyFile + ": not a CURVE secret key");
            return false;
        }
    }
    try {
        m_sockets = std::make_unique<Sockets>();
        Sockets& s = *m_sockets;
        s.sub = zmq::socket_t(s.context, zmq::socket_type::sub);
        s.sub.set(zmq::sockopt::linger, 0);
        s.sub.set(zmq::sockopt::maxmsgsize, MaxSubMessageBytes);
        // One subscription to every topic (events, goodbyes, stack definitions, notes, settings; topics this
        // client does not know are skipped on arrival), so that the first message of any topic proves all of it is
        // in effect: with one subscription per topic, a heartbeat would prove only its own topic's, and the stack
        // definitions sent again before a state reply could still miss us (docs/protocol.md, "Late join").
        s.sub.set(zmq::sockopt::subscribe, std::string_view());
        if (curve()) {
            // libzmq's CURVE client options (zmq_setsockopt(3): ZMQ_CURVE_SERVERKEY, _PUBLICKEY, _SECRETKEY),
            // set before connect; Z85 text of 40 characters is accepted as is.
            s.sub.set(zmq::sockopt::curve_serverkey, m_serverKey);
            s.sub.set(zmq::sockopt::curve_publickey, m_publicKey);
            s.sub.set(zmq::sockopt::curve_secretkey, m_secretKey);
        }
        const std::string monitorAddress
            = "inproc://memscope-client-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
        if (zmq_socket_monitor(s.sub.handle(), monitorAddress.c_str(),
                               ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED
                                   | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
            == 0) {
            s.monitor = zmq::socket_t(s.context, zmq::socket_type::pair);
            s.monitor.set(zmq::sockopt::linger, 0);
            s.monitor.connect(monitorAddress);
        }
        // Subscribe first, then ask for the state (the Clone pattern's order): nothing published after the state
        // is taken can be missed, only held until the state arrives.
        s.sub.connect(endpoint);
    } catch (const zmq::error_t& e) {
        fail(ErrorKind::Socket, endpoint + ": " + e.what());
        return false;
    }
    m_start = m_lastHeard = Clock::now();
    m_lastRequest = m_start - m_options.resyncInterval;
    m_stateWanted = true;
    trySendRequest(m_start);
    return !m_failed;
}

// A new DEALER for each request: a reply to an abandoned request dies with its socket, so whatever the current
// DEALER receives answers the current request.
bool AgentClient::openDealer()
{
    Sockets& s = *m_sockets;
    s.dealer = zmq::socket_t(s.context, zmq::socket_type::dealer);
    s.dealer.set(zmq::sockopt::linger, 0);
    s.dealer.set(zmq::sockopt::maxmsgsize, MaxStateReplyBytes);
    if (curve()) {
        s.dealer.set(zmq::sockopt::curve_serverkey, m_serverKey);
        s.dealer.set(zmq::sockopt::curve_publickey, m_publicKey);
        s.dealer.set(zmq::sockopt::curve_secretkey, m_secretKey);
    }
    s.dealer.connect(m_stateEndpoint);
    return true;
}

void AgentClient::trySendRequest(Clock::time_point now)
{
    if (!m_stateWanted || m_requestOutstanding || m_failed)
        return;
    if (now - m_lastRequest < m_options.resyncInterval)
        return; // rate limit: timers() sends it when the interval is over
    try {
        openDealer();
        const std::vector<uint8_t> request = viewer::encodeRequest(wire::RequestType::State);
        // Not connected yet, the DEALER queues it (ZMQ_IMMEDIATE is off) and sends it once the ROUTER is there.
        (void)m_sockets->dealer.send(zmq::buffer(request), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
        fail(ErrorKind::Socket, m_stateEndpoint + ": " + e.what());
        return;
    }
    askForGoodbye(); // on every new DEALER: the agent sends its Goodbye to the latest ones
    ++m_stats.stateRequests;
    m_requestOutstanding = true;
    m_lastRequest = m_requestSent = now;
}

// The agent sends every stack definition again just before a state reply, on the PUB. They reach us only if our
// subscription was in effect by then, which the reply (on another socket) does not tell: ZeroMQ's "slow joiner".
// A record heard with a sequence up to the state's was published before the state was taken, so before those
// definitions, and with our one subscription to every topic it proves they came; otherwise the agent is asked to
// send them again once something has come through the subscription (docs/protocol.md, "Late join"). An agent
// older than Request{Stacks} ignores it: its definitions then come as before, or are missing.
void AgentClient::trySendStacksRequest()
{
    if (!m_stacksWanted || !m_subscribed || m_failed)
        return;
    try {
        const std::vector<uint8_t> request = viewer::encodeRequest(wire::RequestType::Stacks);
        (void)m_sockets->dealer.send(zmq::buffer(request), zmq::send_flags::dontwait); // no reply comes
    } catch (const zmq::error_t& e) {
        fail(ErrorKind::Socket, m_stateEndpoint + ": " + e.what());
        return;
    }
    m_stacksWanted = false;
    ++m_stats.stacksRequests;
}

// The agent sends its Goodbye on this DEALER's connection too when the job ends (docs/protocol.md, "Goodbye"): the
// PUB drops it with the rest of what does not fit in our share when we are behind. An agent older than
// Request{Goodbye} ignores it.
void AgentClient::askForGoodbye()
{
    try {
        const std::vector<uint8_t> request = viewer::encodeRequest(wire::RequestType::Goodbye);
        (void)m_sockets->dealer.send(zmq::buffer(request), zmq::send_flags::dontwait); // no reply until the end
    } catch (const zmq::error_t&) {
        // Not fatal: the PUB's goodbye still comes to a viewer that keeps up.
    }
}

void AgentClient::wantState(Clock::time_point now)
{
    m_stateWanted = true;
    trySendRequest(now);
}

void AgentClient::poll(std::chrono::milliseconds timeout)
{
    if (!m_started || m_failed)
        return;
    Sockets& s = *m_sockets;
    try {
        zmq::pollitem_t items[] = { { s.sub.handle(), 0, ZMQ_POLLIN, 0 },
                                    { s.dealer.handle(), 0, ZMQ_POLLIN, 0 },
                                    { s.monitor.handle(), 0, ZMQ_POLLIN, 0 } };
        const Clock::time_point before = Clock::now();
        zmq::poll(items, s.monitor ? 3 : 2, timeout);
        const Clock::time_point after = Clock::now();
        notListened(before, after, timeout);
        // Silence is judged only from a poll that found nothing queued on the SUB, as of the moment it returned:
        // once messages are being handled, the process may be stopped in the middle of one (SIGSTOP, a debugger,
        // a starved machine) and resumed seconds later with a backlog waiting, which is no silence.
        if (!(items[0].revents & ZMQ_POLLIN))
            m_quietAt = after;

        if (items[2].revents & ZMQ_POLLIN)
            readMonitor();
        if (items[1].revents & ZMQ_POLLIN) {
            // The ROUTER's reply: the state in the last frame (an empty delimiter frame may precede it).
            zmq::message_t frame;
            bool got = false;
            while (s.dealer.recv(frame, zmq::recv_flags::dontwait)) {
                got = true;
                if (!frame.more())
                    break;
            }
            if (got && frame.size() == sizeof(wire::Goodbye)) {
                // The job's Goodbye again, on the state connection (Request{Goodbye}): it ends the run once the
                // events queued before it have been read (timers()).
                const viewer::DecodedGoodbye bye = viewer::decodeGoodbye(bytesOf(frame));
                if (bye.ok() && m_hasState && !m_goodbye)
                    m_lateGoodbye = bye;
            } else if (got) {
                onStateReply(bytesOf(frame));
            }
            if (m_failed)
                return;
        }
        for (int n = 0; (items[0].revents & ZMQ_POLLIN) && n < MessagesPerPoll && !m_failed; ++n) {
            zmq::message_t topic, body;
            if (!s.sub.recv(topic, zmq::recv_flags::dontwait))
                break;
            const bool hasBody = topic.more() && s.sub.recv(body, zmq::recv_flags::dontwait);
            while (body.more()) { // drop unexpected extra frames of one message
                zmq::message_t extra;
                if (!s.sub.recv(extra, zmq::recv_flags::dontwait))
                    break;
                body = std::move(extra);
            }
            onSubMessage(std::string_view(topic.data<char>(), topic.size()), hasBody, bytesOf(body));
        }
    } catch (const zmq::error_t& e) {
        // A signal (Ctrl-C on `record`, which then saves what it has) interrupts the wait: nothing is wrong.
        if (e.num() == EINTR)
            return;
        fail(ErrorKind::Socket, m_options.endpoint + ": " + e.what());
        return;
    }
    if (!m_failed)
        timers(Clock::now());
    m_quietAt = {};
}

void AgentClient::notListened(Clock::time_point before, Clock::time_point after, std::chrono::milliseconds timeout)
{
    // Time this client did not listen is no evidence of silence: the caller away between two polls (writing a file)
    // beyond a moment, or a poll that overran its timeout (the process stopped by SIGSTOP or a debugger, or not
    // scheduled). The timers that judge the agent by what we heard move forward by that much, so a viewer resumed
    // after a pause reads the backlog queued for it instead of calling the job silent at once.
    constexpr std::chrono::milliseconds Slack { 100 };
    Clock::duration away {};
    if (m_lastPollEnd != Clock::time_point {} && before - m_lastPollEnd > Slack)
        away += before - m_lastPollEnd - Slack;
    if (after - before > timeout + Slack)
        away += after - before - timeout - Slack;
    m_lastPollEnd = after;
    if (away <= Clock::duration::zero())
        return;
    m_lastHeard += away;
    m_start += away;
}

void AgentClient::readMonitor()
{
    Sockets& s = *m_sockets;
    zmq::message_t event, address;
    while (s.monitor.recv(event, zmq::recv_flags::dontwait)) {
        if (event.more())
            (void)s.monitor.recv(address, zmq::recv_flags::dontwait);
        if (event.size() < 6)
            continue;
        // zmq_socket_monitor(3): the first frame is a 16-bit event number and a 32-bit value.
        uint16_t id = 0;
        uint32_t value = 0;
        std::memcpy(&id, event.data(), 2);
        std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
        if (id == ZMQ_EVENT_CONNECTED) {
            s.connected = s.up = true;
            // A new connection (a job started or restarted at the endpoint): the SUB sends its subscription again,
            // in effect once something arrives through it.
            m_subscribed = false;
            m_lowestHeard = UINT64_MAX;
            m_closedWithoutGoodbye = false; // (a job at the endpoint again)
        } else if (id == ZMQ_EVENT_DISCONNECTED && s.up) {
            s.up = false;
            m_closedWithoutGoodbye = !m_goodbye;
        } else if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            s.handshook = true;
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            s.authStatus = int(value);
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
            // The greetings named different security mechanisms (ZeroMQ RFC 23): CURVE on one side only.
            s.mechanismMismatch = true;
        }
    }
}

void AgentClient::onSubMessage(std::string_view topic, bool hasBody, std::span<const uint8_t> body)
{
    const Clock::time_point now = Clock::now();
    m_lastHeard = now;
    m_heardSub = true;
    ++m_stats.messages;
    if (!m_subscribed) {
        m_subscribed = true;
        trySendStacksRequest();
        if (m_failed)
            return;
    }
    if (m_silenceReported) {
        m_silenceReported = false;
        if (m_link == Link::Silent && m_hasState && !m_goodbye) {
            // Heard again after silence: the same job resuming, or a new one at the same endpoint. Hold what it
            // sends until its state says which (onStateReply).
            m_holding = true;
            wantState(now);
        }
    }
    if (hasBody && topic == wire::EventsTopic) {
        const viewer::DecodedBatch batch = viewer::decodeBatch(body);
        if (!batch.ok()) {
            // One bad frame (another protocol version, a wrong magic, garbage) costs that frame, not the recording:
            // it is skipped and counted, and the records it held show up as a sequence gap at the next good batch
            // or heartbeat, which resynchronises. A job that is truly incompatible fails at its state reply.
            malformed(0, batch.error.toString(m_options.endpoint) + " (skipped)");
            return;
        }
        if (!batch.events.empty()) {
            const uint64_t first = batch.events.front().sequence; // by value: the records are packed, unaligned
            m_lowestHeard = std::min(m_lowestHeard, first);
        }
        onBatch(batch.events);
    } else if (hasBody && topic == wire::StacksTopic) {
        const viewer::DecodedStackDef def = viewer::decodeStackDef(body);
        if (!def.ok()) {
            malformed(1, def.error.toString(m_options.endpoint) + " (skipped)");
            return;
        }
        if (m_holding || !m_hasState) {
            Held h;
            h.stackDef.assign(body.begin(), body.end());
            m_held.push_back(std::move(h));
            if (m_goodbye)
                wantState(now);
        } else {
            m_listener.onStackDef(def);
        }
    } else if (hasBody && topic == wire::NotesTopic) {
        // Timed, not sequenced: a note needs no state and is never held.
        const viewer::DecodedNotes notes = viewer::decodeNotes(body);
        if (!notes.ok()) {
            malformed(4, notes.error.toString(m_options.endpoint) + " (skipped)");
            return;
        }
        for (const viewer::DecodedNote& note : notes.notes)
            if (!m_goodbye)
                m_listener.onNote(note);
    } else if (hasBody && topic == wire::SettingsTopic) {
        const viewer::DecodedSettings settings = viewer::decodeSettings(body);
        if (!settings.ok()) {
            malformed(5, settings.error.toString(m_options.endpoint) + " (skipped)");
            return;
        }
        m_listener.onSettings(settings);
    } else if (hasBody && topic == wire::GoodbyeTopic) {
        const viewer::DecodedGoodbye bye = viewer::decodeGoodbye(body);
        if (!bye.ok())
            malformed(2, bye.error.toString(m_options.endpoint) + " (taken as a goodbye)");
        endOfRun(bye);
    } else if (topic.size() == 1) {
        // A topic of a newer agent (topics are one byte, docs/protocol.md): not for us, skipped without a word.
        ++m_stats.unknownTopics;
    } else {
        malformed(3,
                  m_options.endpoint + ": unexpected message on topic '"
                      + std::string(topic.substr(0, std::min<size_t>(topic.size(), 16))) + "' (skipped)");
    }
}

void AgentClient::endOfRun(const viewer::DecodedGoodbye& bye)
{
    m_lateGoodbye.reset();
    if (m_goodbye)
        return;
    // Nothing follows a goodbye (docs/protocol.md): records held for a state that will not come go out as they
    // are, then the goodbye. Whatever is heard next comes from another run of the job.
    if (m_hasState) {
        flush();
        // The goodbye carries the run's last sequence: what is beyond the last record delivered never came.
        if (bye.ok() && bye.goodbye.lastSequence > m_applied)
            m_listener.onMissing(1, bye.goodbye.lastSequence - m_applied);
    }
    if (bye.ok())
        m_listener.onGoodbye(bye.goodbye);
    m_goodbye = true;
    m_holding = true;
    m_stateWanted = false;
    m_requestOutstanding = false;
    m_held.clear();
    m_heldRecords = 0;
    setLink(Link::Gone);
}

void AgentClient::malformed(int kind, const std::string& message)
{
    ++m_stats.malformed;
    if (m_reportedKinds & (1u << kind))
        return; // one line per kind of frame, not one per frame
    m_reportedKinds |= 1u << kind;
    report(ErrorKind::Malformed, message);
}

void AgentClient::onBatch(std::span<const wire::EventRecord> events)
{
    if (events.empty())
        return;
    if (!m_goodbye)
        account(events);
    if (!m_hasState || m_holding) {
        hold(events);
        if (m_goodbye)
            wantState(Clock::now()); // a job answers at the endpoint again: ask who
        else if (m_pendingState.size() > 0)
            settlePending(false);
        return;
    }
    process(events);
}

void AgentClient::process(std::span<const wire::EventRecord> events)
{
    std::vector<wire::EventRecord> out;
    out.reserve(events.size());
    for (size_t i = 0; i < events.size(); ++i) {
        const wire::EventRecord& e = events[i];
        if (e.sequence <= m_applied) {
            if (m_applied > m_stateSequence) {
                // Once a record after the state was delivered, one PUB socket never sends an older one again:
                // this comes from another run of the job (its sequence starts at 1).
                deliver(out);
                hold(events.subspan(i));
                wantState(Clock::now());
                return;
            }
            ++m_stats.stale; // published before the state was taken: the state holds it
            continue;
        }
        if (e.sequence == m_applied + 1 && e.lost == 0) {
            out.push_back(e);
            m_applied = e.sequence;
            continue;
        }
        // A jump (records not received) or a loss (the agent's ring was full): the state no longer matches. Hold
        // this record and the rest for a fresh state (docs/protocol.md, "Sequences, gaps and loss").
        deliver(out);
        hold(events.subspan(i));
        setLink(Link::Resyncing);
        wantState(Clock::now());
        return;
    }
    deliver(out);
}

void AgentClient::account(std::span<const wire::EventRecord> events)
{
    for (const wire::EventRecord& e : events) {
        if (e.sequence <= m_seen)
            continue;
        m_seen = e.sequence;
        m_unreportedLost += e.lost;
    }
}

void AgentClient::deliver(std::vector<wire::EventRecord>& out)
{
    if (out.empty())
        return;
    m_listener.onEvents(out);
    m_deliveredSinceFirstState = true;
    out.clear();
}

void AgentClient::hold(std::span<const wire::EventRecord> events)
{
    m_holding = true;
    if (events.empty())
        return;
    Held h;
    h.events.assign(events.begin(), events.end());
    m_heldRecords += h.events.size();
    m_held.push_back(std::move(h));
    while (m_heldRecords > m_options.maxBuffered && m_held.size() > 1) {
        // The oldest go: the state that ends the wait covers them or a further resync will.
        m_heldRecords -= m_held.front().events.size();
        m_stats.dropped += m_held.front().events.size();
        m_held.pop_front();
    }
}

void AgentClient::releaseHeld()
{
    std::deque<Held> held;
    held.swap(m_held);
    m_heldRecords = 0;
    m_holding = false;
    for (Held& h : held) {
        if (m_holding) { // a new wait began: the rest waits too, in order
            if (h.events.empty())
                m_held.push_back(std::move(h));
            else
                hold(h.events);
            continue;
        }
        if (!h.stackDef.empty()) {
            const viewer::DecodedStackDef def = viewer::decodeStackDef(h.stackDef);
            if (def.ok())
                m_listener.onStackDef(def);
        } else {
            process(h.events);
        }
    }
}

void AgentClient::flush()
{
    if (!m_hasState || m_goodbye) {
        m_held.clear();
        m_heldRecords = 0;
        return;
    }
    std::deque<Held> held;
    held.swap(m_held);
    m_heldRecords = 0;
    m_holding = false;
    m_pendingState.clear();
    std::vector<wire::EventRecord> out;
    uint64_t gaps = 0, missing = 0; // the jumps delivered
    for (const Held& h : held) {
        if (!h.stackDef.empty()) {
            deliver(out);
            const viewer::DecodedStackDef def = viewer::decodeStackDef(h.stackDef);
            if (def.ok())
                m_listener.onStackDef(def);
            continue;
        }
        for (const wire::EventRecord& e : h.events) {
            if (e.sequence <= m_applied)
                continue;
            if (e.sequence > m_applied + 1) {
                ++gaps;
                missing += e.sequence - m_applied - 1;
            }
            out.push_back(e);
            out.back().lost = 0; // counted once, below
            m_applied = e.sequence;
        }
    }
    deliver(out);
    if (gaps > 0)
        m_listener.onMissing(gaps, missing);
    if (m_unreportedLost > 0)
        m_listener.onLost(std::exchange(m_unreportedLost, 0));
}

// Walks the held records above the applied sequence up to `last`: what went missing, and whether every record up
// to `last` is here without a jump or a loss (then the state brings nothing the records do not).
AgentClient::HeldCheck AgentClient::checkHeld(uint64_t last) const
{
    HeldCheck c;
    uint64_t cursor = m_applied;
    for (const Held& h : m_held) {
        for (const wire::EventRecord& e : h.events) {
            if (e.sequence <= cursor)
                continue;
            if (e.sequence > last) {
                if (c.firstAfterNs == 0)
                    c.firstAfterNs = e.timeNs;
                continue;
            }
            if (e.sequence > cursor + 1) {
                ++c.reason.gaps;
                c.reason.missing += e.sequence - cursor - 1;
                c.clean = false;
            }
            if (e.lost > 0)
                c.clean = false;
            cursor = e.sequence;
        }
    }
    c.complete = c.clean && cursor >= last;
    return c;
}

void AgentClient::onStateReply(std::span<const uint8_t> frame)
{
    ++m_stats.states;
    m_requestOutstanding = false;
    const viewer::DecodedState state = viewer::decodeState(frame);
    if (!state.ok()) {
        fail(ErrorKind::Incompatible, state.error.toString(m_stateEndpoint));
        return;
    }
    if (!m_stateWanted)
        return; // nobody asked (the wait it was for ended: a goodbye)
    // The socket may have appeared since start() (a viewer that waits for its job): whose it is is checked before
    // anything it says is believed.
    if (std::string why = ipcOwnerProblem(m_options.endpoint); !why.empty()) {
        fail(ErrorKind::Untrusted, why);
        return;
    }
    m_stateWanted = false;
    const uint64_t last = state.header.lastSequence;

    StateChange change;
    if (!m_hasState) {
        change.kind = StateKind::Initial;
    } else if (m_goodbye || state.hello.pid != m_pid || last < m_applied) {
        change.kind = StateKind::Restarted;
        change.previousPid = m_pid;
        change.reason.kind = viewer::ResyncReason::Kind::Restart;
    } else if (!m_deliveredSinceFirstState) {
        change.kind = StateKind::Initial; // the slow joiner: nothing applied yet, so the fresher state replaces it
    } else {
        const HeldCheck c = checkHeld(last);
        if (c.complete || last <= m_applied) {
            // The same job, and the records held say everything the state would: no resync.
            m_holding = false;
            setLink(Link::Live);
            releaseHeld();
            return;
        }
        if (c.clean) {
            // Every record held so far fits, but some up to `last` have not arrived yet (they were published
            // just before the state was taken): wait a moment for them rather than resync for nothing.
            m_pendingState.assign(frame.begin(), frame.end());
            m_pendingSince = Clock::now();
            return;
        }
        change.kind = StateKind::Resync;
    }
    applyState(state, change);
}

// A pending state (see onStateReply) is settled by records that reach its sequence (no resync), by a jump or a
// loss, or by resyncInterval passing (resync).
void AgentClient::settlePending(bool timedOut)
{
    const viewer::DecodedState state = viewer::decodeState(m_pendingState);
    const HeldCheck c = checkHeld(state.header.lastSequence);
    if (c.complete) {
        m_pendingState.clear();
        m_holding = false;
        setLink(Link::Live);
        releaseHeld();
        return;
    }
    if (c.clean && !timedOut)
        return;
    std::vector<uint8_t> frame;
    frame.swap(m_pendingState);
    const viewer::DecodedState decoded = viewer::decodeState(frame);
    StateChange change;
    change.kind = StateKind::Resync;
    applyState(decoded, change);
}

void AgentClient::applyState(const viewer::DecodedState& state, StateChange change)
{
    const uint64_t last = state.header.lastSequence;
    if (change.kind == StateKind::Resync) {
        const HeldCheck c = checkHeld(last);
        change.reason = c.reason;
        change.reason.kind = viewer::ResyncReason::Kind::Gap;
        change.reason.lost = std::exchange(m_unreportedLost, 0);
        change.reason.timeNs = c.firstAfterNs != 0 ? std::min(c.firstAfterNs, wallClockNs()) : wallClockNs();
    } else if (change.kind == StateKind::Restarted) {
        // Held records are the new job's (from the goodbye, the silence or the first record that could not be
        // the old job's on): the first above its state is no earlier than the state.
        uint64_t firstAfter = 0;
        for (const Held& h : m_held)
            for (const wire::EventRecord& e : h.events)
                if (firstAfter == 0 && e.sequence > last)
                    firstAfter = e.timeNs;
        change.reason.timeNs = firstAfter != 0 ? std::min(firstAfter, wallClockNs()) : wallClockNs();
        change.reason.lost = std::exchange(m_unreportedLost, 0); // the previous run's, no state covered them
    }
    if (change.kind != StateKind::Initial) {
        ++m_stats.resyncs;
        if (change.kind == StateKind::Restarted)
            ++m_stats.restarts;
    }
    m_pendingState.clear();
    if (change.kind == StateKind::Restarted)
        m_lateGoodbye.reset(); // another run's
    m_hasState = true;
    m_pid = state.hello.pid;
    m_applied = m_stateSequence = last;
    if (change.kind != StateKind::Resync) {
        // A job run from its first state on: losses count from records above it (those below are in it).
        m_unreportedLost = 0;
        m_seen = last;
        for (const Held& h : m_held)
            account(h.events);
    }
    m_goodbye = false;
    m_holding = false;
    m_lastHeard = Clock::now();
    m_silenceReported = false;
    if (m_lowestHeard > last) { // the definitions sent just before this state may have missed us
        m_stacksWanted = true;
        trySendStacksRequest();
    }
    m_listener.onState(state, change);
    setLink(Link::Live);
    releaseHeld();
}

void AgentClient::timers(Clock::time_point now)
{
    if (!m_pendingState.empty() && now - m_pendingSince >= m_options.resyncInterval)
        settlePending(true);
    if (m_requestOutstanding && now - m_requestSent >= m_options.retryInterval)
        m_requestOutstanding = false; // unanswered (a job that died, a lost connection): ask again, anew
    trySendRequest(now);
    if (!m_hasState && !m_noAnswerReported && now - m_start >= m_options.answerTimeout) {
        m_noAnswerReported = true;
        report(ErrorKind::NoAnswer, noAnswerMessage());
    }
    // A job that exits without its goodbye reaching us (killed, or its goodbye dropped for a viewer that fell
    // behind) closes its end of the connection: once nothing more has come for a moment after that, it is silence
    // without waiting for silenceLimit. A hung or stopped job keeps the connection and waits the whole limit.
    // (What was queued for us before the connection closed is still read first: the grace runs from the last
    // message, however long the backlog took.)
    // Only on ipc: there a closed connection is the job's own doing; on tcp it may be the network, which ZeroMQ
    // reconnects by itself, and the silence limit decides.
    if (m_quietAt == Clock::time_point {} || m_quietAt < m_lastHeard)
        return; // the SUB had messages at the last poll (see poll())
    const Clock::duration quiet = m_quietAt - m_lastHeard;
    if (m_lateGoodbye && quiet >= DisconnectGrace) {
        // The Goodbye came on the state connection and nothing more on the SUB for a moment: every event the PUB
        // still had for us was read first (it sent them before the Goodbye); what did not come was dropped.
        const viewer::DecodedGoodbye bye = *m_lateGoodbye;
        endOfRun(bye);
        return;
    }
    const bool closed = m_closedWithoutGoodbye && !m_sockets->up && m_options.endpoint.rfind("ipc://", 0) == 0
        && quiet >= DisconnectGrace;
    if (m_hasState && !m_goodbye && !m_silenceReported && (closed || quiet >= m_options.silenceLimit)) {
        m_silenceReported = true;
        m_silenceClosed = closed;
        setLink(Link::Silent);
        m_listener.onSilence(std::chrono::duration_cast<std::chrono::milliseconds>(quiet));
    }
}

std::string AgentClient::noAnswerMessage() const
{
    const std::string& endpoint = m_options.endpoint;
    const Sockets& s = *m_sockets;
    if (s.authStatus != 0)
        return endpoint + ": the agent refused our CURVE key (status " + std::to_string(s.authStatus)
            + "): is our public key among its MEMSCOPE_CURVE_CLIENTS?";
    if (s.mechanismMismatch && !curve())
        return endpoint
            + ": the agent uses CURVE and we do not: give its public key and our secret key (memscope-cli record "
              "--curve-server-key FILE --curve-key FILE; docs/protocol.md, \"TCP and CURVE\")";
    if (s.mechanismMismatch)
        return endpoint
            + ": we use CURVE and the agent does not (its endpoint has no MEMSCOPE_CURVE_SECRET): record "
              "it without --curve-server-key and --curve-key";
    if (curve() && s.connected && !s.handshook)
        return endpoint
            + ": no memscope agent answered: the CURVE handshake never completed (is the server key the "
              "agent's public key, and does the agent use CURVE?)";
    if (m_heardSub)
        return endpoint + ": the agent publishes events but did not answer the state request on " + m_stateEndpoint;
    return endpoint + ": no memscope agent answered (is the job running?)";
}

} // namespace memscope::client
