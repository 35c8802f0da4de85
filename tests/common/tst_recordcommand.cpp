// Tests of `memscope-cli record` (tools/cli/recordcommand.cpp, library memscope-record) against a fake agent: a
// thread with a ZeroMQ PUB and ROUTER speaking protocol.h as the agent does (docs/protocol.md). Covers the
// late-join handshake, stopping at goodbye / event count / silence, and the errors for nobody answering, a bad
// command line and an unwritable file.
#include "io/snapshotio.h"
#include "model/replay.h"
#include "client/agentclient.h"
#include "recordcommand.h"
#include "wire/decoder.h"

#include <QTemporaryDir>
#include <QTest>

#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

using namespace memscope;
using namespace memscope::wire;

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr uint64_t Base = 0x7f0000000000;

EventRecord makeEvent(uint64_t sequence, EventType type, uint64_t address, uint64_t size, uint64_t requested = 0)
{
    EventRecord e {};
    e.sequence = sequence;
    e.timeNs = 5'000'000'000 + sequence * 1000;
    e.address = address;
    e.size = size;
    e.requestedSize = requested;
    e.type = uint8_t(type);
    return e;
}

enum class Ending { Goodbye, Endless, Silent };

// The agent's side: binds PUB at `endpoint` and ROUTER at its state endpoint, answers one State request with a
// 20 MiB segment (lastSequence 100), then publishes alloc/free pairs and ends as told.
class FakeAgent {
public:
    FakeAgent(std::string endpoint, Ending ending, int pairs)
        : m_endpoint(std::move(endpoint))
        , m_ending(ending)
        , m_pairs(pairs)
        , m_thread([this] { run(); })
    {
        while (!m_bound)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ~FakeAgent()
    {
        m_stop = true;
        m_thread.join();
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
        router.bind(client::stateEndpointFor(m_endpoint));
        m_bound = true;

        uint64_t sequence = 100;
        auto publish = [&](const EventRecord& e) {
            const std::vector<uint8_t> frame = encodeBatch(std::vector { e });
            pub.send(zmq::buffer(std::string_view(EventsTopic)), zmq::send_flags::sndmore);
            pub.send(zmq::buffer(frame));
        };
        // An event the state already contains, published before the request: must be dropped as stale.
        publish(makeEvent(sequence, EventType::Heartbeat, 0, 0));
        bool answered = false;
        while (!m_stop && !answered) {
            zmq::message_t identity, request;
            if (!router.recv(identity, zmq::recv_flags::dontwait)) {
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
                continue;
            }
            while (identity.more() && router.recv(request, zmq::recv_flags::dontwait) && request.more()) { }
            if (!decodeRequest({ request.data<uint8_t>(), request.size() }).ok())
                continue;
            SegmentRecord seg {};
            seg.address = Base;
            seg.size = 20 * MiB;
            const std::vector segs { seg };
            const std::vector<BlockRecord> blocks;
            const std::vector<uint8_t> state = encodeState(makeHello(4242, 1, "fakehost", "test"), sequence, segs, blocks);
            router.send(identity, zmq::send_flags::sndmore);
            router.send(zmq::buffer(state));
            answered = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        for (int i = 0; !m_stop && (i < m_pairs || m_ending == Ending::Endless); ++i) {
            publish(makeEvent(++sequence, EventType::Alloc, Base + MiB, 512, 300));
            publish(makeEvent(++sequence, EventType::FreeRequested, Base + MiB, 512));
            publish(makeEvent(++sequence, EventType::FreeCompleted, Base + MiB, 512));
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        if (m_ending == Ending::Goodbye) {
            pub.send(zmq::buffer(std::string_view(GoodbyeTopic)), zmq::send_flags::sndmore);
            pub.send(zmq::buffer(encodeGoodbye(sequence, 0)));
        }
        while (!m_stop)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }

    std::string m_endpoint;
    Ending m_ending;
    int m_pairs;
    std::atomic<bool> m_bound { false };
    std::atomic<bool> m_stop { false };
    std::thread m_thread;
};

// runRecord with its stdout and stderr captured.
struct Run {
    int status = -1;
    QString out, err;
};
Run runCaptured(const std::vector<std::string>& args)
{
    char *outText = nullptr, *errText = nullptr;
    size_t outSize = 0, errSize = 0;
    std::FILE* out = open_memstream(&outText, &outSize);
    std::FILE* err = open_memstream(&errText, &errSize);
    Run r;
    r.status = runRecord(args, out, err);
    std::fclose(out);
    std::fclose(err);
    r.out = QString::fromUtf8(outText, qsizetype(outSize));
    r.err = QString::fromUtf8(errText, qsizetype(errSize));
    std::free(outText);
    std::free(errText);
    return r;
}

} // namespace

Q_DECLARE_METATYPE(Ending)

class TestRecordCommand : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void stateEndpoint_data()
    {
        QTest::addColumn<QString>("endpoint");
        QTest::addColumn<QString>("state");
        QTest::newRow("ipc path") << QStringLiteral("ipc:///tmp/x") << QStringLiteral("ipc:///tmp/x-state");
        QTest::newRow("tcp port") << QStringLiteral("tcp://127.0.0.1:5555") << QStringLiteral("tcp://127.0.0.1:5556");
        QTest::newRow("tcp without port") << QStringLiteral("tcp://127.0.0.1") << QString();
        QTest::newRow("tcp bad port") << QStringLiteral("tcp://host:http") << QString();
        QTest::newRow("other transport") << QStringLiteral("inproc://x") << QString();
    }
    void stateEndpoint()
    {
        QFETCH(QString, endpoint);
        QFETCH(QString, state);
        QCOMPARE(QString::fromStdString(client::stateEndpointFor(endpoint.toStdString())), state);
    }

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
        QTest::newRow("event limit") << Ending::Endless << 0 << QStringList { QStringLiteral("--events"), QStringLiteral("7") }
                                     << QStringLiteral("event limit reached") << QString() << 7;
        QTest::newRow("duration limit") << Ending::Endless << 0 << QStringList { QStringLiteral("--duration"), QStringLiteral("0.5") }
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

    void nobodyAnswers()
    {
        QTemporaryDir dir;
        const std::string endpoint = "ipc://" + dir.path().toStdString() + "/nobody";
        const Run r = runCaptured({ endpoint, "-o", dir.path().toStdString() + "/x.pickle", "--timeout", "0.3" });
        QCOMPARE(r.status, 1);
        QVERIFY2(r.err.contains(QString::fromStdString(endpoint + ": no memscope agent answered (is the job running?)")),
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
        QTest::newRow("no output file") << QStringList { QStringLiteral("ipc:///tmp/x") } << QStringLiteral("needs -o FILE");
        QTest::newRow("-o without a file") << QStringList { QStringLiteral("ipc:///tmp/x"), QStringLiteral("-o") }
                                           << QStringLiteral("-o needs a FILE");
        QTest::newRow("negative duration") << QStringList { QStringLiteral("ipc:///tmp/x"), QStringLiteral("-o"), QStringLiteral("f"), QStringLiteral("--duration"), QStringLiteral("-1") }
                                           << QStringLiteral("--duration needs a positive number");
        QTest::newRow("fractional event count") << QStringList { QStringLiteral("ipc:///tmp/x"), QStringLiteral("-o"), QStringLiteral("f"), QStringLiteral("--events"), QStringLiteral("1.5") }
                                                << QStringLiteral("--events needs a positive whole number");
        QTest::newRow("unknown option") << QStringList { QStringLiteral("ipc:///tmp/x"), QStringLiteral("--fast") }
                                        << QStringLiteral("unknown option '--fast'");
        QTest::newRow("two endpoints") << QStringList { QStringLiteral("ipc:///a"), QStringLiteral("ipc:///b") }
                                       << QStringLiteral("takes one ENDPOINT");
        QTest::newRow("unsupported transport") << QStringList { QStringLiteral("inproc://x"), QStringLiteral("-o"), QStringLiteral("f") }
                                               << QStringLiteral("is not an ipc:// or tcp://HOST:PORT endpoint");
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
