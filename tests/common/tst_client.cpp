// Tests of client::AgentClient (common/client) and its viewer::Recorder (resync) against fake agents driven on the
// test's own thread: a PUB and a ROUTER speaking protocol.h (docs/protocol.md) over a small allocator model, which
// can skip sequence numbers (records not received), drop records as a full ring does (lost > 0), say goodbye, die,
// be replaced by another run of the job at the same endpoint, send broken frames, and be a CURVE server with a ZAP
// handler (ZeroMQ RFC 26, RFC 27). The client and the fake agent are polled in turn, so each test is one thread.
#include "client/agentclient.h"
#include "client/curvekeys.h"
#include "io/snapshotio.h"
#include "model/replay.h"
#include "viewer/decoder.h"
#include "wire/endpoint.h"
#include "wire/keyfile.h"

#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <zmq.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace memscope;
using namespace memscope::wire;
using namespace memscope::viewer;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr uint64_t A = 0x7f0000000000, B = 0x7f0100000000, C = 0x7f0200000000;

// How a fake agent's event reaches the viewer.
enum class Send {
    Yes, // published
    Skip, // numbered but never published: the viewer sees a sequence jump
    Lost, // dropped before numbering, as a full ring does: the next record says lost = 1 more
};

struct CurveServer {
    std::string secretKey; // Z85
    std::set<std::string> clients; // authorised public keys, Z85
};

// One run of a job: binds PUB at `endpoint` and ROUTER at its state endpoint, keeps an allocator state, and
// publishes each change as the agent does (one sequence, heartbeats included).
class FakeAgent {
public:
    FakeAgent(std::string endpoint, uint32_t pid, const CurveServer* curve = nullptr)
        : m_endpoint(std::move(endpoint))
        , m_pid(pid)
    {
        if (curve) {
            m_curve = *curve;
            // The ZAP handler (RFC 27) must be bound before a CURVE server socket handshakes.
            m_zap = zmq::socket_t(m_context, zmq::socket_type::rep);
            m_zap.set(zmq::sockopt::linger, 0);
            m_zap.bind("inproc://zeromq.zap.01");
        }
        m_pub = socket(zmq::socket_type::pub);
        m_router = socket(zmq::socket_type::router);
        m_pub.bind(m_endpoint);
        m_router.bind(wire::stateEndpointFor(m_endpoint));
    }

    // The job dies: its sockets close (the ipc files go), nothing is said.
    void close()
    {
        m_pub.close();
        m_router.close();
    }

    void segmentAlloc(uint64_t address, uint64_t size, Send send = Send::Yes)
    {
        SegmentRecord s {};
        s.address = address;
        s.size = size;
        s.isSmall = size == 2 * MiB;
        m_segments[address] = s;
        publish(EventType::SegmentAlloc, address, size, 0, send);
    }
    void segmentFree(uint64_t address, Send send = Send::Yes)
    {
        const uint64_t size = m_segments.at(address).size;
        m_segments.erase(address);
        publish(EventType::SegmentFree, address, size, 0, send);
    }
    void alloc(uint64_t address, uint64_t size, uint64_t requested, Send send = Send::Yes)
    {
        BlockRecord b {};
        b.address = address;
        b.size = size;
        b.requestedSize = requested;
        b.state = 1;
        m_blocks[address] = b;
        publish(EventType::Alloc, address, size, requested, send);
    }
    void freeRequested(uint64_t address, Send send = Send::Yes)
    {
        m_blocks.at(address).state = 2;
        publish(EventType::FreeRequested, address, m_blocks.at(address).size, 0, send);
    }
    void freeCompleted(uint64_t address, Send send = Send::Yes)
    {
        const uint64_t size = m_blocks.at(address).size;
        m_blocks.erase(address);
        publish(EventType::FreeCompleted, address, size, 0, send);
    }
    void free(uint64_t address, Send send = Send::Yes)
    {
        freeRequested(address, send);
        freeCompleted(address, send);
    }
    void heartbeat(Send send = Send::Yes) { publish(EventType::Heartbeat, 0, 0, 0, send); }
    void goodbye()
    {
        m_pub.send(zmq::buffer(std::string_view(GoodbyeTopic)), zmq::send_flags::sndmore);
        m_pub.send(zmq::buffer(encodeGoodbye(m_sequence, m_lostTotal)));
    }
    // The goodbye as the agent sends it on the state connection, to every connection that asked (Request{Goodbye}).
    void goodbyeOnStateConnection()
    {
        m_ending = true; // the requests that came: state requests go unanswered now
        pump();
        m_ending = false;
        for (const std::string& identity : m_goodbyeWatchers) {
            m_router.send(zmq::buffer(identity), zmq::send_flags::sndmore);
            m_router.send(zmq::buffer(encodeGoodbye(m_sequence, m_lostTotal)));
        }
    }
    void sendRaw(std::string_view topic, const std::vector<uint8_t>& frame)
    {
        m_pub.send(zmq::buffer(topic), zmq::send_flags::sndmore);
        m_pub.send(zmq::buffer(frame));
    }
    void setStateVersion(uint16_t version) { m_stateVersion = version; }

    // Answers state requests and ZAP requests that arrived.
    void pump()
    {
        zmq::message_t identity, request;
        while (m_router.handle() && m_router.recv(identity, zmq::recv_flags::dontwait)) {
            while (identity.more() && m_router.recv(request, zmq::recv_flags::dontwait) && request.more()) { }
            const DecodedRequest decoded = decodeRequest({ request.data<uint8_t>(), request.size() });
            if (!decoded.ok())
                continue;
            if (decoded.request.type == uint16_t(RequestType::Stacks)) {
                ++m_stacksRequests; // no reply
                continue;
            }
            if (decoded.request.type == uint16_t(RequestType::Goodbye)) {
                m_goodbyeWatchers.emplace_back(identity.data<char>(), identity.size()); // goodbyeOnStateConnection
                continue;
            }
            if (decoded.request.type != uint16_t(RequestType::State) || m_ending)
                continue;
            ++m_requests;
            std::vector<SegmentRecord> segments;
            for (const auto& [address, s] : m_segments)
                segments.push_back(s);
            std::vector<BlockRecord> blocks;
            for (const auto& [address, b] : m_blocks)
                blocks.push_back(b);
            std::vector<uint8_t> state = encodeState(makeHello(m_pid, 1, "fakehost", "test"), m_sequence, segments, blocks);
            std::memcpy(state.data() + 4, &m_stateVersion, 2); // Hello.version
            m_router.send(identity, zmq::send_flags::sndmore);
            m_router.send(zmq::buffer(state));
        }
        if (m_zap)
            answerZap();
    }

