// model/processmemory: the GLIBC_TUNABLES value the programs start their copy with (the user's tunables kept, a
// user's own glibc.malloc.hugetlb respected), the kernel's huge-page mode read from its file, the user's environment
// put back in the copy, a virtio balloon's free page reporting read from its features, and memscope-cli really
// running as that copy (its environment read from /proc while it waits on a FIFO), or not where the user turned it
// off or huge pages do not pay.
#include "model/processmemory.h"
#include "runprogram.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include <sys/stat.h>

using namespace memscope;

namespace {

// The environment a running process started with (/proc/PID/environ), as "NAME=value" lines; empty once it is gone.
QStringList startEnvironment(qint64 pid)
{
    QFile file(QStringLiteral("/proc/%1/environ").arg(pid));
    if (!file.open(QIODevice::ReadOnly))
        return {};
    QStringList out;
    for (const QByteArray& item : file.readAll().split('\0'))
        if (!item.isEmpty())
            out << QString::fromLocal8Bit(item);
    return out;
}

} // namespace

class TestProcessMemory : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void tunables_data();
    void tunables();
    void hugePageMode_data();
    void hugePageMode();
    void balloonReporting_data();
    void balloonReporting();
    void restoresTheUserEnvironment_data();
    void restoresTheUserEnvironment();
    void programRunsAsItsTunedCopy_data();
    void programRunsAsItsTunedCopy();
};

void TestProcessMemory::tunables_data()
{
    QTest::addColumn<bool>("unset");
    QTest::addColumn<QString>("current");
    QTest::addColumn<bool>("changed");
    QTest::addColumn<QString>("expected");
    QTest::newRow("unset") << true << QString() << true << "glibc.malloc.hugetlb=1";
    QTest::newRow("empty") << false << "" << true << "glibc.malloc.hugetlb=1";
    QTest::newRow("another tunable kept")
        << false << "glibc.malloc.arena_max=2" << true << "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1";
    QTest::newRow("two kept") << false << "glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0" << true
                              << "glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1";
    QTest::newRow("user turned it off") << false << "glibc.malloc.hugetlb=0" << false << "";
    QTest::newRow("user chose hugetlbfs") << false << "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2" << false << "";
    QTest::newRow("named without a value") << false << "glibc.malloc.hugetlb" << false << "";
    QTest::newRow("a longer name is another tunable")
        << false << "glibc.malloc.hugetlbx=0" << true << "glibc.malloc.hugetlbx=0:glibc.malloc.hugetlb=1";
    QTest::newRow("a prefix is another tunable")
        << false << "glibc.malloc.huge=0" << true << "glibc.malloc.huge=0:glibc.malloc.hugetlb=1";
}

void TestProcessMemory::tunables()
{
    QFETCH(bool, unset);
    QFETCH(QString, current);
    QFETCH(bool, changed);
    QFETCH(QString, expected);
    const QByteArray given = current.toLatin1();
    const std::optional<std::string> out = model::tunablesWithHugePages(unset ? nullptr : given.constData());
    QCOMPARE(out.has_value(), changed);
    if (changed)
        QCOMPARE(QString::fromStdString(*out), expected);
}

void TestProcessMemory::hugePageMode_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<bool>("onRequest");
    QTest::newRow("madvise") << "always [madvise] never\n" << true;
    QTest::newRow("always") << "[always] madvise never\n" << false;
    QTest::newRow("never") << "always madvise [never]\n" << false;
    QTest::newRow("no file") << "" << false;
}

void TestProcessMemory::hugePageMode()
{
    QFETCH(QString, file);
    QFETCH(bool, onRequest);
    QCOMPARE(model::hugePagesOnRequest(file.toStdString()), onRequest);
}

