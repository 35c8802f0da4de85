// The main window end to end: files open in tabs (on the thread pool, with progress), bad files show an error naming
// the file and the reason and never a tab, a file that loads with warnings opens with them in its tab's banner,
// cancel works, the keyboard moves the shared cursor, views export as PNG
// and SVG, and `memscope --screenshot` renders every view of every real snapshot. Runs offscreen.
#include "apptestutil.h"
#include "ingest/resources.h"
#include "ingest/snapshotloader.h"
#include "views/calltreeview.h"
#include "views/diffwindow.h"
#include "views/documentwindow.h"
#include "views/mainwindow.h"
#include "views/rankgroupview.h"

#include <QAction>
#include <QApplication>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QToolBar>

#include <algorithm>
#include <set>

// bench::repeated only; big_trace is read from the test data (memscope::test::snapshotPath).
#define MEMSCOPE_DEFAULT_SHARED_DIR ""
#include "../benchmarks/synthetic.h"

using memscope::app::DocumentWindow;
using memscope::app::MainWindow;

namespace {

bool loadAndWait(MainWindow& window, const QString& path)
{
    QSignalSpy spy(&window, &MainWindow::loadFinished);
    window.openFile(path);
    if (!spy.wait(120'000))
        return false;
    return spy.takeFirst().at(0).toBool();
}

// Distinct colours in a sample of pixels: a blank or single-colour image has one or two.
int colourVariety(const QImage& image)
{
    std::set<QRgb> colours;
    for (int y = 0; y < image.height(); y += 7)
        for (int x = 0; x < image.width(); x += 7)
            colours.insert(image.pixel(x, y));
    return int(colours.size());
}

QString snapshot(const char* name) { return QString::fromStdString(memscope::test::snapshotPath(name)); }

// A real pickle of ~2.6 M entries (big_trace repeated 8 times, tests/benchmarks/synthetic.h), written once per run:
// long enough that a load reports progress in every stage, replays included (every 2^20 entries of a pass).
QString longSnapshot()
{
    static QTemporaryDir dir;
    static const QString path = [] {
        const QString p = dir.filePath(QStringLiteral("long.pickle"));
        const memscope::io::LoadResult big
            = memscope::io::loadSnapshot(memscope::test::snapshotPath("big_trace.pickle.xz"));
        if (!big.ok())
            qFatal("%s", big.error.toString().c_str());
        auto s = memscope::bench::repeated(*big.snapshot, 8, memscope::bench::Survivors::Freed);
        s->streams = big.snapshot->streams;
        if (memscope::io::Error e = memscope::io::saveSnapshot(*s, p.toStdString()))
            qFatal("%s", e.toString().c_str());
        return p;
    }();
    return path;
}

} // namespace

class TestMainWindow : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        memscope::app::initResources();
        QCoreApplication::setOrganizationName(QStringLiteral("memscope-tests"));
    }

    void showsBundledSample()
    {
        MainWindow window;
        window.show();
        QVERIFY(loadAndWait(window, memscope::app::bundledSamplePath()));
        QCOMPARE(window.documentCount(), 1);
        QCOMPARE(window.windowTitle(), QStringLiteral("memscope — transformer_train.pickle"));
        QVERIFY(window.errorText().isEmpty());
        QVERIFY(!window.findChild<QWidget*>(QStringLiteral("errorBanner"))->isVisible());
        // Counted by Python, not by our reader:
        //   python3 -c "import pickle;print(len(pickle.load(open('transformer_train.pickle','rb'))['segments']))"
        // prints 86 for resources/samples/transformer_train.pickle; ../shared/README.md says 11,137 entries.
        QCOMPARE(window.snapshot()->segments.size(), size_t(86));
        QCOMPARE(window.currentDocument()->session()->entryCount(), int64_t(11137));
        // The cursor starts at the end: the snapshot's own state.
        QCOMPARE(window.currentDocument()->session()->cursor(), int64_t(11137));
        QVERIFY(window.findChild<QLabel*>(QStringLiteral("cursorStatus"))->text().contains(QLatin1String("11,137")));
    }

