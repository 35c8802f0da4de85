// Tests of common/wire/endpoint.h, the endpoint rule the agent and every viewer follow: which endpoints carry the
// protocol (inproc://, abstract ipc and other transports refused, each with its reason), where the state socket
// is, and the default sockets' names and folders. (tst_publisher checks that the agent refuses what is refused
// here; tst_client and tst_recordcommand that the viewers do.)
#include "wire/endpoint.h"

#include <QTest>

#include <unistd.h>

using namespace memscope;

class TestEndpoint : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // An endpoint, its state endpoint ("" when refused) and the start of the reason it is refused ("" when not).
    void endpoints_data()
    {
        QTest::addColumn<QString>("endpoint");
        QTest::addColumn<QString>("state");
        QTest::addColumn<QString>("problem");
        QTest::newRow("ipc path") << QStringLiteral("ipc:///tmp/x") << QStringLiteral("ipc:///tmp/x-state")
                                  << QString();
        QTest::newRow("ipc relative path") << QStringLiteral("ipc://x") << QStringLiteral("ipc://x-state") << QString();
        QTest::newRow("tcp port") << QStringLiteral("tcp://127.0.0.1:5555") << QStringLiteral("tcp://127.0.0.1:5556")
                                  << QString();
        QTest::newRow("tcp without host")
            << QStringLiteral("tcp://:7000") << QStringLiteral("tcp://:7001") << QString();
        QTest::newRow("tcp IPv6") << QStringLiteral("tcp://[::1]:9") << QStringLiteral("tcp://[::1]:10") << QString();
        QTest::newRow("tcp highest port")
            << QStringLiteral("tcp://h:65534") << QStringLiteral("tcp://h:65535") << QString();
        QTest::newRow("tcp without port")
            << QStringLiteral("tcp://127.0.0.1") << QString() << QStringLiteral("a tcp endpoint needs a port");
        QTest::newRow("tcp empty port") << QStringLiteral("tcp://host:") << QString()
                                        << QStringLiteral("the port must be a number from 1 to 65534");
        QTest::newRow("tcp named port") << QStringLiteral("tcp://host:http") << QString()
                                        << QStringLiteral("the port must be a number from 1 to 65534");
        QTest::newRow("tcp port 0") << QStringLiteral("tcp://host:0") << QString()
                                    << QStringLiteral("the port must be a number from 1 to 65534");
        QTest::newRow("tcp port 65535 (no room for the state socket)")
            << QStringLiteral("tcp://host:65535") << QString()
            << QStringLiteral("the port must be a number from 1 to 65534 (the state socket takes the next one)");
        QTest::newRow("tcp signed port") << QStringLiteral("tcp://host:+5") << QString()
                                         << QStringLiteral("the port must be a number");
        QTest::newRow("ipc without path")
            << QStringLiteral("ipc://") << QString()
            << QStringLiteral("not an ipc:// or tcp://HOST:PORT endpoint (ipc:// needs a path");
        QTest::newRow("abstract ipc") << QStringLiteral("ipc://@memscope") << QString()
                                      << QStringLiteral("an abstract ipc endpoint (ipc://@NAME) has no file");
        QTest::newRow("inproc") << QStringLiteral("inproc://x") << QString()
                                << QStringLiteral("not an ipc:// or tcp://HOST:PORT endpoint (inproc:// joins the "
                                                  "sockets of one ZeroMQ context only");
        QTest::newRow("pgm") << QStringLiteral("pgm://eth0;239.192.1.1:5555") << QString()
                             << QStringLiteral("not an ipc:// or tcp://HOST:PORT endpoint");
        QTest::newRow("a path without a scheme")
            << QStringLiteral("/tmp/x") << QString() << QStringLiteral("not an ipc:// or tcp://HOST:PORT endpoint");
        QTest::newRow("empty") << QString() << QString() << QStringLiteral("not an ipc:// or tcp://HOST:PORT endpoint");
    }
    void endpoints()
    {
        QFETCH(QString, endpoint);
        QFETCH(QString, state);
        QFETCH(QString, problem);
        const std::string e = endpoint.toStdString();
        QCOMPARE(QString::fromStdString(wire::stateEndpointFor(e)), state);
        const QString why = QString::fromStdString(wire::endpointProblem(e));
        QVERIFY2(problem.isEmpty() ? why.isEmpty() : why.startsWith(problem), qPrintable(why));
        QVERIFY(!why.contains(QLatin1Char('\n')));
    }

    void socketNames_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<bool>("memscope");
        QTest::addColumn<bool>("state");
        QTest::addColumn<qlonglong>("pid");
        QTest::newRow("a job's events") << QStringLiteral("memscope-4242") << true << false << 4242LL;
        QTest::newRow("a job's state") << QStringLiteral("memscope-4242-state") << true << true << 4242LL;
        QTest::newRow("a name a user chose") << QStringLiteral("memscope-train") << true << false << 0LL;
        QTest::newRow("its state") << QStringLiteral("memscope-train-state") << true << true << 0LL;
        QTest::newRow("too many digits for a pid") << QStringLiteral("memscope-1234567890") << true << false << 0LL;
        QTest::newRow("a bind in progress") << QStringLiteral("memscope-12.bind-12") << true << false << 0LL;
        QTest::newRow("the prefix alone") << QStringLiteral("memscope-") << true << false << 0LL;
        QTest::newRow("another program's") << QStringLiteral("pulse") << false << false << 0LL;
        QTest::newRow("a suffix alone") << QStringLiteral("memscope--state") << true << false << 0LL;
    }
    void socketNames()
    {
        QFETCH(QString, name);
        QFETCH(bool, memscope);
        QFETCH(bool, state);
        QFETCH(qlonglong, pid);
        const wire::SocketName parsed = wire::parseSocketName(name.toStdString());
        QCOMPARE(parsed.memscope, memscope);
        QCOMPARE(parsed.state, state);
        QCOMPARE(qlonglong(parsed.pid), pid);
    }

    void defaults()
    {
        QCOMPARE(wire::socketName(4242), std::string("memscope-4242"));
        const wire::SocketName back = wire::parseSocketName(wire::socketName(::getpid()));
        QCOMPARE(back.pid, long(::getpid()));
        QCOMPARE(wire::fallbackSocketFolder(), "/tmp/memscope-" + std::to_string(::getuid()));
        const QByteArray saved = qgetenv("XDG_RUNTIME_DIR");
        qputenv("XDG_RUNTIME_DIR", "/run/user/4242");
        QCOMPARE(wire::runtimeSocketFolder(), std::string("/run/user/4242"));
        qputenv("XDG_RUNTIME_DIR", "");
        QCOMPARE(wire::runtimeSocketFolder(), std::string());
        qunsetenv("XDG_RUNTIME_DIR");
        QCOMPARE(wire::runtimeSocketFolder(), std::string());
        if (!saved.isNull())
            qputenv("XDG_RUNTIME_DIR", saved);
    }
};

QTEST_GUILESS_MAIN(TestEndpoint)
#include "tst_endpoint.moc"