    uint64_t sequence() const { return m_sequence; }
    int requests() const { return m_requests; }
    int stacksRequests() const { return m_stacksRequests; }
    const std::string& endpoint() const { return m_endpoint; }

    // The state as lines, to compare with a recording's final state.
    QStringList describe() const
    {
        QStringList lines;
        for (const auto& [address, s] : m_segments) {
            lines << QStringLiteral("segment %1 size %2").arg(address, 0, 16).arg(s.size);
            for (auto it = m_blocks.lower_bound(address); it != m_blocks.end() && it->first < address + s.size; ++it)
                lines << QStringLiteral("  block %1 size %2 requested %3 state %4")
                             .arg(it->first, 0, 16)
                             .arg(it->second.size)
                             .arg(it->second.requestedSize)
                             .arg(it->second.state);
        }
        return lines;
    }

private:
    zmq::socket_t socket(zmq::socket_type type)
    {
        zmq::socket_t s(m_context, type);
        s.set(zmq::sockopt::linger, 0);
        if (!m_curve.secretKey.empty()) {
            s.set(zmq::sockopt::curve_server, true);
            s.set(zmq::sockopt::curve_secretkey, m_curve.secretKey);
            s.set(zmq::sockopt::zap_domain, "memscope");
        }
        return s;
    }

    void publish(EventType type, uint64_t address, uint64_t size, uint64_t requested, Send send)
    {
        m_timeNs += 1000;
        if (send == Send::Lost) {
            ++m_pendingLost;
            ++m_lostTotal;
            return;
        }
        EventRecord e {};
        e.sequence = ++m_sequence;
        e.timeNs = m_timeNs;
        e.address = address;
        e.size = size;
        e.requestedSize = requested;
        e.type = uint8_t(type);
        e.lost = m_pendingLost;
        m_pendingLost = 0;
        if (send == Send::Skip)
            return;
        sendRaw(EventsTopic, encodeBatch(std::vector { e }));
    }

    // RFC 27: request = version, request id, domain, address, routing id, mechanism, credentials (the client's
    // 32-byte public key for CURVE); reply = version, request id, status code, status text, user id, metadata.
    void answerZap()
    {
        std::vector<zmq::message_t> frames;
        for (;;) {
            zmq::message_t frame;
            if (!m_zap.recv(frame, zmq::recv_flags::dontwait))
                return;
            const bool more = frame.more();
            frames.push_back(std::move(frame));
            if (!more)
                break;
        }
        bool allowed = false;
        if (frames.size() >= 7 && frames[6].size() == 32) {
            char z85[41] = {};
            zmq_z85_encode(z85, frames[6].data<uint8_t>(), 32);
            allowed = m_curve.clients.count(z85) > 0;
        }
        const std::string requestId = frames.size() > 1 ? frames[1].to_string() : std::string();
        const std::vector<std::string> reply { "1.0", requestId, allowed ? "200" : "400",
                                               allowed ? "OK" : "not an authorised client", "", "" };
        for (size_t i = 0; i < reply.size(); ++i)
            m_zap.send(zmq::buffer(reply[i]), i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }

    std::string m_endpoint;
    uint32_t m_pid;
    CurveServer m_curve;
    zmq::context_t m_context { 1 };
    zmq::socket_t m_zap, m_pub, m_router;
    std::map<uint64_t, SegmentRecord> m_segments;
    std::map<uint64_t, BlockRecord> m_blocks;
    uint64_t m_sequence = 0, m_timeNs = 5'000'000'000, m_lostTotal = 0;
    uint32_t m_pendingLost = 0;
    uint16_t m_stateVersion = ProtocolVersion;
    int m_requests = 0;
    int m_stacksRequests = 0;
    std::vector<std::string> m_goodbyeWatchers; // identities of the connections that sent Request{Goodbye}
    bool m_ending = false;
};

// What the client reported, besides the recording.
class Probe : public client::RecordingListener {
public:
    void onState(const DecodedState& state, const client::StateChange& change) override
    {
        client::RecordingListener::onState(state, change);
        kinds.push_back(change.kind);
    }
    void onEvents(std::span<const EventRecord> events) override
    {
        client::RecordingListener::onEvents(events);
        if (whileHandling)
            whileHandling(events);
    }
    void onSilence(std::chrono::milliseconds) override { ++silences; }
    void onLink(client::Link link) override { links.push_back(link); }
    void onError(const client::ClientError& e) override { errors.push_back(e); }

    std::vector<client::StateKind> kinds;
    std::vector<client::Link> links;
    std::vector<client::ClientError> errors;
    int silences = 0;
    std::function<void(std::span<const EventRecord>)> whileHandling; // called after each onEvents
};

// Polls the client and pumps the agents until `done` or `timeout`.
bool pumpUntil(client::AgentClient& c, const std::vector<FakeAgent*>& agents, const std::function<bool()>& done,
               std::chrono::milliseconds timeout = 5000ms)
{
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= end)
            return false;
        for (FakeAgent* a : agents)
            a->pump();
        c.poll(5ms);
    }
    return true;
}

client::ClientOptions fastOptions(const std::string& endpoint)
{
    client::ClientOptions o;
    o.endpoint = endpoint;
    o.answerTimeout = 3000ms;
    o.silenceLimit = 400ms;
    o.resyncInterval = 20ms;
    o.retryInterval = 300ms;
    return o;
}

// Starts the client and waits until it has a state and its subscription carries records (heartbeats published
// until one arrives: the ones before the subscription took effect are lost, which the client must survive).
bool join(client::AgentClient& c, Probe& probe, FakeAgent& agent)
{
    if (!c.start())
        return false;
    if (!pumpUntil(c, { &agent }, [&] { return c.hasState(); }))
        return false;
    for (int i = 0; i < 100; ++i) {
        agent.heartbeat();
        if (pumpUntil(c, { &agent },
                      [&] { return probe.recorder().lastSequence() == agent.sequence() && c.link() == client::Link::Live; },
                      50ms))
            return true;
    }
    return false;
}

// A recording's final state in FakeAgent::describe()'s form.
QStringList describe(const model::Snapshot& s)
{
    QStringList lines;
    for (const model::Segment& seg : s.segments) {
        lines << QStringLiteral("segment %1 size %2").arg(uint64_t(seg.address), 0, 16).arg(seg.totalSize);
        const model::Block* blocks = s.segmentBlocks(seg);
        for (uint32_t i = 0; i < seg.blockCount; ++i)
            if (blocks[i].state != model::BlockState::Inactive)
                lines << QStringLiteral("  block %1 size %2 requested %3 state %4")
                             .arg(uint64_t(blocks[i].address), 0, 16)
                             .arg(blocks[i].size)
                             .arg(blocks[i].requestedSize)
                             .arg(blocks[i].state == model::BlockState::ActivePendingFree ? 2 : 1);
    }
    return lines;
}