    void severalFilesOpenAsTabs()
    {
        MainWindow window;
        window.show();
        QSignalSpy spy(&window, &MainWindow::loadFinished);
        window.openFiles({ snapshot("oom.pickle"), snapshot("two_device.pickle"), snapshot("cudagraph.pickle") });
        while (spy.size() < 3)
            QVERIFY(spy.wait(60'000));
        QCOMPARE(window.documentCount(), 3);
        QVERIFY(window.errorText().isEmpty());
    }

    // A file already open is shown again, not opened into a second tab; File > Save Live Recording is enabled only
    // with a live tab current.
    void openingAnOpenFileShowsItsTab()
    {
        MainWindow window;
        window.show();
        auto* saveLive = window.findChild<QAction*>(QStringLiteral("saveLiveAction"));
        QVERIFY(saveLive);
        QVERIFY(!saveLive->isEnabled());
        QVERIFY(loadAndWait(window, snapshot("oom.pickle")));
        QVERIFY(loadAndWait(window, snapshot("two_device.pickle")));
        QCOMPARE(window.documentCount(), 2);
        QVERIFY(!saveLive->isEnabled());
        // The same file again, by another spelling of its path: its tab comes to the front.
        QVERIFY(loadAndWait(window, QDir(snapshot("")).filePath(QStringLiteral("./oom.pickle"))));
        QCOMPARE(window.documentCount(), 2);
        QCOMPARE(window.windowTitle(), QStringLiteral("memscope — oom.pickle"));
        QVERIFY(window.errorText().isEmpty());
    }

    void callStacksToolsAreReachable_data()
    {
        QTest::addColumn<QSize>("size");
        QTest::addColumn<int>("fontScale"); // 200 stands for a 2x-scaled desktop
        QTest::newRow("1280x720") << QSize(1280, 720) << 100;
        QTest::newRow("1920x1080, 2x text") << QSize(1920, 1080) << 200;
    }

    // The call stacks' Tree / Flame graph switch is on screen, not under the toolbar's overflow button, at every
    // size; View > Flame Graph and View > Find in Call Stacks (Ctrl+F) reach the flame graph and the search field.
    void callStacksToolsAreReachable()
    {
        QFETCH(QSize, size);
        QFETCH(int, fontScale);
        const memscope::test::ScopedFontScale font(fontScale);
        {
            MainWindow window;
            window.resize(size);
            window.show();
            QVERIFY(QTest::qWaitForWindowExposed(&window));
            QVERIFY(loadAndWait(window, snapshot("mlp_train.pickle")));
            window.activateWindow();
            QVERIFY(QTest::qWaitForWindowActive(&window));
            QCoreApplication::processEvents();
            QCOMPARE(window.size(), size); // nothing widens the window past what it was given
            QVERIFY(memscope::test::saveScreenshot(
                window, QStringLiteral("callstack-tools-%1x%2-%3").arg(size.width()).arg(size.height()).arg(fontScale),
                size));
            auto* tree = window.currentDocument()->findChild<memscope::app::CallTreeView*>();
            QVERIFY(tree);
            auto* bar = tree->findChild<QToolBar*>();
            QVERIFY(bar);
            for (const char* name : { "treeAction", "flameGraphAction" }) {
                QAction* a = tree->findChild<QAction*>(QLatin1String(name));
                QVERIFY(a);
                QWidget* button = bar->widgetForAction(a);
                QVERIFY2(button && button->isVisible(), name); // in the bar, not in its overflow menu
                QVERIFY(bar->rect().contains(button->geometry()));
            }
            window.findChild<QAction*>(QStringLiteral("showFlameGraphAction"))->trigger();
            QVERIFY(tree->isFlameGraphShown());
            auto* find = window.findChild<QAction*>(QStringLiteral("findInCallStacksAction"));
            QCOMPARE(find->shortcut(), QKeySequence(QKeySequence::Find));
            find->trigger();
            auto* search = tree->findChild<QLineEdit*>(QStringLiteral("searchEdit"));
            QVERIFY(search);
            QTRY_VERIFY(search->hasFocus());
            QVERIFY(search->isVisible());
        }
    }

    // Errors do not pile up: the banner shows the newest, counts the earlier ones (all in its tooltip) and does not
    // repeat one said again.
    void errorsDoNotPileUp()
    {
        MainWindow window;
        window.show();
        QVERIFY(!loadAndWait(window, QStringLiteral("/nonexistent-a.pickle")));
        QVERIFY(!loadAndWait(window, QStringLiteral("/nonexistent-b.pickle")));
        QVERIFY(!loadAndWait(window, QStringLiteral("/nonexistent-a.pickle")));
        auto* label = window.findChild<QLabel*>(QStringLiteral("errorLabel"));
        QVERIFY(label);
        const QStringList lines = label->text().split(QLatin1Char('\n'));
        QCOMPARE(lines.size(), 2);
        QVERIFY2(lines[0].startsWith(QLatin1String("/nonexistent-a.pickle: ")), qPrintable(label->text()));
        QVERIFY2(lines[1].contains(QLatin1String("1 earlier message")), qPrintable(label->text()));
        QVERIFY(label->toolTip().contains(QLatin1String("/nonexistent-b.pickle: ")));
        QCOMPARE(label->toolTip().count(QLatin1String("/nonexistent-a.pickle: ")), 1);
    }

    void showsErrorForBadFile_data()
    {
        QTest::addColumn<QByteArray>("content"); // null: the file is not created
        QTest::addColumn<QString>("reason");
        QFile sample(memscope::app::bundledSamplePath());
        QVERIFY(sample.open(QIODevice::ReadOnly));
        const QByteArray pickle = sample.readAll();
        QTest::newRow("missing file") << QByteArray() << "No such file";
        QTest::newRow("empty file") << QByteArray("") << "empty";
        QTest::newRow("plain text") << QByteArray("not a snapshot at all\n") << "neither a pickle nor JSON";
        QTest::newRow("truncated pickle") << pickle.left(pickle.size() / 2) << "truncated";
        QTest::newRow("hostile pickle") << QByteArray("cos\nsystem\n(S'touch pwned'\ntR.") << "unsafe";
    }

    void showsErrorForBadFile()
    {
        QFETCH(QByteArray, content);
        QFETCH(QString, reason);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("bad.pickle"));
        if (!content.isNull()) {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(content);
        }
        MainWindow window;
        window.show();
        QVERIFY(!loadAndWait(window, path));
        QCOMPARE(window.documentCount(), 0);
        QVERIFY2(window.errorText().startsWith(path + QLatin1String(": ")), qPrintable(window.errorText()));
        QVERIFY2(window.errorText().contains(reason), qPrintable(window.errorText()));
        QVERIFY(window.findChild<QWidget*>(QStringLiteral("errorBanner"))->isVisible());
        // The window keeps working: a good file still opens.
        QVERIFY(loadAndWait(window, snapshot("oom.pickle")));
        QCOMPARE(window.documentCount(), 1);
    }

    void showsWarningsWithTheDocument_data()
    {
        QTest::addColumn<QString>("path");
        QTest::addColumn<QStringList>("warnings"); // one banner line each, after "PATH: warning: "; none: no banner
        // tests/data/README.md says how the two fixtures were made.
        QTest::newRow("blocks that do not tile, overlapping segments, a negative size")
            << QString::fromStdString(memscope::test::dataPath("inconsistent.pickle"))
            << QStringList { QStringLiteral(
                                 "1 segment is not tiled exactly by its blocks, first: segment 0x7f1e68000000"),
                             QStringLiteral("1 segment overlaps another segment of its device"),
                             QStringLiteral("1 trace entry has a negative size"),
                             QStringLiteral("4 places where the trace does not replay to the final state, first: "
                                            "device 0, entry 19 (segment_alloc at 0x7f1e6c000000)") };
        QTest::newRow("integers no field holds")
            << QString::fromStdString(memscope::test::dataPath("wide-integers.pickle"))
            << QStringList { QStringLiteral("2 integers did not fit their fields and were left out"),
                             QStringLiteral("1 place where the trace does not replay to the final state") };
        QTest::newRow("torch.compile: no warning")
            << QString::fromStdString(memscope::test::dataPath("corpus/compile_default.pickle")) << QStringList {};
    }

    void showsWarningsWithTheDocument()
    {
        QFETCH(QString, path);
        QFETCH(QStringList, warnings);
        MainWindow window;
        window.resize(1600, 1000);
        window.show();
        QVERIFY(loadAndWait(window, path)); // the file is shown, warnings or not
        QCOMPARE(window.documentCount(), 1);
        QVERIFY(window.errorText().isEmpty());
        DocumentWindow* doc = window.currentDocument();
        QVERIFY(doc);
        auto* banner = doc->findChild<QWidget*>(QStringLiteral("warningBanner"));
        if (warnings.isEmpty()) {
            QVERIFY(!banner);
            return;
        }
        QVERIFY(banner);
        QVERIFY(banner->isVisible());
        auto* label = banner->findChild<QLabel*>(QStringLiteral("warningLabel"));
        QVERIFY(label);
        const QStringList lines = label->text().split(QLatin1Char('\n'));
        QCOMPARE(lines.size(), warnings.size());
        for (int i = 0; i < lines.size(); ++i) {
            QVERIFY2(lines[i].startsWith(path + QLatin1String(": warning: ") + warnings[i]), qPrintable(lines[i]));
        }
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QCoreApplication::processEvents(); // the layout settles
        memscope::app::finishTimelineBuilds(&window); // the timeline's data and plot at its size
        QVERIFY(window.grab().save(memscope::test::screenshotDir() + QLatin1String("/warnings-")
                                   + QFileInfo(path).baseName() + QLatin1String(".png")));
        // Dismissed, the banner goes; the document stays.
        auto* dismiss = banner->findChild<QPushButton*>(QStringLiteral("warningDismiss"));
        QVERIFY(dismiss);
        dismiss->click();
        QVERIFY(!banner->isVisible());
        QCOMPARE(window.documentCount(), 1);
    }

    void cancelStopsLoading()
    {
        MainWindow window;
        window.show();
        QSignalSpy spy(&window, &MainWindow::loadFinished);
        window.openFile(snapshot("big_trace.pickle.xz"));
        auto* cancel = window.findChild<QWidget*>(QStringLiteral("cancelLoad"));
        QVERIFY(cancel->isVisible());
        QMetaObject::invokeMethod(cancel, "click");
        QVERIFY(spy.wait(120'000));
        QCOMPARE(spy.first().at(0).toBool(), false);
        QCOMPARE(window.documentCount(), 0);
        QVERIFY(window.errorText().isEmpty()); // a cancel is not an error
    }

    // Reading maps the file a window at a time ahead of the parse: when the first progress report comes, most of a
    // 200 MB file is not mapped in yet (reading it whole first, as MAP_POPULATE did, kept a file that was not in
    // the page cache from reporting, or hearing Cancel, until all of it had come from the disk).
    // The file is mapped a window ahead of the parse at a time, not whole before it starts. `readAhead`: with the
    // reader thread (a file this large: io/filebytes.h), or the mapping only (as smaller files and .xz ones are
    // read), whose window ahead must stay mapped all the way through.
    void readingMapsTheFileAsItGoes_data()
    {
        QTest::addColumn<bool>("readAhead");
        QTest::newRow("mapped") << false;
        QTest::newRow("read ahead") << true;
    }
    void readingMapsTheFileAsItGoes()
    {
        QFETCH(bool, readAhead);
        const QString path = longSnapshot();
        const qint64 fileBytes = QFileInfo(path).size();
        QVERIFY(fileBytes > (qint64(150) << 20));
        auto rss = [](const char* field) { // bytes resident in this process (proc(5), /proc/PID/status)
            QFile status(QStringLiteral("/proc/self/status"));
            if (!status.open(QIODevice::ReadOnly))
                return qint64(-1);
            for (const QByteArray& line : status.readAll().split('\n'))
                if (line.startsWith(field))
                    return line.mid(int(qstrlen(field))).trimmed().split(' ').front().toLongLong() * 1024;
            return qint64(-1);
        };
        // (The reader's windows are anonymous memory, which other threads of this process move too: what they hold
        // is tst_filebytes' to check.)
        auto held = [&] { return rss("RssFile:"); };
        const qint64 before = held();
        QVERIFY(before >= 0);
        qint64 atFirstReport = -1;
        qint64 leastMidway = -1; // the least mapped at a report between 30 % and 60 % of the reading
        memscope::io::LoadOptions options;
        options.readAhead = readAhead;
        options.progress = [&](uint64_t done, uint64_t total) {
            if (atFirstReport < 0)
                atFirstReport = held();
            if (!readAhead && done * 10 >= total * 3 && done * 10 <= total * 6) {
                const qint64 now = rss("RssFile:") - before;
                leastMidway = leastMidway < 0 ? now : std::min(leastMidway, now);
            }
            return true;
        };
        const memscope::io::LoadResult result = memscope::io::loadSnapshot(path.toStdString(), options);
        QVERIFY2(result.ok(), result.error.toString().c_str());
        QVERIFY(atFirstReport >= 0);
        QVERIFY2(atFirstReport - before < fileBytes / 2,
                 qPrintable(QStringLiteral("%1 MB of the %2 MB file mapped in before the first report")
                                .arg((atFirstReport - before) >> 20)
                                .arg(fileBytes >> 20)));
        // ... and all the way through: the two windows ahead (16 MB, moved every 8 MB) stay mapped, not only the first
        // two (an unaligned start once turned the mapping ahead off, and every page faulted in as read: then no more
        // than the window the parse is in).
        if (!readAhead) {
            QVERIFY(leastMidway >= 0);
            QVERIFY2(leastMidway >= (qint64(12) << 20),
                     qPrintable(QStringLiteral("%1 MB mapped ahead midway").arg(leastMidway >> 20)));
        }
    }

    // A load stops wherever it is asked to: while reading, between reading and the replays, and inside the replays'
    // backward and forward passes (a long trace's replays take as long as its reading). Progress only rises, a
    // stopped load is a cancel (no document, no error to show) and one left alone reaches 100.
    void loadStopsAtEveryStage_data()
    {
        QTest::addColumn<int>("stopAt"); // the first percentage at which progress returns false; 101: never
        QTest::addRow("while reading") << 1;
        // Reading is the pickle machine (0-40 %), then the builder's pass over every entry (40-50 %).
        QTest::addRow("in reading's pass over the entries") << 41;
        QTest::addRow("after reading") << 50;
        // The replay's steps take 50-99 %: the backward pass, ordering the allocations, their coordinates, the
        // forward pass (model::ReplayBuilder's StepEnd; 2.6 M entries report at 53, 56 / 57, 61 / 63-67 / 80, 92).
        QTest::addRow("in the replay's backward pass") << 51;
        QTest::addRow("while the replay orders the allocations") << 58;
        QTest::addRow("while the replay works out their coordinates") << 64;
        QTest::addRow("in the replay's forward pass") << 80;
        QTest::addRow("never") << 101;
    }
    void loadStopsAtEveryStage()
    {
        QFETCH(int, stopAt);
        const QString path = longSnapshot();
        std::vector<int> seen;
        const memscope::app::LoadOutcome outcome = memscope::app::loadOutcome(path, [&](int percent) {
            seen.push_back(percent);
            return percent < stopAt;
        });
        QVERIFY(!seen.empty());
        QVERIFY(std::is_sorted(seen.begin(), seen.end()));
        if (stopAt > 100) {
            QVERIFY2(outcome.ok(), qPrintable(outcome.error));
            QVERIFY(outcome.document);
            QCOMPARE(seen.back(), 100);
            // Reading's last pass and every step of the replays reported on their way.
            QVERIFY(std::any_of(seen.begin(), seen.end(), [](int p) { return p > 40 && p < 50; }));
            QVERIFY(std::any_of(seen.begin(), seen.end(), [](int p) { return p > 50 && p < 57; }));
            QVERIFY(std::any_of(seen.begin(), seen.end(), [](int p) { return p > 57 && p < 63; }));
            QVERIFY(std::any_of(seen.begin(), seen.end(), [](int p) { return p > 63 && p < 68; }));
            QVERIFY(std::any_of(seen.begin(), seen.end(), [](int p) { return p >= 80 && p < 100; }));
            return;
        }
        QVERIFY(outcome.cancelled);
        QVERIFY(!outcome.document);
        QVERIFY(!outcome.snapshot);
        QVERIFY2(outcome.error.contains(path), qPrintable(outcome.error));
        QVERIFY(seen.back() >= stopAt);
        QVERIFY2(seen.back() < 100, qPrintable(QString::number(seen.back())));
    }

    // The window shows a long load's progress as it goes, and its Cancel stops the load mid-way.
    void cancelStopsALoadMidWay()
    {
        const QString path = longSnapshot();
        MainWindow window;
        window.show();
        QSignalSpy spy(&window, &MainWindow::loadFinished);
        window.openFile(path);
        auto* bar = window.findChild<QProgressBar*>(QStringLiteral("loadProgress"));
        auto* cancel = window.findChild<QWidget*>(QStringLiteral("cancelLoad"));
        QVERIFY(bar && cancel);
        QVERIFY(bar->isVisible());
        QVERIFY(cancel->isVisible());
        QTRY_VERIFY_WITH_TIMEOUT(bar->value() > 0 || !spy.isEmpty(), 60'000);
        QVERIFY2(spy.isEmpty(), "the load ended before it showed any progress");
        QVERIFY(bar->value() < 100);
        QVERIFY(bar->text().contains(QStringLiteral("long.pickle")));
        QMetaObject::invokeMethod(cancel, "click");
        QVERIFY(spy.wait(120'000));
        QCOMPARE(spy.first().at(0).toBool(), false);
        QCOMPARE(window.documentCount(), 0);
        QVERIFY(window.errorText().isEmpty()); // a cancel is not an error
        QVERIFY(!bar->isVisible());
        QVERIFY(!cancel->isVisible());
    }

    void keysMoveTheCursor()
    {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window) || true);
        QVERIFY(loadAndWait(window, memscope::app::bundledSamplePath()));
        DocumentWindow* doc = window.currentDocument();
        auto* session = doc->session();
        const int64_t n = session->entryCount();
        window.activateWindow();
        doc->view(DocumentWindow::View::Timeline)->setFocus();
        QTest::keyClick(&window, Qt::Key_Home);
        QCOMPARE(session->cursor(), int64_t(0));
        QTest::keyClick(&window, Qt::Key_Right);
        QTest::keyClick(&window, Qt::Key_Right);
        QCOMPARE(session->cursor(), int64_t(2));
        QTest::keyClick(&window, Qt::Key_Left);
        QCOMPARE(session->cursor(), int64_t(1));
        // PgDn jumps to the next annotation boundary (transformer_train has record_function step_0..5).
        const auto spans = session->annotations();
        QVERIFY(!spans.empty());
        std::vector<int64_t> marks;
        for (const auto& span : spans) {
            marks.push_back(span.begin);
            marks.push_back(span.end);
        }
        std::sort(marks.begin(), marks.end());
        const int64_t next = *std::upper_bound(marks.begin(), marks.end(), int64_t(1));
        QTest::keyClick(&window, Qt::Key_PageDown);
        QCOMPARE(session->cursor(), next);
        QTest::keyClick(&window, Qt::Key_PageUp);
        QCOMPARE(session->cursor(),
                 marks.front() < next ? *std::prev(std::lower_bound(marks.begin(), marks.end(), next)) : int64_t(0));
        QTest::keyClick(&window, Qt::Key_End);
        QCOMPARE(session->cursor(), n);
        // The state the views draw is the replay's state at the cursor.
        session->setCursor(n / 2);
        QCOMPARE(session->state().index, n / 2);
        QCOMPARE(session->state().blocks.size(), session->replay().stateAt(n / 2).blocks.size());
    }

    void exportsPngAndSvg()
    {
        MainWindow window;
        window.show();
        QVERIFY(loadAndWait(window, snapshot("multistream.pickle")));
        QTemporaryDir dir;
        const QString png = dir.filePath(QStringLiteral("view.png"));
        const QString svg = dir.filePath(QStringLiteral("view.svg"));
        QCOMPARE(window.exportView(png), QString());
        QCOMPARE(window.exportView(svg), QString());
        const QImage image(png);
        QVERIFY(!image.isNull());
        QVERIFY(colourVariety(image) > 3);
        // At 2x: the same view, twice the pixels each way, as detailed (not a blown-up copy).
        const QString png2 = dir.filePath(QStringLiteral("view@2x.png"));
        QCOMPARE(window.exportView(png2, nullptr, 2.0), QString());
        const QImage image2(png2);
        QCOMPARE(image2.size(), image.size() * 2);
        QVERIFY(colourVariety(image2) >= colourVariety(image));
        QFile f(svg);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray xml = f.readAll();
        QVERIFY(xml.contains("<svg") && xml.contains("</svg>"));
        // A path that cannot be written gives an error naming it.
        const QString bad = dir.filePath(QStringLiteral("no/such/dir/view.png"));
        QVERIFY(window.exportView(bad).startsWith(bad));
    }

    void screenshotCommandRendersEveryView_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("view");
        const char* files[]
            = { "mlp_train.pickle",       "transformer_train.pickle", "expandable_segments.pickle", "oom.pickle",
                "multistream.pickle",     "cudagraph.pickle",         "diff_before.pickle",         "diff_after.pickle",
                "scripted_allocs.pickle", "two_device.pickle",        "big_trace.pickle.xz" };
        for (const char* f : files)
            for (const char* v : { "timeline", "segments", "tree", "events", "overview" })
                QTest::addRow("%s %s", f, v) << snapshot(f) << QString::fromLatin1(v);
        // The wider corpus (tests/data/corpus/README.md): torch.compile, a GPT-2, every allocator setting.
        const QDir corpus(QString::fromStdString(memscope::test::dataPath("corpus")));
        for (const QString& f : corpus.entryList({ QStringLiteral("*.pickle") }, QDir::Files, QDir::Name))
            for (const char* v : { "timeline", "segments", "tree", "events", "overview" })
                QTest::addRow("corpus %s %s", qPrintable(f), v) << corpus.filePath(f) << QString::fromLatin1(v);
    }

    void screenshotCommandRendersEveryView()
    {
        QFETCH(QString, file);
        QFETCH(QString, view);
        const QString out = memscope::test::screenshotDir() + QLatin1Char('/') + QFileInfo(file).baseName()
            + QLatin1Char('-') + view + QLatin1String(".png");
        QFile::remove(out);
        QProcess p;
        p.start(QCoreApplication::applicationDirPath() + QLatin1String("/memscope"),
                { QStringLiteral("--screenshot"), out, QStringLiteral("--view"), view, file });
        QVERIFY(p.waitForFinished(120'000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        const QImage image(out);
        QVERIFY(!image.isNull());
        QVERIFY2(colourVariety(image) > 4, qPrintable(out));
    }

    void baselineAndCompare()
    {
        MainWindow window;
        window.show();
        QVERIFY(loadAndWait(window, memscope::app::bundledSamplePath()));
        DocumentWindow* doc = window.currentDocument();
        doc->session()->setCursor(1000);
        window.findChild<QAction*>(QStringLiteral("setBaselineAction"))->trigger();
        QVERIFY(window.hasBaseline());
        QCOMPARE(window.baseline().index, int64_t(1000));
        doc->session()->setCursor(4000);
        window.findChild<QAction*>(QStringLiteral("compareBaselineAction"))->trigger();
        QCOMPARE(window.documentCount(), 2);
        auto* diff = window.currentDiff();
        QVERIFY(diff);
        QVERIFY(diff->session()->sameDocument());
        QCOMPARE(diff->session()->sideA().index, int64_t(1000));
        QCOMPARE(diff->session()->sideB().index, int64_t(4000));
        QVERIFY(diff->session()->result().sameTrace);
        QVERIFY(diff->timeline());
        QCOMPARE(window.windowTitle(),
                 QStringLiteral("memscope — Δ transformer_train.pickle@1000 → transformer_train.pickle@4000"));
        // Export works on diff tabs too.
        QTemporaryDir dir;
        QCOMPARE(window.exportView(dir.filePath(QStringLiteral("diff.png"))), QString());
    }

    void openDiffAndRankGroup()
    {
        MainWindow window;
        window.show();
        QSignalSpy spy(&window, &MainWindow::loadFinished);
        window.openDiff(snapshot("diff_before.pickle"), snapshot("diff_after.pickle"));
        QVERIFY(spy.wait(60'000));
        QCOMPARE(spy.takeFirst().at(0).toBool(), true);
        QVERIFY(window.currentDiff());
        QCOMPARE(window.currentDiff()->proxy()->index(0, 0).data().toString(),
                 QStringLiteral("gen_snapshots.py:126:step"));
        window.openRankGroup({ snapshot("diff_before.pickle"), snapshot("diff_after.pickle"), snapshot("oom.pickle") });
        QVERIFY(spy.wait(60'000));
        QCOMPARE(spy.takeFirst().at(0).toBool(), true);
        auto* ranks = window.currentRankGroup();
        QVERIFY(ranks);
        const int tabs = window.documentCount();
        ranks->diffAgainstMedian(ranks->group().outlier);
        QCOMPARE(window.documentCount(), tabs + 1);
        QVERIFY(window.currentDiff());
        // A missing file fails the whole diff with its error, and opens no tab.
        window.openDiff(snapshot("diff_before.pickle"), QStringLiteral("/nonexistent.pickle"));
        QVERIFY(spy.wait(60'000));
        QCOMPARE(spy.takeFirst().at(0).toBool(), false);
        QVERIFY(window.errorText().startsWith(QLatin1String("/nonexistent.pickle: ")));
        QCOMPARE(window.documentCount(), tabs + 1);
    }

    void diffScreenshotCommand_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("name");
        const QString before = snapshot("diff_before.pickle"), after = snapshot("diff_after.pickle");
        for (const char* v : { "diff-summary", "diff-tree", "diff-flame", "diff-segments" })
            QTest::addRow("--diff %s", v) << QStringList { QStringLiteral("--diff"), before, after,
                                                           QStringLiteral("--view"), QString::fromLatin1(v) }
                                          << QStringLiteral("cli-") + QString::fromLatin1(v);
        QTest::newRow("--ranks") << QStringList { QStringLiteral("--ranks"),
                                                  before,
                                                  after,
                                                  snapshot("oom.pickle"),
                                                  snapshot("multistream.pickle"),
                                                  QStringLiteral("--view"),
                                                  QStringLiteral("ranks") }
                                 << QStringLiteral("cli-ranks");
    }

    void diffScreenshotCommand()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, name);
        const QString out = memscope::test::screenshotDir() + QLatin1Char('/') + name + QLatin1String(".png");
        QFile::remove(out);
        QProcess p;
        p.start(QCoreApplication::applicationDirPath() + QLatin1String("/memscope"),
                QStringList { QStringLiteral("--screenshot"), out } + args);
        QVERIFY(p.waitForFinished(120'000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        const QImage image(out);
        QVERIFY(!image.isNull());
        QVERIFY2(colourVariety(image) > 4, qPrintable(out));
    }

    void screenshotCommandRejectsBadArguments_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("status");
        QTest::addColumn<QString>("reason");
        QTest::newRow("unknown view") << QStringList { QStringLiteral("--screenshot"), QStringLiteral("x.png"),
                                                       QStringLiteral("--view"), QStringLiteral("pie"),
                                                       snapshot("oom.pickle") }
                                      << 2 << "unknown view 'pie'";
        QTest::newRow("bad index") << QStringList { QStringLiteral("--screenshot"), QStringLiteral("x.png"),
                                                    QStringLiteral("--at"), QStringLiteral("-3"),
                                                    snapshot("oom.pickle") }
                                   << 2 << "--at -3: no annotation named '-3'";
        QTest::newRow("no second OOM") << QStringList { QStringLiteral("--screenshot"), QStringLiteral("x.png"),
                                                        QStringLiteral("--at"), QStringLiteral("oom2"),
                                                        snapshot("oom.pickle") }
                                       << 2 << "--at oom2: the trace has 1 OOM, not 2";
        QTest::newRow("index beyond the trace")
            << QStringList { QStringLiteral("--screenshot"), QStringLiteral("x.png"), QStringLiteral("--at"),
                             QStringLiteral("78"), snapshot("oom.pickle") }
            << 2 << "index 78 is beyond the trace (77 entries)";
        QTest::newRow("bad size") << QStringList { QStringLiteral("--screenshot"), QStringLiteral("x.png"),
                                                   QStringLiteral("--size"), QStringLiteral("big"),
                                                   snapshot("oom.pickle") }
                                  << 2 << "--size needs WIDTHxHEIGHT";
        QTest::newRow("missing file") << QStringList { QStringLiteral("--screenshot"), QStringLiteral("x.png"),
                                                       QStringLiteral("/nonexistent.pickle") }
                                      << 1 << "/nonexistent.pickle: ";
        QTest::newRow("--diff with one file")
            << QStringList { QStringLiteral("--diff"), snapshot("oom.pickle") } << 2 << "--diff takes two files";
        QTest::newRow("--diff, timeline of two files")
            << QStringList { QStringLiteral("--screenshot"),  QStringLiteral("x.png"),  QStringLiteral("--view"),
                             QStringLiteral("diff-timeline"), QStringLiteral("--diff"), snapshot("diff_before.pickle"),
                             snapshot("diff_after.pickle") }
            << 2 << "diff-timeline needs both sides from one file";
        QTest::newRow("--diff, unknown view")
            << QStringList { QStringLiteral("--screenshot"), QStringLiteral("x.png"),  QStringLiteral("--view"),
                             QStringLiteral("pie"),          QStringLiteral("--diff"), snapshot("diff_before.pickle"),
                             snapshot("diff_after.pickle") }
            << 2 << "unknown view 'pie'";
    }

    void screenshotCommandRejectsBadArguments()
    {
        QFETCH(QStringList, args);
        QFETCH(int, status);
        QFETCH(QString, reason);
        QProcess p;
        p.start(QCoreApplication::applicationDirPath() + QLatin1String("/memscope"), args);
        QVERIFY(p.waitForFinished(60'000));
        QCOMPARE(p.exitCode(), status);
        QVERIFY2(p.readAllStandardError().contains(reason.toUtf8()), qPrintable(reason));
    }
};

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"