void TestProcessMemory::balloonReporting_data()
{
    QTest::addColumn<QString>("features"); // as sysfs shows a virtio device's: bit 0 first
    QTest::addColumn<bool>("reports");
    QTest::newRow("stats, deflate on OOM, reporting") << "0110010100000000000000000000000010000000" << true;
    QTest::newRow("reporting alone") << "000001" << true;
    QTest::newRow("free page hints, not reporting") << "0111100100000000" << false;
    QTest::newRow("cut short before bit 5") << "01111" << false;
    QTest::newRow("no file") << "" << false;
}

void TestProcessMemory::balloonReporting()
{
    QFETCH(QString, features);
    QFETCH(bool, reports);
    QCOMPARE(model::balloonReportsFreePages(features.toStdString()), reports);
}

void TestProcessMemory::restoresTheUserEnvironment_data()
{
    QTest::addColumn<QString>("marker"); // MEMSCOPE_TUNED_COPY; empty: not a copy
    QTest::addColumn<QString>("user"); // MEMSCOPE_USER_GLIBC_TUNABLES; empty: unset
    QTest::addColumn<bool>("restored");
    QTest::addColumn<QString>("tunablesAfter"); // empty: unset
    QTest::newRow("user had tunables") << "1"
                                       << "glibc.malloc.arena_max=2" << true << "glibc.malloc.arena_max=2";
    QTest::newRow("user had none") << "0"
                                   << "" << true << "";
    QTest::newRow("not a copy: untouched") << ""
                                           << "" << false << "glibc.malloc.hugetlb=1";
}

void TestProcessMemory::restoresTheUserEnvironment()
{
    QFETCH(QString, marker);
    QFETCH(QString, user);
    QFETCH(bool, restored);
    QFETCH(QString, tunablesAfter);
    setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1); // as the copy starts
    if (marker.isEmpty())
        unsetenv("MEMSCOPE_TUNED_COPY");
    else
        setenv("MEMSCOPE_TUNED_COPY", qPrintable(marker), 1);
    if (user.isEmpty())
        unsetenv("MEMSCOPE_USER_GLIBC_TUNABLES");
    else
        setenv("MEMSCOPE_USER_GLIBC_TUNABLES", qPrintable(user), 1);

    QCOMPARE(model::restoreUserTunables(), restored);
    const char* now = std::getenv("GLIBC_TUNABLES");
    QCOMPARE(now ? QString::fromLocal8Bit(now) : QString(), tunablesAfter);
    QVERIFY(!std::getenv("MEMSCOPE_TUNED_COPY"));
    QVERIFY(!std::getenv("MEMSCOPE_USER_GLIBC_TUNABLES"));
    unsetenv("GLIBC_TUNABLES");
}

void TestProcessMemory::programRunsAsItsTunedCopy_data()
{
    QTest::addColumn<QString>("userTunables"); // empty: unset
    QTest::addColumn<QString>("hugePages"); // MEMSCOPE_HUGE_PAGES; empty: unset (the machine decides)
    QTest::addColumn<bool>("copied"); // where huge pages pay
    QTest::addColumn<QString>("copyTunables");
    QTest::newRow("no tunables") << ""
                                 << "1" << true << "glibc.malloc.hugetlb=1";
    QTest::newRow("the user's kept") << "glibc.malloc.arena_max=4"
                                     << "1" << true << "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1";
    QTest::newRow("turned off by the user") << "glibc.malloc.hugetlb=0"
                                            << "1" << false << "glibc.malloc.hugetlb=0";
    QTest::newRow("huge pages turned off") << "glibc.malloc.arena_max=4"
                                           << "0" << false << "glibc.malloc.arena_max=4";
    // Where this machine's balloon hands free memory back to its host, huge pages do not pay: no copy.
    QTest::newRow("the machine decides") << "glibc.malloc.arena_max=4"
                                         << "" << true << "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1";
}

