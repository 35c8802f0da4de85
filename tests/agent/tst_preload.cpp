// libmemscope-preload.so end to end, without a GPU: memscope-preload-probe (preloadprobe.cpp), linked against a
// fake libcudart (fakecudart.cpp: the six entry points over host memory), runs under
// LD_PRELOAD=libmemscope-preload.so; a cppzmq SUB client receives its SegmentAlloc / SegmentFree events and checks
// them (order, type, address, size, stream) against the addresses the probe prints, and that a failing cudaMalloc
// and cudaFree(NULL) publish nothing; the probe itself checks every return value is the stub's own.
#include "wire/protocol.h"

#include <QProcess>
#include <QProcessEnvironment>
#include <QTemporaryDir>
#include <QTest>

#include <zmq.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

using namespace memscope;
using namespace std::chrono_literals;

class TestPreload : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void segmentEventsOfAProbe();
    void publishOffIsPassThrough();
};

namespace {

struct Expected {
    wire::EventType type;
    uint64_t address;
    uint64_t size;
    uint64_t stream;
};

QProcessEnvironment preloadEnvironment(const QString& endpoint)
{
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("LD_PRELOAD"), QStringLiteral(MEMSCOPE_PRELOAD_LIB));
    env.insert(QStringLiteral("MEMSCOPE_ENDPOINT"), endpoint);
    // In a sanitizer build (make asan) the preloaded shim comes before AddressSanitizer's runtime, which refuses to
    // start that way unless told the order is intended; other builds ignore the variable.
    const QString asan = env.value(QStringLiteral("ASAN_OPTIONS"));
    env.insert(QStringLiteral("ASAN_OPTIONS"),
               (asan.isEmpty() ? QString() : asan + QLatin1Char(':')) + QStringLiteral("verify_asan_link_order=0"));
    return env;
}

} // namespace

void TestPreload::segmentEventsOfAProbe()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/ep");
    QProcess probe;
    probe.setProcessEnvironment(preloadEnvironment(endpoint));
    probe.start(QStringLiteral(MEMSCOPE_PRELOAD_PROBE), {});
    QVERIFY(probe.waitForStarted());
    QVERIFY(probe.waitForReadyRead(10000));
    QCOMPARE(probe.readLine().trimmed(), QByteArray("ready"));

    zmq::context_t context;
    zmq::socket_t sub(context, zmq::socket_type::sub);
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect(endpoint.toStdString());
    std::this_thread::sleep_for(200ms); // the subscription reaches the PUB socket
    probe.write("go\n");
    QVERIFY(probe.waitForFinished(10000));
    QVERIFY2(probe.exitCode() == 0, probe.readAllStandardError().constData());
    const QList<QByteArray> addresses = probe.readAllStandardOutput().trimmed().split(' ');
    QCOMPARE(addresses.size(), 4);
    uint64_t a[4];
    for (int i = 0; i < 4; ++i) {
        bool ok = false;
        a[i] = addresses[i].toULongLong(&ok, 16);
        QVERIFY(ok);
    }

    std::vector<wire::EventRecord> events;
    bool goodbye = false;
    sub.set(zmq::sockopt::rcvtimeo, 3000);
    while (!goodbye) {
        zmq::message_t topic, body;
        if (!sub.recv(topic) || !sub.recv(body))
            break;
        if (topic.to_string_view() == wire::GoodbyeTopic) {
            goodbye = true;
            continue;
        }
        wire::BatchHeader h;
        if (topic.to_string_view() != wire::EventsTopic || body.size() < sizeof h)
            continue;
        std::memcpy(&h, body.data(), sizeof h);
        QCOMPARE(body.size(), sizeof h + h.count * sizeof(wire::EventRecord));
        for (uint32_t i = 0; i < h.count; ++i) {
            wire::EventRecord e;
            std::memcpy(&e, static_cast<const char*>(body.data()) + sizeof h + i * sizeof e, sizeof e);
            if (e.type != uint8_t(wire::EventType::Heartbeat))
                events.push_back(e);
        }
    }
    QVERIFY(goodbye);
    // The warm-up cudaMalloc(64) / cudaFree before "ready" arrive too when the publisher's first batch (after its
    // ~10 ms clock calibration) leaves after the SUB connected: accept them, in order, and set them aside.
    if (events.size() >= 2 && events[0].size == 64) {
        QCOMPARE(int(events[0].type), int(wire::EventType::SegmentAlloc));
        QCOMPARE(int(events[1].type), int(wire::EventType::SegmentFree));
        QCOMPARE(events[1].address, events[0].address);
        QCOMPARE(events[1].size, uint64_t(64));
        events.erase(events.begin(), events.begin() + 2);
    }
    const Expected expected[] = {
        { wire::EventType::SegmentAlloc, a[0], 1000, 0 },
        { wire::EventType::SegmentAlloc, a[1], 2 << 20, 0 },
        { wire::EventType::SegmentAlloc, a[2], 3000, 0x77 },
        { wire::EventType::SegmentAlloc, a[3], 5000, 0 },
        { wire::EventType::SegmentFree, a[0], 1000, 0 },
        { wire::EventType::SegmentFree, a[2], 3000, 0x77 },
        { wire::EventType::SegmentFree, a[3], 5000, 0 },
        { wire::EventType::SegmentFree, a[1], 2 << 20, 0 },
    };
    QCOMPARE(events.size(), std::size(expected));
    for (size_t i = 0; i < events.size(); ++i) {
        QCOMPARE(int(events[i].type), int(expected[i].type));
        QCOMPARE(uint64_t(events[i].address), expected[i].address);
        QCOMPARE(uint64_t(events[i].size), expected[i].size);
        QCOMPARE(uint64_t(events[i].stream), expected[i].stream);
        QCOMPARE(int(events[i].device), 0);
        QCOMPARE(events[i].lost, 0u);
        if (i)
            QCOMPARE(events[i].sequence, events[i - 1].sequence + 1);
    }
}

void TestPreload::publishOffIsPassThrough()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QProcess probe;
    QProcessEnvironment env = preloadEnvironment(QStringLiteral("ipc://") + dir.path() + QStringLiteral("/ep"));
    env.insert(QStringLiteral("MEMSCOPE_PUBLISH"), QStringLiteral("0"));
    probe.setProcessEnvironment(env);
    probe.start(QStringLiteral(MEMSCOPE_PRELOAD_PROBE), {});
    QVERIFY(probe.waitForReadyRead(10000));
    probe.write("go\n");
    QVERIFY(probe.waitForFinished(10000));
    QCOMPARE(probe.exitCode(), 0);
    QVERIFY(!QFile::exists(dir.path() + QStringLiteral("/ep")));
}

QTEST_GUILESS_MAIN(TestPreload)
#include "tst_preload.moc"
