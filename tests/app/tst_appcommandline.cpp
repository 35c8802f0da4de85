// The memscope binary's command-line manners: --help and --version answer without a display (no DISPLAY, no
// QT_QPA_PLATFORM) on stdout with status 0, and a headless --screenshot run prints nothing but errors: Qt's notes
// that a user can do nothing about (the offscreen platform's propagateSizeHints(), an unset XDG_RUNTIME_DIR) are
// dropped. Runs the memscope binary beside the test; GUI thread.
#include "apptestutil.h"
#include "runprogram.h"

#include <QCoreApplication>
#include <QImage>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

using namespace memscope;

namespace {

using test::Run;

Run runApp(const QStringList& args, const QProcessEnvironment& env)
{
    return test::runProgram(QStringLiteral("memscope"), args, env, 120000);
}

// No display of any kind: what a terminal on a headless machine, or a packaging check, has.
QProcessEnvironment withoutDisplay()
{
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const char* name : { "DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM" })
        env.remove(QString::fromLatin1(name));
    return env;
}

} // namespace

class TestAppCommandLine : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void helpWithoutDisplay_data();
    void helpWithoutDisplay();
    void versionWithoutDisplay_data();
    void versionWithoutDisplay();
    void screenshotIsQuiet_data();
    void screenshotIsQuiet();
};

void TestAppCommandLine::helpWithoutDisplay_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::newRow("--help") << QStringList { QStringLiteral("--help") };
    QTest::newRow("-h") << QStringList { QStringLiteral("-h") };
    QTest::newRow("--help after other options")
        << QStringList { QStringLiteral("--demo"), QStringLiteral("--diff"), QStringLiteral("--help") };
}

void TestAppCommandLine::helpWithoutDisplay()
{
    QFETCH(QStringList, args);
    const Run r = runApp(args, withoutDisplay());
    QVERIFY2(r.status == 0, r.err.constData());
    QVERIFY2(r.out.startsWith("Usage: "), r.out.constData());
    for (const char* option : { "--screenshot", "--diff", "--ranks", "--attach", "--demo", "--version" })
        QVERIFY2(r.out.contains(option), option);
    QVERIFY2(r.err.isEmpty(), r.err.constData());
}

void TestAppCommandLine::versionWithoutDisplay_data()
{
    QTest::addColumn<QString>("option");
    QTest::newRow("--version") << QStringLiteral("--version");
    QTest::newRow("-v") << QStringLiteral("-v");
}

void TestAppCommandLine::versionWithoutDisplay()
{
    QFETCH(QString, option);
    const Run r = runApp({ option }, withoutDisplay());
    QVERIFY2(r.status == 0, r.err.constData());
    QCOMPARE(r.out, QByteArray("memscope " MEMSCOPE_VERSION "\n"));
    QVERIFY2(r.err.isEmpty(), r.err.constData());
}

// Every kind of screenshot run: quiet, and the image at the size asked for (--size; the window 1600x1000 and a view
// alone 1400x800 without it).
void TestAppCommandLine::screenshotIsQuiet_data()
{
    QTest::addColumn<QStringList>("options");
    QTest::addColumn<QStringList>("files");
    QTest::addColumn<QSize>("expected");
    const QStringList size { QStringLiteral("--size"), QStringLiteral("1280x720") };
    QTest::newRow("the window") << QStringList() << QStringList { QStringLiteral("transformer_train.pickle") } << QSize(1600, 1000);
    QTest::newRow("the window at 1280x720") << size << QStringList { QStringLiteral("mlp_train.pickle") } << QSize(1280, 720);
    for (const char* view : { "timeline", "segments", "tree", "events", "overview", "insights" })
        QTest::addRow("--view %s", view) << QStringList { QStringLiteral("--view"), QString::fromLatin1(view) }
                                         << QStringList { QStringLiteral("oom.pickle") } << QSize(1400, 800);
    QTest::newRow("--view tree at 1280x720") << QStringList { QStringLiteral("--view"), QStringLiteral("tree") } + size
                                             << QStringList { QStringLiteral("oom.pickle") } << QSize(1280, 720);
    QTest::newRow("--diff, its flame graph at 1280x720")
        << QStringList { QStringLiteral("--diff"), QStringLiteral("--view"), QStringLiteral("diff-flame") } + size
        << QStringList { QStringLiteral("diff_before.pickle"), QStringLiteral("diff_after.pickle") } << QSize(1280, 720);
    QTest::newRow("--ranks at 1280x720") << QStringList { QStringLiteral("--ranks") } + size
                                         << QStringList { QStringLiteral("diff_before.pickle"), QStringLiteral("diff_after.pickle") }
                                         << QSize(1280, 720);
}

void TestAppCommandLine::screenshotIsQuiet()
{
    QFETCH(QStringList, options);
    QFETCH(QStringList, files);
    QFETCH(QSize, expected);
    QTemporaryDir dir;
    const QString out = dir.filePath(QStringLiteral("shot.png"));
    // As a batch job runs it: the offscreen platform, no XDG_RUNTIME_DIR.
    QProcessEnvironment env = withoutDisplay();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    env.remove(QStringLiteral("XDG_RUNTIME_DIR"));
    QStringList paths;
    for (const QString& f : files)
        paths << QString::fromStdString(test::snapshotPath(f.toStdString()));
    const Run r = runApp(QStringList { QStringLiteral("--screenshot"), out } + options + paths, env);
    QVERIFY2(r.status == 0, r.err.constData());
    QVERIFY2(r.err.isEmpty(), r.err.constData());
    QVERIFY2(r.out.isEmpty(), r.out.constData());
    const QImage image(out);
    QVERIFY(!image.isNull());
    QCOMPARE(image.size(), expected);
}

QTEST_MAIN(TestAppCommandLine)
#include "tst_appcommandline.moc"