// The snapshot written as a pickle and read back (what a user opens), then replayed: no warning, and the replay's
// end is the snapshot's final state. Returns the snapshot read back.
std::shared_ptr<const model::Snapshot> checkReplays(const model::Snapshot& s)
{
    const std::string pickle = io::encodePickle(s);
    const io::LoadResult r
        = io::loadSnapshotFromMemory({ reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size() }, "recorded");
    if (!r.ok()) {
        qWarning("%s", r.error.toString().c_str());
        return nullptr;
    }
    const model::Replay replay = model::Replay::build(*r.snapshot, 0);
    if (replay.warnings() != 0) {
        qWarning("replay warnings: %llu", static_cast<unsigned long long>(replay.warnings()));
        return nullptr;
    }
    const model::ReplayState end = replay.stateAt(replay.entryCount());
    QStringList replayed;
    for (const model::ReplaySegment& seg : end.segments) {
        replayed << QStringLiteral("segment %1 size %2").arg(uint64_t(seg.address), 0, 16).arg(seg.totalSize);
        for (uint32_t i = seg.blockBegin; i < seg.blockBegin + seg.blockCount; ++i)
            if (end.blocks[i].state != model::BlockState::Inactive)
                replayed << QStringLiteral("  block %1 size %2 requested %3 state %4")
                                .arg(uint64_t(end.blocks[i].address), 0, 16)
                                .arg(end.blocks[i].size)
                                .arg(end.blocks[i].requestedSize)
                                .arg(end.blocks[i].state == model::BlockState::ActivePendingFree ? 2 : 1);
    }
    if (replayed != describe(*r.snapshot)) {
        qWarning("replayed: %s\nsnapshot: %s", qPrintable(replayed.join(u'\n')),
                 qPrintable(describe(*r.snapshot).join(u'\n')));
        return nullptr;
    }
    return r.snapshot;
}

QStringList annotationNames(const model::Snapshot& s, model::Annotation::Stage stage)
{
    QStringList names;
    for (const model::Annotation& a : s.annotations)
        if (a.stage == stage)
            names << QString::fromUtf8(s.str(a.name).data(), qsizetype(s.str(a.name).size()));
    return names;
}

// A job's state before the viewer joins: two segments, an allocated block, a pending-free block, a small-pool block.
void setUp(FakeAgent& agent)
{
    agent.segmentAlloc(A, 20 * MiB);
    agent.alloc(A, MiB, MiB - 100);
    agent.alloc(A + MiB, 2 * MiB, 2 * MiB);
    agent.freeRequested(A + MiB);
    agent.segmentAlloc(B, 2 * MiB);
    agent.alloc(B, 512, 500);
}

// Everything a gap can hide: a freed block, a pending free completed, a whole segment gone, a new segment with a
// block, an address reused with another size, an allocated block turned pending free.
int changeUnseen(FakeAgent& agent, Send send)
{
    agent.free(A, send);
    agent.freeCompleted(A + MiB, send);
    agent.free(B, send);
    agent.segmentFree(B, send);
    agent.segmentAlloc(C, 20 * MiB, send);
    agent.alloc(C, 3 * MiB, 3 * MiB - 7, send);
    agent.alloc(A, 512, 512, send);
    agent.freeRequested(A + 4 * MiB, send);
    return 10;
}

// This process's peak resident memory (VmHWM, proc(5)), in KiB; 0 when /proc cannot say.
long peakResidentKiB()
{
    QFile status(QStringLiteral("/proc/self/status"));
    if (!status.open(QIODevice::ReadOnly))
        return 0;
    for (const QByteArray& line : status.readAll().split('\n'))
        if (line.startsWith("VmHWM:"))
            return line.mid(6).trimmed().split(' ').value(0).toLong();
    return 0;
}

std::string ipcEndpoint(const QTemporaryDir& dir, const char* name)
{
    return "ipc://" + dir.path().toStdString() + "/" + name;
}

} // namespace

Q_DECLARE_METATYPE(Send)

