// Tests of `memscope-cli record` (tools/cli/recordcommand.cpp, library memscope-record) against a fake agent: a
// thread with a ZeroMQ PUB and ROUTER speaking protocol.h as the agent does (docs/protocol.md). Covers the
// late-join handshake, stopping at goodbye / event count / silence, the automatic resync after a gap, recording
// across a job restart (--follow), the errors for nobody answering, a refused CURVE key, a bad command line and an
// unwritable file; and `memscope-cli keygen`.
#include "client/agentclient.h"
#include "client/curvekeys.h"
#include "io/snapshotio.h"
#include "keygencommand.h"
#include "model/replay.h"
#include "recordcommand.h"
#include "viewer/decoder.h"
#include "wire/endpoint.h"
#include "wire/keyfile.h"
#include "wirerecords.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <thread>

#include <sys/stat.h>

using namespace memscope;
using namespace memscope::wire;
using namespace memscope::viewer;

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr uint64_t Base = 0x7f0000000000;

EventRecord makeEvent(uint64_t sequence, EventType type, uint64_t address, uint64_t size, uint64_t requested = 0)
{
    return test::eventRecord(sequence, type, address, size, requested, 0, 5'000'000'000);
}

enum class Ending { Goodbye, Endless, Silent };

// What a fake agent does besides its alloc/free pairs.
struct Script {
    Ending ending = Ending::Goodbye;
    int pairs = 0;
    uint32_t pid = 4242;
    uint64_t base = Base; // its one 20 MiB segment
    bool gap = false; // halfway, two allocations are never published (a sequence jump), then it waits for the resync
    bool keep = false; // after the pairs, one more allocation that stays
    uint64_t dropped = 0; // the records its goodbye says its ring dropped (none announced by a record)
};

// The agent's side: binds PUB at `endpoint` and ROUTER at its state endpoint, answers every State request with its
// current state (a 20 MiB segment and the blocks alive; lastSequence 100 at first), then publishes alloc/free
// pairs and ends as told.
class FakeAgent {
public:
    FakeAgent(std::string endpoint, Script script)
        : m_endpoint(std::move(endpoint))
        , m_script(script)
        , m_thread([this] { run(); })
    {
        while (!m_bound)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    FakeAgent(std::string endpoint, Ending ending, int pairs)
        : FakeAgent(std::move(endpoint), Script { ending, pairs })
    {
    }
    ~FakeAgent()
    {
        m_stop = true;
        m_thread.join();
    }
    bool finished() const { return m_finished; }
    // The final state, as lines (segments, then their blocks).
    QStringList describe() const
    {
        QStringList lines { QStringLiteral("segment %1 size %2").arg(m_script.base, 0, 16).arg(20 * MiB) };
        for (const auto& [address, b] : m_final)
            lines << QStringLiteral("  block %1 size %2").arg(address, 0, 16).arg(b.size);
        return lines;
    }

private:
    void run()
    {
        zmq::context_t context(1);
        zmq::socket_t pub(context, zmq::socket_type::pub);
        zmq::socket_t router(context, zmq::socket_type::router);
        pub.set(zmq::sockopt::linger, 0);
        router.set(zmq::sockopt::linger, 0);
        pub.bind(m_endpoint);
        router.bind(wire::stateEndpointFor(m_endpoint));
        m_bound = true;

        uint64_t sequence = 100;
        std::map<uint64_t, BlockRecord> blocks;
        int answered = 0;
        auto publish = [&](const EventRecord& e) {
            const std::vector<uint8_t> frame = encodeBatch(std::vector { e });
            pub.send(zmq::buffer(std::string_view(EventsTopic)), zmq::send_flags::sndmore);
            pub.send(zmq::buffer(frame));
        };
        auto answer = [&] {
            zmq::message_t identity, request;
            while (router.recv(identity, zmq::recv_flags::dontwait)) {
                while (identity.more() && router.recv(request, zmq::recv_flags::dontwait) && request.more()) { }
                const DecodedRequest decoded = decodeRequest({ request.data<uint8_t>(), request.size() });
                if (!decoded.ok() || decoded.request.type != uint16_t(RequestType::State))
                    continue; // Request{Stacks} and Request{Goodbye} have no reply
                SegmentRecord seg {};
                seg.address = m_script.base;
                seg.size = 20 * MiB;
                const std::vector segs { seg };
                std::vector<BlockRecord> live;
                for (const auto& [address, b] : blocks)
                    live.push_back(b);
                const std::vector<uint8_t> state
                    = encodeState(makeHello(m_script.pid, 1, "fakehost", "test"), sequence, segs, live);
                router.send(identity, zmq::send_flags::sndmore);
                router.send(zmq::buffer(state));
                ++answered;
            }
        };
        auto alloc = [&](uint64_t address, uint64_t size, bool send) {
            BlockRecord b {};
            b.address = address;
            b.size = size;
            b.requestedSize = size;
            b.state = 1;
            blocks[address] = b;
            const EventRecord e = makeEvent(++sequence, EventType::Alloc, address, size, size);
            if (send)
                publish(e);
        };
        // Until the first request: an event the state already contains, published again and again (a viewer that
        // reconnects must hear something to ask), and dropped as stale by the viewer.
        while (!m_stop && answered == 0) {
            publish(makeEvent(sequence, EventType::Heartbeat, 0, 0));
            for (int i = 0; i < 10 && answered == 0; ++i) {
                answer();
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const uint64_t at = m_script.base + MiB;
        for (int i = 0; !m_stop && (i < m_script.pairs || m_script.ending == Ending::Endless); ++i) {
            answer();
            publish(makeEvent(++sequence, EventType::Alloc, at, 512, 300));
            publish(makeEvent(++sequence, EventType::FreeRequested, at, 512));
            publish(makeEvent(++sequence, EventType::FreeCompleted, at, 512));
            if (m_script.gap && i == m_script.pairs / 2) {
                alloc(m_script.base + 4 * MiB, 2 * MiB, false);
                alloc(m_script.base + 8 * MiB, MiB, false);
                alloc(m_script.base + 12 * MiB, MiB, true); // the viewer sees the jump here
                const int before = answered;
                for (int wait = 0; !m_stop && answered == before && wait < 1000; ++wait) {
                    answer();
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        if (m_script.keep)
            alloc(m_script.base + 2 * MiB, MiB, true);
        m_final = blocks;
        if (m_script.ending == Ending::Goodbye) {
            pub.send(zmq::buffer(std::string_view(GoodbyeTopic)), zmq::send_flags::sndmore);
            pub.send(zmq::buffer(encodeGoodbye(sequence, m_script.dropped)));
        }
        m_finished = true;
        while (!m_stop) {
            answer();
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }

    std::string m_endpoint;
    Script m_script;
    std::map<uint64_t, BlockRecord> m_final;
    std::atomic<bool> m_bound { false };
    std::atomic<bool> m_finished { false };
    std::atomic<bool> m_stop { false };
    std::thread m_thread;
};

// A recording's final state in FakeAgent::describe()'s form (active blocks only).
QStringList describe(const model::Snapshot& s)
{
    QStringList lines;
    for (const model::Segment& seg : s.segments) {
        lines << QStringLiteral("segment %1 size %2").arg(uint64_t(seg.address), 0, 16).arg(seg.totalSize);
        const model::Block* blocks = s.segmentBlocks(seg);
        for (uint32_t i = 0; i < seg.blockCount; ++i)
            if (blocks[i].state != model::BlockState::Inactive)
                lines
                    << QStringLiteral("  block %1 size %2").arg(uint64_t(blocks[i].address), 0, 16).arg(blocks[i].size);
    }
    return lines;
}

QStringList annotations(const model::Snapshot& s)
{
    QStringList names;
    for (const model::Annotation& a : s.annotations)
        names << QString::fromUtf8(s.str(a.name).data(), qsizetype(s.str(a.name).size()));
    return names;
}

// runRecord with its stdout and stderr captured.
struct Run {
    int status = -1;
    QString out, err;
};
// `command(out, err)` with its stdout and stderr captured.
Run capture(const std::function<int(std::FILE*, std::FILE*)>& command)
{
    char *outText = nullptr, *errText = nullptr;
    size_t outSize = 0, errSize = 0;
    std::FILE* out = open_memstream(&outText, &outSize);
    std::FILE* err = open_memstream(&errText, &errSize);
    Run r;
    r.status = command(out, err);
    std::fclose(out);
    std::fclose(err);
    r.out = QString::fromUtf8(outText, qsizetype(outSize));
    r.err = QString::fromUtf8(errText, qsizetype(errSize));
    std::free(outText);
    std::free(errText);
    return r;
}
Run runCaptured(const std::vector<std::string>& args)
{
    return capture([&](std::FILE* out, std::FILE* err) { return runRecord(args, out, err); });
}

} // namespace

Q_DECLARE_METATYPE(Ending)

class TestRecordCommand : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void record_data()
    {
        QTest::addColumn<Ending>("ending");
        QTest::addColumn<int>("pairs");
        QTest::addColumn<QStringList>("options");
        QTest::addColumn<QString>("reason");
        QTest::addColumn<QString>("warning");
        QTest::addColumn<int>("entries"); // -1: at least one
        QTest::newRow("until goodbye") << Ending::Goodbye << 20 << QStringList() << QStringLiteral("goodbye")
                                       << QString() << 60;
        QTest::newRow("event limit") << Ending::Endless << 0
                                     << QStringList { QStringLiteral("--events"), QStringLiteral("7") }
                                     << QStringLiteral("event limit reached") << QString() << 7;
        QTest::newRow("duration limit") << Ending::Endless << 0
                                        << QStringList { QStringLiteral("--duration"), QStringLiteral("0.5") }
                                        << QStringLiteral("duration reached") << QString() << -1;
        QTest::newRow("agent goes silent") << Ending::Silent << 5 << QStringList() << QStringLiteral("went silent")
                                           << QStringLiteral("the agent went silent (no goodbye") << 15;
    }
    void record()
    {
        QFETCH(Ending, ending);
        QFETCH(int, pairs);
        QFETCH(QStringList, options);
        QFETCH(QString, reason);
        QFETCH(QString, warning);
        QFETCH(int, entries);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string endpoint = "ipc://" + dir.path().toStdString() + "/agent";
        const std::string file = dir.path().toStdString() + "/recorded.pickle";
        FakeAgent agent(endpoint, ending, pairs);
        std::vector<std::string> args { endpoint, "-o", file };
        for (const QString& o : options)
            args.push_back(o.toStdString());
        const Run r = runCaptured(args);
        QVERIFY2(r.status == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains(reason), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("from pid 4242 on fakehost")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("lost 0, gaps 0")), qPrintable(r.out));
        if (warning.isEmpty())
            QVERIFY2(r.err.isEmpty(), qPrintable(r.err));
        else
            QVERIFY2(r.err.contains(warning), qPrintable(r.err));

        const io::LoadResult loaded = io::loadSnapshot(file);
        QVERIFY2(loaded.ok(), loaded.error.toString().c_str());
        const model::Snapshot& s = *loaded.snapshot;
        QCOMPARE(s.segments.size(), size_t(1));
        QCOMPARE(s.deviceTraces.size(), size_t(1));
        if (entries >= 0)
            QCOMPARE(int(s.deviceTraces[0].size()), entries);
        else
            QVERIFY(!s.deviceTraces[0].empty());
        const model::Replay replay = model::Replay::build(s, 0);
        QCOMPARE(replay.warnings(), 0ULL);
    }

    // A gap in the middle: record asks for a fresh state by itself, the file's final state is the agent's exactly,
    // its trace replays without a warning and carries the resync as an annotation pair.
    void resyncAfterGap()
    {
        QTemporaryDir dir;
        const std::string endpoint = "ipc://" + dir.path().toStdString() + "/agent";
        const std::string file = dir.path().toStdString() + "/recorded.pickle";
        Script script;
        script.pairs = 10;
        script.gap = true;
        script.keep = true;
        FakeAgent agent(endpoint, script);
        const Run r = runCaptured({ endpoint, "-o", file });
        QVERIFY2(r.status == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains(QStringLiteral("(the job said goodbye)")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("gaps 1 (2 missing), inconsistent 0, resyncs 1 (0 restarts);")),
                 qPrintable(r.out));
        QVERIFY2(!r.out.contains(QStringLiteral("resync needed")), qPrintable(r.out));
        QVERIFY2(r.err.contains(QStringLiteral("resynchronised 1 times")), qPrintable(r.err));
        const io::LoadResult loaded = io::loadSnapshot(file);
        QVERIFY2(loaded.ok(), loaded.error.toString().c_str());
        const model::Snapshot& s = *loaded.snapshot;
        QCOMPARE(describe(s), agent.describe());
        QCOMPARE(annotations(s),
                 (QStringList { QStringLiteral("memscope: resync after 2 missing records"),
                                QStringLiteral("memscope: resync after 2 missing records") }));
        const model::Replay replay = model::Replay::build(s, 0);
        QCOMPARE(replay.warnings(), 0ULL);
    }

    // The agent's goodbye counts records its ring dropped that no record announced (drops after its last record):
    // the summary, a warning and the file's "memscope_recording" say them (at 2 M events/s a job's ring dropped
    // 153,515 records and the recording said "lost 0").
    void agentDropsAreSaid()
    {
        QTemporaryDir dir;
        const std::string endpoint = "ipc://" + dir.path().toStdString() + "/agent";
        const std::string file = dir.path().toStdString() + "/recorded.pickle";
        Script script;
        script.pairs = 5;
        script.dropped = 153'515;
        FakeAgent agent(endpoint, script);
        const Run r = runCaptured({ endpoint, "-o", file });
        QVERIFY2(r.status == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains(QStringLiteral("(the job said goodbye)")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("; lost 153515, gaps 0 (0 missing), inconsistent 0")),
                 qPrintable(r.out));
        QVERIFY2(
            r.err.contains(QStringLiteral("the agent dropped 153515 records, its ring full (its goodbye's count; 0 "
                                          "of them announced before); the recording's trace is incomplete")),
            qPrintable(r.err));
        const io::LoadResult loaded = io::loadSnapshot(file);
        QVERIFY2(loaded.ok(), loaded.error.toString().c_str());
        const std::optional<RecordingInfo> info = recordingInfoOf(*loaded.snapshot);
        QVERIFY(info);
        QCOMPARE(info->lost, 153'515ULL);
        QVERIFY(!info->complete());
    }

    // --follow: the job says goodbye, another run binds the same endpoint; the recording goes on from its state.
    void followsRestart()
    {
        QTemporaryDir dir;
        const std::string endpoint = "ipc://" + dir.path().toStdString() + "/agent";
        const std::string file = dir.path().toStdString() + "/recorded.pickle";
        auto first = std::make_unique<FakeAgent>(endpoint, Script { Ending::Goodbye, 5, 4242, Base, false, true });
        Run r;
        std::thread recording([&] { r = runCaptured({ endpoint, "-o", file, "--follow", "--duration", "3" }); });
        for (int i = 0; i < 500 && !first->finished(); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        first.reset(); // the job exits
        const uint64_t second = Base + 64 * MiB;
        FakeAgent next(endpoint, Script { Ending::Silent, 5, 4343, second, false, true });
        recording.join();
        QVERIFY2(r.status == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains(QStringLiteral("(duration reached)")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("from pid 4343")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("inconsistent 0, resyncs 1 (1 restarts);")), qPrintable(r.out));
        QVERIFY2(r.err.contains(QString::fromStdString(endpoint + ": the job restarted (pid 4343, was 4242)")),
                 qPrintable(r.err));
        const io::LoadResult loaded = io::loadSnapshot(file);
        QVERIFY2(loaded.ok(), loaded.error.toString().c_str());
        const model::Snapshot& s = *loaded.snapshot;
        QCOMPARE(describe(s), next.describe());
        QVERIFY(annotations(s).contains(QStringLiteral("memscope: job restarted (pid 4343, was 4242)")));
        const model::Replay replay = model::Replay::build(s, 0);
        QCOMPARE(replay.warnings(), 0ULL);
        // Both runs' events are in the trace: 5 pairs and the kept block each, plus the switch between them.
        QVERIFY(s.deviceTraces[0].size() > 2 * (5 * 3 + 1));
    }

    void refusedSecretKey()
    {
        if (!client::curveAvailable())
            QSKIP("libzmq without CURVE");
        QTemporaryDir dir;
        const std::string name = dir.path().toStdString() + "/viewer";
        QCOMPARE(client::writeKeyPair(name, client::generateKeyPair(), false), std::string());
        QCOMPARE(::chmod((name + ".key").c_str(), 0644), 0);
        const Run r = runCaptured({ "ipc://" + dir.path().toStdString() + "/agent", "-o",
                                    dir.path().toStdString() + "/x.pickle", "--curve-server-key", name + ".pub",
                                    "--curve-key", name + ".key" });
        QCOMPARE(r.status, 1);
        QVERIFY2(r.err.contains(QString::fromStdString(name
                                                       + ".key: the secret key file is readable by group or "
                                                         "others (mode 0644); refusing it")),
                 qPrintable(r.err));
    }

    void keygen()
    {
        if (!client::curveAvailable())
            QSKIP("libzmq without CURVE");
        QTemporaryDir dir;
        const std::string name = dir.path().toStdString() + "/job";
        auto run = [](const std::vector<std::string>& args) {
            return capture([&](std::FILE* out, std::FILE* err) { return runKeygen(args, out, err); });
        };
        const Run made = run({ name });
        QCOMPARE(made.status, 0);
        const wire::KeyResult secret = wire::readKeyFile(name + ".key", wire::KeyKind::Secret);
        const wire::KeyResult pub = wire::readKeyFile(name + ".pub", wire::KeyKind::Public);
        QVERIFY2(secret.ok() && pub.ok(), (secret.error + pub.error).c_str());
        QCOMPARE(made.out, QString::fromStdString(pub.key) + u'\n'); // prints the public key
        QCOMPARE(client::publicKeyOf(secret.key), pub.key);
        struct stat st { };
        QCOMPARE(::stat((name + ".key").c_str(), &st), 0);
        QCOMPARE(st.st_mode & 0777, 0600U);
        // Never over an existing key without --force.
        const Run again = run({ name });
        QCOMPARE(again.status, 1);
        QVERIFY2(again.err.contains(QString::fromStdString(name + ".key: exists already (use --force to replace it)")),
                 qPrintable(again.err));
        QCOMPARE(wire::readKeyFile(name + ".key", wire::KeyKind::Secret).key, secret.key);
        const Run forced = run({ name, "--force" });
        QCOMPARE(forced.status, 0);
        QVERIFY(wire::readKeyFile(name + ".key", wire::KeyKind::Secret).key != secret.key);
        QCOMPARE(run({}).status, 2);
        QCOMPARE(run({ name, "--what" }).status, 2);
        // No stray temporary files beside the keys.
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), 2);
    }

    void nobodyAnswers()
    {
        QTemporaryDir dir;
        const std::string endpoint = "ipc://" + dir.path().toStdString() + "/nobody";
        const Run r = runCaptured({ endpoint, "-o", dir.path().toStdString() + "/x.pickle", "--timeout", "0.3" });
        QCOMPARE(r.status, 1);
        QVERIFY2(
            r.err.contains(QString::fromStdString(endpoint + ": no memscope agent answered (is the job running?)")),
            qPrintable(r.err));
        QVERIFY(!QFile::exists(dir.path() + QStringLiteral("/x.pickle")));
    }

    void unwritableFile()
    {
        QTemporaryDir dir;
        const std::string endpoint = "ipc://" + dir.path().toStdString() + "/agent";
        FakeAgent agent(endpoint, Ending::Goodbye, 1);
        const std::string file = dir.path().toStdString() + "/no/such/folder/out.pickle";
        const Run r = runCaptured({ endpoint, "-o", file });
        QCOMPARE(r.status, 1);
        QVERIFY2(r.err.contains(QString::fromStdString(file)), qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("No such file or directory")), qPrintable(r.err));
    }

    void badCommandLine_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("reason");
        QTest::newRow("nothing") << QStringList() << QStringLiteral("needs an ENDPOINT");
        QTest::newRow("no output file") << QStringList { QStringLiteral("ipc:///tmp/x") }
                                        << QStringLiteral("needs -o FILE");
        QTest::newRow("-o without a file") << QStringList { QStringLiteral("ipc:///tmp/x"), QStringLiteral("-o") }
                                           << QStringLiteral("-o needs a FILE");
        QTest::newRow("negative duration")
            << QStringList { QStringLiteral("ipc:///tmp/x"), QStringLiteral("-o"), QStringLiteral("f"),
                             QStringLiteral("--duration"), QStringLiteral("-1") }
            << QStringLiteral("--duration needs a positive number");
        QTest::newRow("fractional event count")
            << QStringList { QStringLiteral("ipc:///tmp/x"), QStringLiteral("-o"), QStringLiteral("f"),
                             QStringLiteral("--events"), QStringLiteral("1.5") }
            << QStringLiteral("--events needs a positive whole number");
        QTest::newRow("unknown option") << QStringList { QStringLiteral("ipc:///tmp/x"), QStringLiteral("--fast") }
                                        << QStringLiteral("unknown option '--fast'");
        QTest::newRow("two endpoints") << QStringList { QStringLiteral("ipc:///a"), QStringLiteral("ipc:///b") }
                                       << QStringLiteral("takes one ENDPOINT");
        QTest::newRow("one CURVE key file of two")
            << QStringList { QStringLiteral("ipc:///tmp/x"), QStringLiteral("-o"), QStringLiteral("f"),
                             QStringLiteral("--curve-key"), QStringLiteral("k.key") }
            << QStringLiteral("--curve-server-key and --curve-key go together");
        QTest::newRow("unsupported transport")
            << QStringList { QStringLiteral("inproc://x"), QStringLiteral("-o"), QStringLiteral("f") }
            << QStringLiteral("inproc://x: not an ipc:// or tcp://HOST:PORT endpoint (inproc://");
    }
    void badCommandLine()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, reason);
        std::vector<std::string> a;
        for (const QString& s : args)
            a.push_back(s.toStdString());
        const Run r = runCaptured(a);
        QCOMPARE(r.status, 2);
        QVERIFY2(r.err.contains(reason), qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("usage: memscope-cli record")), qPrintable(r.err));
    }
};

QTEST_GUILESS_MAIN(TestRecordCommand)
#include "tst_recordcommand.moc"