void TestProcessMemory::programRunsAsItsTunedCopy()
{
    QFETCH(QString, userTunables);
    QFETCH(QString, hugePages);
    QFETCH(bool, copied);
    QFETCH(QString, copyTunables);
    if (hugePages.isEmpty() && model::freePagesReportedToHost()) {
        copied = false;
        copyTunables = userTunables;
    }
    std::ifstream modeFile("/sys/kernel/mm/transparent_hugepage/enabled");
    const std::string mode((std::istreambuf_iterator<char>(modeFile)), std::istreambuf_iterator<char>());
    if (copied && (!model::hugePagesOnRequest(mode) || model::sanitizerAllocator()))
        QSKIP("transparent huge pages are not on request here, or the programs use a sanitizer's allocator");

    // memscope-cli opens the FIFO and waits there for a writer: long enough to read its environment.
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString fifo = dir.filePath(QStringLiteral("snapshot.pickle"));
    QCOMPARE(mkfifo(QFile::encodeName(fifo).constData(), 0600), 0);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove(QStringLiteral("GLIBC_TUNABLES"));
    if (!userTunables.isEmpty())
        env.insert(QStringLiteral("GLIBC_TUNABLES"), userTunables);
    env.remove(QStringLiteral("MEMSCOPE_HUGE_PAGES"));
    if (!hugePages.isEmpty())
        env.insert(QStringLiteral("MEMSCOPE_HUGE_PAGES"), hugePages);
    QProcess cli;
    cli.setProcessEnvironment(env);
    cli.start(test::programPath(QStringLiteral("memscope-cli")), { QStringLiteral("stats"), fifo });
    QVERIFY(cli.waitForStarted());

    // The copy replaces the first image under the same pid; wait until the environment shows the outcome.
    const QString marker = QStringLiteral("MEMSCOPE_TUNED_COPY=") + QLatin1Char(userTunables.isEmpty() ? '0' : '1');
    QStringList environment;
    QElapsedTimer waited;
    waited.start();
    do {
        QThread::msleep(20);
        environment = startEnvironment(cli.processId());
    } while (copied && !environment.contains(marker) && waited.elapsed() < 20000);
    QCOMPARE(environment.contains(marker), copied);
    // The copy goes by the program's name, not by that of the file it was executed from (/proc/self/exe).
    // It names itself once its main() runs, a moment after the environment shows.
    auto comm = [&] {
        QFile file(QStringLiteral("/proc/%1/comm").arg(cli.processId()));
        return file.open(QIODevice::ReadOnly) ? file.readAll().trimmed() : QByteArray();
    };
    QTRY_COMPARE_WITH_TIMEOUT(comm(), QByteArray("memscope-cli"), 20000);
    // glibc cuts the variable's text where each pair ends when it parses it (seen with Debian 12's 2.36), so /proc
    // shows the first pair after the name and the others as items of their own: look for each pair. Read once
    // main() ran, so after the parse: read before it (a loaded machine), the text is still whole.
    environment = startEnvironment(cli.processId());
    const QStringList pairs = copyTunables.split(QLatin1Char(':'));
    QVERIFY2(environment.contains(QStringLiteral("GLIBC_TUNABLES=") + pairs.front()),
             qPrintable(environment.filter(QStringLiteral("TUNABLES")).join(u' ')));
    for (const QString& pair : pairs)
        QVERIFY2(std::any_of(environment.begin(), environment.end(),
                             [&](const QString& item) { return item.endsWith(pair); }),
                 qPrintable(pair));
    QCOMPARE(environment.contains(QStringLiteral("MEMSCOPE_USER_GLIBC_TUNABLES=") + userTunables),
             copied && !userTunables.isEmpty());

    // Let it go: a writer that writes nothing; a FIFO is no snapshot, and the copy says so as the program would.
    {
        QFile writer(fifo);
        QVERIFY(writer.open(QIODevice::WriteOnly));
    }
    QVERIFY(cli.waitForFinished(60000));
    QCOMPARE(cli.exitCode(), 1);
    const QByteArray err = cli.readAllStandardError();
    QVERIFY2(err.contains("not a regular file") && err.contains("snapshot.pickle"), err.constData());
}

QTEST_GUILESS_MAIN(TestProcessMemory)
#include "tst_processmemory.moc"