class TestClient : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // A gap (records not received, or dropped by the agent) makes the client fetch a fresh state by itself; the
    // Recorder's resync turns its state into it: the final state is the agent's exactly, the trace replays
    // without a warning, and an annotation pair names what was missing.
    void resyncAfterGap_data()
    {
        QTest::addColumn<Send>("send");
        QTest::newRow("sequence jump (records not received)") << Send::Skip;
        QTest::newRow("records the agent dropped (lost > 0)") << Send::Lost;
    }
    void resyncAfterGap()
    {
        QFETCH(Send, send);
        QTemporaryDir dir;
        FakeAgent agent(ipcEndpoint(dir, "gap"), 100);
        setUp(agent);
        Probe probe;
        client::AgentClient c(fastOptions(agent.endpoint()), probe);
        QVERIFY(join(c, probe, agent));
        agent.alloc(A + 4 * MiB, MiB, MiB);
        const int missed = changeUnseen(agent, send);
        agent.alloc(A + 8 * MiB, MiB, 1000);
        agent.heartbeat();
        QVERIFY(pumpUntil(c, { &agent }, [&] {
            return probe.recorder().lastSequence() == agent.sequence() && c.link() == client::Link::Live;
        }));
        QCOMPARE(c.stats().resyncs, 1ULL);
        QCOMPARE(probe.kinds.back(), client::StateKind::Resync);
        const RecorderStats& st = probe.recorder().stats();
        QCOMPARE(st.resyncs, 1ULL);
        QCOMPARE(st.inconsistent, 0ULL);
        QVERIFY(!st.resyncNeeded());
        QCOMPARE(st.missing + st.lost, uint64_t(missed));
        const model::Snapshot s = probe.recorder().snapshot();
        QCOMPARE(describe(s), agent.describe());
        QVERIFY(checkReplays(s));
        const QString name = QStringLiteral("memscope: resync after %1 missing records").arg(missed);
        QCOMPARE(annotationNames(s, model::Annotation::Stage::Start), QStringList { name });
        QCOMPARE(annotationNames(s, model::Annotation::Stage::End), QStringList { name });
        QVERIFY(probe.errors.empty());

        // What follows the fresh state applies on it.
        agent.free(A + 8 * MiB);
        QVERIFY(pumpUntil(c, { &agent }, [&] { return probe.recorder().lastSequence() == agent.sequence(); }));
        const model::Snapshot after = probe.recorder().snapshot();
        QCOMPARE(after.deviceTraces[0].back().action, model::Action::FreeCompleted);
        QCOMPARE(after.deviceTraces[0].back().addr, int64_t(A + 8 * MiB));
        QCOMPARE(describe(after), agent.describe());
        QVERIFY(checkReplays(after));
        QCOMPARE(probe.recorder().stats().inconsistent, 0ULL);
    }

    // ZeroMQ's slow joiner: records published after the state was taken but before the subscription carried
    // them leave a jump before the first record received. Nothing was delivered yet, so the fresher state the
    // client asks for replaces the first one (Initial again): no resync, nothing missing.
    void slowJoinerGetsAFresherState()
    {
        QTemporaryDir dir;
        FakeAgent agent(ipcEndpoint(dir, "slow"), 100);
        setUp(agent);
        Probe probe;
        client::AgentClient c(fastOptions(agent.endpoint()), probe);
        QVERIFY(c.start());
        QVERIFY(pumpUntil(c, { &agent }, [&] { return c.hasState(); }));
        // Each record received follows one never published: the first one heard always jumps.
        bool fresher = false;
        for (int i = 0; i < 100 && !fresher; ++i) {
            agent.heartbeat(Send::Skip);
            agent.heartbeat();
            fresher = pumpUntil(c, { &agent }, [&] { return probe.kinds.size() >= 2; }, 50ms);
        }
        QVERIFY(fresher);
        agent.alloc(A + 4 * MiB, MiB, MiB);
        QVERIFY(pumpUntil(c, { &agent }, [&] {
            return probe.recorder().lastSequence() == agent.sequence() && c.link() == client::Link::Live;
        }));
        for (client::StateKind kind : probe.kinds)
            QCOMPARE(kind, client::StateKind::Initial);
        QCOMPARE(c.stats().resyncs, 0ULL);
        const RecorderStats& st = probe.recorder().stats();
        QCOMPARE(st.resyncs, 0ULL);
        QCOMPARE(st.gaps, 0ULL);
        QCOMPARE(st.missing, 0ULL);
        QVERIFY(!st.resyncNeeded());
        QCOMPARE(st.applied, 1ULL);
        QCOMPARE(describe(probe.recorder().snapshot()), agent.describe());
    }

    // The agent sends its stack definitions again just before a state reply; a client that heard no record from
    // before that state cannot know they reached it (its subscription may have taken effect after them), so it asks
    // for them again (Request{Stacks}) once something has come through the subscription, and only then.
    void stacksAskedAgainWhenTheStateCameFirst_data()
    {
        QTest::addColumn<bool>("heardBefore"); // records from before the state reached the client
        QTest::newRow("the state came before anything was heard") << false;
        QTest::newRow("records from before the state were heard") << true;
    }
    void stacksAskedAgainWhenTheStateCameFirst()
    {
        QFETCH(bool, heardBefore);
        QTemporaryDir dir;
        FakeAgent agent(ipcEndpoint(dir, "stacks"), 100);
        setUp(agent);
        Probe probe;
        client::AgentClient c(fastOptions(agent.endpoint()), probe);
        QVERIFY(c.start());
        if (heardBefore) {
            // Heartbeats until one is heard, the state request left unanswered meanwhile.
            for (int i = 0; i < 200 && c.stats().messages == 0; ++i) {
                agent.heartbeat();
                c.poll(10ms);
            }
            QVERIFY(c.stats().messages > 0);
        }
        QVERIFY(pumpUntil(c, { &agent }, [&] { return c.hasState(); }));
        pumpUntil(c, { &agent }, [] { return false; }, 100ms);
        QCOMPARE(agent.stacksRequests(), 0); // nothing heard yet, or the definitions came before the state
        for (int i = 0; i < 100 && agent.stacksRequests() == 0; ++i) {
            agent.heartbeat();
            pumpUntil(c, { &agent }, [&] { return agent.stacksRequests() > 0; }, 20ms);
        }
        agent.heartbeat();
        QVERIFY(pumpUntil(c, { &agent }, [&] { return probe.recorder().lastSequence() == agent.sequence(); }));
        QCOMPARE(agent.stacksRequests(), heardBefore ? 0 : 1);
        QCOMPARE(c.stats().stacksRequests, uint64_t(agent.stacksRequests()));
        QCOMPARE(agent.requests(), 1);
        QCOMPARE(describe(probe.recorder().snapshot()), agent.describe());
        QVERIFY(probe.errors.empty());
    }

    // A one-byte topic this client does not know is a newer agent's: skipped without a word, the recording goes on.
    void unknownTopicOfANewerAgent()
    {
        QTemporaryDir dir;
        FakeAgent agent(ipcEndpoint(dir, "newer"), 100);
        setUp(agent);
        Probe probe;
        client::AgentClient c(fastOptions(agent.endpoint()), probe);
        QVERIFY(join(c, probe, agent));
        for (int i = 0; i < 3; ++i)
            agent.sendRaw("Z", std::vector<uint8_t>(24, 0x5a));
        agent.alloc(A + 4 * MiB, MiB, MiB);
        QVERIFY(pumpUntil(c, { &agent }, [&] { return probe.recorder().lastSequence() == agent.sequence(); }));
        QCOMPARE(c.stats().unknownTopics, 3ULL);
        QVERIFY(probe.errors.empty());
        QCOMPARE(c.stats().malformed, 0ULL);
        QCOMPARE(describe(probe.recorder().snapshot()), agent.describe());
    }

    // What no fresh state covers reaches the Recorder through onMissing: the jumps among the records flush()
    // hands over (the recording ends while a state is on its way), and the records between the last one received
    // and a goodbye's lastSequence. The figures `memscope-cli info` prints come from these counts.
    void missingWithoutAState_data()
    {
        QTest::addColumn<int>("jumped"); // records never published before the last one published
        QTest::addColumn<int>("atEnd"); // records never published after it
        QTest::addColumn<int>("goodbyeOn"); // 0: none (the recording ends with flush()), 1: the PUB, 2: only the
                                            // state connection (the PUB's dropped), the job then gone
        QTest::newRow("flush over a jump") << 2 << 0 << 0;
        QTest::newRow("goodbye after records not received") << 0 << 3 << 1;
        QTest::newRow("goodbye while waiting for a state") << 2 << 3 << 1;
        QTest::newRow("goodbye on the state connection only, the job gone") << 0 << 3 << 2;
        QTest::newRow("goodbye on the state connection only, while waiting for a state") << 2 << 3 << 2;
    }
    void missingWithoutAState()
    {
        QFETCH(int, jumped);
        QFETCH(int, atEnd);
        QFETCH(int, goodbyeOn);
        const bool goodbye = goodbyeOn != 0;
        QTemporaryDir dir;
        FakeAgent agent(ipcEndpoint(dir, "missing"), 100);
        setUp(agent);
        Probe probe;
        client::AgentClient c(fastOptions(agent.endpoint()), probe);
        QVERIFY(join(c, probe, agent));
        agent.alloc(A + 4 * MiB, MiB, MiB);
        for (int i = 0; i < jumped; ++i)
            agent.heartbeat(Send::Skip);
        agent.alloc(A + 8 * MiB, MiB, 1000);
        const uint64_t lastPublished = agent.sequence();
        for (int i = 0; i < atEnd; ++i)
            agent.heartbeat(Send::Skip);
        if (goodbyeOn == 1)
            agent.goodbye();
        if (goodbyeOn == 2) {
            agent.goodbyeOnStateConnection();
            agent.close();
        }
        // The agent answers no state request: a jump keeps its records waiting until flush() or the goodbye.
        const auto end = std::chrono::steady_clock::now() + 5s;
        auto arrived = [&] {
            return goodbye
                ? c.link() == client::Link::Gone
                : (jumped > 0 ? c.link() == client::Link::Resyncing : probe.recorder().lastSequence() == lastPublished);
        };
        while (!arrived() && std::chrono::steady_clock::now() < end)
            c.poll(5ms);
        QVERIFY(arrived());
        if (!goodbye)
            c.flush();
        QCOMPARE(probe.recorder().lastSequence(), lastPublished);
        const RecorderStats& st = probe.recorder().stats();
        QCOMPARE(st.gaps, uint64_t((jumped > 0) + (atEnd > 0)));
        QCOMPARE(st.missing, uint64_t(jumped + atEnd));
        QCOMPARE(st.resyncs, 0ULL);
        QCOMPARE(st.lost, 0ULL);
        QCOMPARE(st.inconsistent, 0ULL);
        QVERIFY(st.resyncNeeded());
        QCOMPARE(describe(probe.recorder().snapshot()), agent.describe());
        QCOMPARE(c.stats().resyncs, 0ULL);
        QCOMPARE(probe.silences, 0); // the job said goodbye: no silence, no closed connection blamed
    }

    // Gaps over and over while records keep coming (a flood the viewer cannot keep up with): each wait ends in a
    // fresh state, at most one request is out at a time, and the end is still exact and consistent.
    void resyncUnderFlood()
    {
        QTemporaryDir dir;
        FakeAgent agent(ipcEndpoint(dir, "flood"), 100);
        agent.segmentAlloc(A, 64 * MiB);
        Probe probe;
        client::AgentClient c(fastOptions(agent.endpoint()), probe);
        QVERIFY(join(c, probe, agent));
        int missed = 0;
        for (int round = 0; round < 40; ++round) {
            const uint64_t at = A + uint64_t(round % 16) * 2 * MiB;
            const Send send = round % 3 == 0 ? Send::Lost : Send::Skip;
            agent.alloc(at, MiB, 1000 + uint64_t(round));
            agent.free(at, send);
            agent.alloc(at, 2 * MiB, 2000 + uint64_t(round), send);
            missed += 3;
            agent.free(at);
            agent.alloc(at + MiB / 2, 512, 512);
            agent.free(at + MiB / 2);
            c.poll(1ms);
            agent.pump();
        }
        agent.heartbeat();
        QVERIFY(pumpUntil(c, { &agent }, [&] {
            return probe.recorder().lastSequence() == agent.sequence() && c.link() == client::Link::Live;
        }));
        const RecorderStats& st = probe.recorder().stats();
        QVERIFY(st.resyncs >= 1);
        QCOMPARE(st.inconsistent, 0ULL);
        QVERIFY(st.missing + st.lost <= uint64_t(missed));
        QVERIFY(c.stats().stateRequests <= c.stats().states + 1 + c.stats().resyncs);
        const model::Snapshot s = probe.recorder().snapshot();
        QCOMPARE(describe(s), agent.describe());
        QVERIFY(checkReplays(s));
        QCOMPARE(uint64_t(annotationNames(s, model::Annotation::Stage::End).size()), st.resyncs);
    }

    // The job goes away (a goodbye, or killed: silence) and another run of it binds the same endpoint: the client
    // keeps the recording, reconnects by itself and continues from the new run's state, flagged as a restart.
    void restart_data()
    {
        QTest::addColumn<int>("ending"); // 0 goodbye, 1 killed then silence, 2 killed and replaced at once
        QTest::newRow("goodbye, then a new run") << 0;
        QTest::newRow("killed, silence, then a new run") << 1;
        QTest::newRow("killed and replaced before the silence") << 2;
    }
    void restart()
    {
        QFETCH(int, ending);
        QTemporaryDir dir;
        const std::string endpoint = ipcEndpoint(dir, "job");
        auto first = std::make_unique<FakeAgent>(endpoint, 100);
        setUp(*first);
        Probe probe;
        client::AgentClient c(fastOptions(endpoint), probe);
        QVERIFY(join(c, probe, *first));
        for (int i = 0; i < 8; ++i) // the first run goes well past the records the second will send
            first->heartbeat();
        first->alloc(A + 4 * MiB, MiB, MiB);
        QVERIFY(pumpUntil(c, { first.get() }, [&] { return probe.recorder().lastSequence() == first->sequence(); }));
        if (ending == 0) {
            first->goodbye();
            QVERIFY(pumpUntil(c, { first.get() }, [&] { return c.link() == client::Link::Gone; }));
        }
        first->close();
        first.reset();
        if (ending == 1)
            QVERIFY(pumpUntil(c, {}, [&] { return probe.silences == 1 && c.link() == client::Link::Silent; }));

        FakeAgent second(endpoint, 200);
        second.segmentAlloc(C, 20 * MiB);
        second.alloc(C + MiB, MiB, 777);
        bool restarted = false;
        for (int i = 0; i < 100 && !restarted; ++i) {
            second.heartbeat();
            restarted = pumpUntil(c, { &second }, [&] { return c.stats().restarts == 1; }, 50ms);
        }
        QVERIFY(restarted);
        second.alloc(C + 4 * MiB, 2 * MiB, 2 * MiB);
        second.heartbeat();
        QVERIFY(pumpUntil(c, { &second }, [&] {
            return probe.recorder().lastSequence() == second.sequence() && c.link() == client::Link::Live;
        }));
        QCOMPARE(probe.kinds.back(), client::StateKind::Restarted);
        QCOMPARE(c.pid(), 200U);
        const RecorderStats& st = probe.recorder().stats();
        QCOMPARE(st.restarts, 1ULL);
        QCOMPARE(st.inconsistent, 0ULL);
        QCOMPARE(probe.recorder().hello().pid, 200U);
        const model::Snapshot s = probe.recorder().snapshot();
        QCOMPARE(describe(s), second.describe());
        QVERIFY(checkReplays(s));
        QCOMPARE(annotationNames(s, model::Annotation::Stage::Start),
                 QStringList { QStringLiteral("memscope: job restarted (pid 200, was 100)") });
        QVERIFY(probe.errors.empty());
    }

    // Nothing heard for silenceLimit: reported once; the same job speaking again continues without a resync.
    void silence()
    {
        QTemporaryDir dir;
        FakeAgent agent(ipcEndpoint(dir, "quiet"), 100);
        setUp(agent);
        Probe probe;
        client::AgentClient c(fastOptions(agent.endpoint()), probe);
        QVERIFY(join(c, probe, agent));
        QVERIFY(pumpUntil(c, { &agent }, [&] { return probe.silences == 1; }));
        QCOMPARE(c.link(), client::Link::Silent);
        QTest::qWait(100);
        c.poll(10ms);
        QCOMPARE(probe.silences, 1); // once per silence
        agent.alloc(A + 4 * MiB, MiB, MiB);
        agent.heartbeat();
        QVERIFY(pumpUntil(c, { &agent }, [&] {
            return probe.recorder().lastSequence() == agent.sequence() && c.link() == client::Link::Live;
        }));
        QCOMPARE(c.stats().resyncs, 0ULL);
        QCOMPARE(probe.recorder().stats().resyncs, 0ULL);
        QCOMPARE(describe(probe.recorder().snapshot()), agent.describe());
    }

    // The viewer itself stops in the middle of handling a message (SIGSTOP, a debugger, a starved machine) for
    // longer than silenceLimit: once it runs again, that time is not the agent's silence. (It used to be judged
    // right after the message, before the next poll could see that the viewer had been away, so a recording of a
    // flood stopped as "the agent went silent" when the viewer was stopped while busy.)
    void stoppedWhileHandlingIsNoSilence()
    {
        QTemporaryDir dir;
        FakeAgent agent(ipcEndpoint(dir, "busy"), 100);
        setUp(agent);
        Probe probe;
        const client::ClientOptions options = fastOptions(agent.endpoint());
        client::AgentClient c(options, probe);
        QVERIFY(join(c, probe, agent));
        int stops = 0;
        probe.whileHandling = [&](std::span<const EventRecord> events) {
            for (const EventRecord& e : events)
                if (e.type == uint8_t(EventType::Alloc) && e.address == C) {
                    ++stops;
                    std::this_thread::sleep_for(options.silenceLimit + 300ms);
                }
        };
        agent.alloc(C, 512, 512);
        QVERIFY(pumpUntil(c, { &agent }, [&] { return stops == 1; }));
        QCOMPARE(probe.silences, 0);
        QCOMPARE(c.link(), client::Link::Live);
        // The agent goes on as usual (a heartbeat within its interval of the viewer running again).
        QTest::qWait(100);
        agent.heartbeat();
        QVERIFY(pumpUntil(c, { &agent }, [&] { return probe.recorder().lastSequence() == agent.sequence(); }));
        QCOMPARE(probe.silences, 0);
        QCOMPARE(c.link(), client::Link::Live);
        // Real silence is still silence, measured from the last message.
        const auto quietFrom = std::chrono::steady_clock::now();
        QVERIFY(pumpUntil(c, { &agent }, [&] { return probe.silences == 1; }));
        QVERIFY(std::chrono::steady_clock::now() - quietFrom >= options.silenceLimit - 50ms);
        QCOMPARE(c.link(), client::Link::Silent);
        QCOMPARE(describe(probe.recorder().snapshot()), agent.describe());
    }

    // Broken frames: one clear line each, naming the endpoint and the reason; a state reply the client cannot read
    // stops it (an incompatible job), a bad event batch of any kind costs only that frame.
    void badFrames_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<bool>("fatal");
        QTest::addColumn<QString>("where"); // appended to the endpoint
        QTest::addColumn<QString>("reason");
        QTest::newRow("batch of protocol version 2")
            << QStringLiteral("version") << false << QString()
            << QStringLiteral("protocol version 2 is newer than 1");
        QTest::newRow("batch with a wrong magic")
            << QStringLiteral("magic") << false << QString()
            << QStringLiteral("not a memscope event batch: magic 0xabababab");
        QTest::newRow("state of protocol version 2") << QStringLiteral("state") << true << QStringLiteral("-state")
                                                     << QStringLiteral("protocol version 2 is newer than 1");
        QTest::newRow("truncated batch, three times")
            << QStringLiteral("truncated") << false << QString() << QStringLiteral("(skipped)");
        QTest::newRow("garbage stack definition")
            << QStringLiteral("stack") << false << QString() << QStringLiteral("(skipped)");
        // (Not one byte: not a topic of this protocol, so not a newer agent's either.)
        QTest::newRow("unknown topic") << QStringLiteral("topic") << false << QString()
                                       << QStringLiteral("unexpected message on topic 'EX' (skipped)");
    }
    void badFrames()
    {
        QFETCH(QString, kind);
        QFETCH(bool, fatal);
        QFETCH(QString, where);
        QFETCH(QString, reason);
        QTemporaryDir dir;
        FakeAgent agent(ipcEndpoint(dir, "bad"), 100);
        setUp(agent);
        Probe probe;
        client::AgentClient c(fastOptions(agent.endpoint()), probe);
        if (kind == QLatin1String("state")) {
            agent.setStateVersion(2);
            QVERIFY(c.start());
        } else {
            QVERIFY(join(c, probe, agent));
            EventRecord e {};
            e.sequence = agent.sequence() + 1;
            e.type = uint8_t(EventType::Heartbeat);
            std::vector<uint8_t> frame = encodeBatch(std::vector { e });
            std::string_view topic = EventsTopic;
            if (kind == QLatin1String("version"))
                frame[4] = 2; // BatchHeader.version
            else if (kind == QLatin1String("magic"))
                std::memset(frame.data(), 0xab, frame.size());
            else if (kind == QLatin1String("truncated"))
                frame.resize(frame.size() - 10);
            else if (kind == QLatin1String("stack"))
                topic = StacksTopic, frame.assign(30, 0x11);
            else if (kind == QLatin1String("topic"))
                topic = "EX";
            for (int i = 0; i < 3; ++i)
                agent.sendRaw(topic, frame);
        }
        QVERIFY(pumpUntil(c, { &agent }, [&] { return !probe.errors.empty(); }));
        pumpUntil(c, { &agent }, [] { return false; }, 200ms); // the other two frames, if not yet
        QCOMPARE(probe.errors.size(), size_t(1));
        const client::ClientError& e = probe.errors.front();
        QCOMPARE(e.fatal, fatal);
        QCOMPARE(c.failed(), fatal);
        const QString message = QString::fromStdString(e.message);
        QVERIFY2(message.startsWith(QString::fromStdString(agent.endpoint()) + where + QLatin1String(": ")),
                 qPrintable(message));
        QVERIFY2(message.contains(reason), qPrintable(message));
        QVERIFY2(!message.contains(u'\n'), qPrintable(message));
        QCOMPARE(message.endsWith(QLatin1String("(skipped)")), !fatal);
        if (!fatal) { // the recording goes on
            agent.heartbeat();
            QVERIFY(pumpUntil(c, { &agent }, [&] { return probe.recorder().lastSequence() == agent.sequence(); }));
        }
    }

    // The endpoints wire::endpointProblem refuses, the agent refuses too (tst_publisher): the client fails at once
    // with that reason and opens no socket.
    void refusedEndpoints_data()
    {
        QTest::addColumn<QString>("endpoint");
        QTest::newRow("inproc") << QStringLiteral("inproc://memscope");
        QTest::newRow("abstract ipc") << QStringLiteral("ipc://@memscope");
        QTest::newRow("tcp without port") << QStringLiteral("tcp://127.0.0.1");
        QTest::newRow("another transport") << QStringLiteral("udp://127.0.0.1:5555");
    }
    void refusedEndpoints()
    {
        QFETCH(QString, endpoint);
        Probe probe;
        client::AgentClient c(fastOptions(endpoint.toStdString()), probe);
        QVERIFY(!c.start());
        QVERIFY(c.failed());
        QCOMPARE(probe.errors.size(), size_t(1));
        QCOMPARE(probe.errors.front().kind, client::ErrorKind::BadEndpoint);
        QCOMPARE(probe.errors.front().message,
                 endpoint.toStdString() + ": " + wire::endpointProblem(endpoint.toStdString()));
    }

    // A hostile "agent" at the endpoint (a raw socket in a child process, speaking just enough ZMTP 3.0, ZeroMQ RFC
    // 23) greets the viewer's SUB, then announces a 2 GiB command and streams zeros after it: the viewer closes the
    // connection at the frame's header (ZMQ_MAXMSGSIZE, sized from the protocol's largest frame), so the peer can
    // write only what the socket buffers take, and the viewer's memory stays flat.
    void hugeFrameFromThePeerIsCut()
    {
        QTemporaryDir dir;
        const std::string endpoint = ipcEndpoint(dir, "hostile");
        const std::string path = endpoint.substr(6);
        const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un addr {};
        addr.sun_family = AF_UNIX;
        QVERIFY(path.size() < sizeof addr.sun_path);
        std::memcpy(addr.sun_path, path.c_str(), path.size());
        QCOMPARE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
        QCOMPARE(::listen(listener, 4), 0);
        int fds[2];
        QCOMPARE(::pipe(fds), 0);
        const pid_t child = fork();
        QVERIFY(child >= 0);
        if (child == 0) {
            ::close(fds[0]);
            uint64_t written = 0;
            const int fd = ::accept(listener, nullptr, nullptr);
            uint8_t greeting[64] = {};
            greeting[0] = 0xff;
            greeting[9] = 0x7f;
            greeting[10] = 3; // version 3.0
            std::memcpy(greeting + 12, "NULL", 4);
            greeting[32] = 1; // as-server
            uint8_t header[9] = { 0x06 }; // LONG | COMMAND, then the size, big-endian
            const uint64_t size = uint64_t(1) << 31;
            for (int i = 0; i < 8; ++i)
                header[1 + i] = uint8_t(size >> (56 - 8 * i));
            if (fd >= 0 && ::send(fd, greeting, sizeof greeting, MSG_NOSIGNAL) == ssize_t(sizeof greeting)
                && ::send(fd, header, sizeof header, MSG_NOSIGNAL) == ssize_t(sizeof header)) {
                const std::vector<char> chunk(size_t(1) << 20, 0);
                while (written < (uint64_t(512) << 20)) {
                    const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
                    if (n <= 0)
                        break;
                    written += uint64_t(n);
                }
            }
            (void)!::write(fds[1], &written, sizeof written);
            _exit(0);
        }
        ::close(fds[1]);
        ::close(listener);
        const long before = peakResidentKiB();
        Probe probe;
        client::ClientOptions o = fastOptions(endpoint);
        o.answerTimeout = 500ms;
        client::AgentClient c(o, probe);
        QVERIFY(c.start());
        uint64_t written = 0;
        std::thread reader([&] { (void)!::read(fds[0], &written, sizeof written); });
        pumpUntil(c, {}, [&] { return waitpid(child, nullptr, WNOHANG) == child; });
        reader.join();
        ::close(fds[0]);
        const long peak = peakResidentKiB();
        qInfo("a 2 GiB frame announced to the viewer's SUB: the peer wrote %llu KiB of it before being cut; the "
              "viewer's peak grew %ld KiB",
              static_cast<unsigned long long>(written >> 10), peak - before);
        QVERIFY2(written < (uint64_t(64) << 20), qPrintable(QString::number(written)));
        QVERIFY(!c.hasState());
    }

    void nobodyAnswers()
    {
        QTemporaryDir dir;
        Probe probe;
        client::ClientOptions o = fastOptions(ipcEndpoint(dir, "nobody"));
        o.answerTimeout = 300ms;
        client::AgentClient c(o, probe);
        QVERIFY(c.start());
        QVERIFY(pumpUntil(c, {}, [&] { return !probe.errors.empty(); }));
        QCOMPARE(probe.errors.front().kind, client::ErrorKind::NoAnswer);
        QCOMPARE(QString::fromStdString(probe.errors.front().message),
                 QString::fromStdString(o.endpoint + ": no memscope agent answered (is the job running?)"));
    }

    // CURVE: the agent is a CURVE server whose ZAP handler admits listed client keys.
    void curve_data()
    {
        QTest::addColumn<QString>("setup");
        QTest::addColumn<bool>("joins");
        QTest::addColumn<QString>("message"); // a part of the one error line
        QTest::newRow("authorised key") << QStringLiteral("ok") << true << QString();
        QTest::newRow("wrong server key") << QStringLiteral("wrong-server") << false
                                          << QStringLiteral("no memscope agent answered");
        QTest::newRow("client key not authorised")
            << QStringLiteral("unauthorised") << false << QStringLiteral("refused our CURVE key (status 400)");
        QTest::newRow("group-readable secret key")
            << QStringLiteral("readable") << false
            << QStringLiteral("client.key: the secret key file is readable by group or others (mode 0640)");
        QTest::newRow("no key in the file")
            << QStringLiteral("empty") << false << QStringLiteral("client.key: no key in the file");
        QTest::newRow("only one of the two files")
            << QStringLiteral("half") << false << QStringLiteral("CURVE needs both");
        QTest::newRow("no keys, the agent uses CURVE")
            << QStringLiteral("no-keys") << false
            << QStringLiteral(": the agent uses CURVE and we do not: give its public key and our secret key");
        QTest::newRow("keys, the agent does not use CURVE")
            << QStringLiteral("plain-agent") << false << QStringLiteral(": we use CURVE and the agent does not");
    }
    void curve()
    {
        QFETCH(QString, setup);
        QFETCH(bool, joins);
        QFETCH(QString, message);
        if (!client::curveAvailable())
            QSKIP("libzmq without CURVE");
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        const client::KeyPair server = client::generateKeyPair(), other = client::generateKeyPair(),
                              me = client::generateKeyPair();
        QVERIFY(server.ok() && me.ok());
        QCOMPARE(client::writeKeyPair(folder + "/server", server, false), std::string());
        QCOMPARE(client::writeKeyPair(folder + "/other", other, false), std::string());
        QCOMPARE(client::writeKeyPair(folder + "/client", me, false), std::string());
        CurveServer curve { server.secretKey, { me.publicKey } };
        if (setup == QLatin1String("unauthorised"))
            curve.clients = { other.publicKey };
        const std::string secretFile = folder + "/client.key";
        if (setup == QLatin1String("readable"))
            QCOMPARE(::chmod(secretFile.c_str(), 0640), 0);
        if (setup == QLatin1String("empty")) {
            QFile f(QString::fromStdString(secretFile));
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            f.write("# nothing but a comment\n\n");
        }

        FakeAgent agent(ipcEndpoint(dir, "secure"), 100, setup == QLatin1String("plain-agent") ? nullptr : &curve);
        setUp(agent);
        Probe probe;
        client::ClientOptions o = fastOptions(agent.endpoint());
        o.answerTimeout = 5000ms; // a refusal comes at once; only a missed one waits this long (ASan, a loaded machine)
        o.curveServerKeyFile = folder + (setup == QLatin1String("wrong-server") ? "/other.pub" : "/server.pub");
        o.curveSecretKeyFile = setup == QLatin1String("half") ? std::string() : secretFile;
        if (setup == QLatin1String("no-keys"))
            o.curveServerKeyFile = o.curveSecretKeyFile = std::string();
        client::AgentClient c(o, probe);
        const bool started = c.start();
        if (joins) {
            QVERIFY(started);
            QVERIFY(c.curve());
            QVERIFY(pumpUntil(c, { &agent }, [&] { return c.hasState(); }));
            QVERIFY(join(c, probe, agent));
            QCOMPARE(describe(probe.recorder().snapshot()), agent.describe());
            QVERIFY(probe.errors.empty());
            return;
        }
        if (started)
            QVERIFY(pumpUntil(c, { &agent }, [&] { return !probe.errors.empty(); }));
        QCOMPARE(probe.errors.size(), size_t(1));
        const QString text = QString::fromStdString(probe.errors.front().message);
        QVERIFY2(text.contains(message), qPrintable(text));
        QVERIFY(!c.hasState());
        QCOMPARE(agent.requests(), 0); // nothing got through to the agent
    }

    // The key-file reader's Z85 check (wire/keyfile.h, no ZeroMQ) says yes exactly where libzmq's decoder does:
    // every character of the ASCII range in every position, and random keys over a wider alphabet.
    void z85AgreesWithLibzmq()
    {
        auto libzmqAccepts = [](const std::string& key) {
            uint8_t bytes[32];
            return zmq_z85_decode(bytes, key.c_str()) != nullptr;
        };
        const client::KeyPair keys = client::generateKeyPair();
        QVERIFY(keys.ok());
        std::vector<std::string> cases { keys.publicKey,
                                         keys.secretKey,
                                         std::string(40, '0'),
                                         std::string(35, '0') + "%nSc0",
                                         std::string(35, '0') + "%nSc1",
                                         std::string(35, '0') + "%%%%%",
                                         std::string(40, '#') };
        for (size_t position = 0; position < 40; position += 7)
            for (int c = 1; c < 128; ++c) {
                std::string key = keys.publicKey;
                key[position] = char(c);
                cases.push_back(key);
            }
        std::mt19937 random(2026);
        std::uniform_int_distribution<int> character(33, 126);
        for (int i = 0; i < 2000; ++i) {
            std::string key(40, ' ');
            for (char& c : key)
                c = char(i % 2 ? character(random) : keys.publicKey[size_t(character(random)) % 40]);
            cases.push_back(key);
        }
        for (const std::string& key : cases)
            QVERIFY2(wire::isZ85Key(key) == libzmqAccepts(key), key.c_str());
    }

    void keyFiles()
    {
        QTemporaryDir dir;
        const std::string name = dir.path().toStdString() + "/k";
        const client::KeyPair keys = client::generateKeyPair();
        QVERIFY(keys.ok());
        QCOMPARE(client::publicKeyOf(keys.secretKey), keys.publicKey);
        QCOMPARE(client::writeKeyPair(name, keys, false), std::string());
        struct stat st {};
        QCOMPARE(::stat((name + ".key").c_str(), &st), 0);
        QCOMPARE(st.st_mode & 0777, 0600U);
        QCOMPARE(::stat((name + ".pub").c_str(), &st), 0);
        QCOMPARE(st.st_mode & 0777, 0644U);
        QCOMPARE(wire::readKeyFile(name + ".key", wire::KeyKind::Secret).key, keys.secretKey);
        QCOMPARE(wire::readKeyFile(name + ".pub", wire::KeyKind::Public).key, keys.publicKey);
        // Never over an existing pair without force; with it, both are replaced.
        const client::KeyPair again = client::generateKeyPair();
        QCOMPARE(client::writeKeyPair(name, again, false), name + ".key: exists already (use --force to replace it)");
        QCOMPARE(wire::readKeyFile(name + ".key", wire::KeyKind::Secret).key, keys.secretKey);
        QCOMPARE(client::writeKeyPair(name, again, true), std::string());
        QCOMPARE(wire::readKeyFile(name + ".pub", wire::KeyKind::Public).key, again.publicKey);
        QCOMPARE(::stat((name + ".key").c_str(), &st), 0);
        QCOMPARE(st.st_mode & 0777, 0600U);
        // A public key file may be read by anyone; the wrong length is named.
        QFile bad(QString::fromStdString(name + ".bad"));
        QVERIFY(bad.open(QIODevice::WriteOnly));
        bad.write("# comment\n\nshort\n");
        bad.close();
        const wire::KeyResult r = wire::readKeyFile(name + ".bad", wire::KeyKind::Public);
        QCOMPARE(r.error,
                 name + ".bad: not a CURVE key (expected 40 Z85 characters on the first line that is not empty or a "
                        "comment, got 5 characters)");
    }
};

QTEST_GUILESS_MAIN(TestClient)
#include "tst_client.moc"
