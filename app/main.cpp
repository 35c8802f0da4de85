// memscope's entry point: `memscope [FILE...]` opens each FILE in a tab (the bundled sample when none is given);
// `memscope --screenshot OUT.png [--view timeline|segments|tree|events|overview|insights] [--at MOMENT]
// [--size WxH] [FILE]` renders the window, or one view, with FILE loaded and the cursor at MOMENT (an index, peak,
// oom, largest, an annotation: model/landmarks.h) into OUT.png (or .svg) and exits: 0, 1 with the
// error on stderr when loading or writing fails, 2 for a bad command line. `memscope --diff A B` opens a diff tab of
// two files, `memscope --ranks FILE...` a rank group; with --screenshot, --view then names a diff view (diff-summary,
// diff-tree, diff-flame, diff-segments, diff-timeline) or `ranks`. `--help` and `--version` need no display (a
// QCoreApplication answers them). Interactive runs quit cleanly on SIGINT, SIGTERM and SIGHUP (live tabs stopped, a
// --demo job ended). Runs on the GUI thread.
#include "ingest/demojob.h"
#include "ingest/resources.h"
#include "itemmodels/insightsmodel.h"
#include "model/processmemory.h"
#include "views/diffwindow.h"
#include "views/livewindow.h"
#include "views/mainwindow.h"
#include "views/rankgroupview.h"
#include "views/timelineview.h"
#include "views/whatifview.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QEventLoop>
#include <QIcon>
#include <QTimer>

#include <QSocketNotifier>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

namespace {

// --help, --version (QCommandLineParser's addHelpOption and addVersionOption): answered without a display.
bool onlyAsksForInformation(int argc, char** argv)
{
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--")
            return false;
        if (a == "-h" || a == "--help" || a == "--help-all" || a == "-v" || a == "--version")
            return true;
    }
    return false;
}

// What Qt prints that a memscope user can do nothing about, dropped by exact text; everything else goes to Qt's
// own handler. Both come from qWarning() in the default category, so no QLoggingCategory rule can single them out.
QtMessageHandler g_qtHandler = nullptr;
bool g_headless = false;

void messageFilter(QtMsgType type, const QMessageLogContext& context, const QString& message)
{
    // QPlatformWindow::propagateSizeHints() (qplatformwindow.cpp): the offscreen and minimal platforms do not
    // implement it and say so each time a window's size limits change.
    if (type == QtWarningMsg && message == QLatin1String("This plugin does not support propagateSizeHints()"))
        return;
    // QStandardPaths::writableLocation(RuntimeLocation) (qstandardpaths_unix.cpp) when XDG_RUNTIME_DIR is unset, as
    // in a batch job or a container: a headless screenshot has no use for it.
    if (g_headless && type == QtWarningMsg
        && message.startsWith(QLatin1String("QStandardPaths: XDG_RUNTIME_DIR not set")))
        return;
    if (g_qtHandler)
        g_qtHandler(type, context, message);
}

// SIGINT, SIGTERM and SIGHUP close the windows as File ▸ Quit does: a signal handler may only write(2), so it
// writes to a pipe the event loop watches (Qt's "Calling Qt Functions From Unix Signal Handlers",
// doc.qt.io/qt-6/unix-signals.html).
int g_signalPipe[2] = { -1, -1 };

void onQuitSignal(int)
{
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(g_signalPipe[1], &byte, 1);
}

void quitOnSignals(QObject* context)
{
    if (::pipe2(g_signalPipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return; // no clean quit on signals: they end the process as before
    auto* notifier = new QSocketNotifier(g_signalPipe[0], QSocketNotifier::Read, context);
    QObject::connect(notifier, &QSocketNotifier::activated, context, [] {
        char buffer[16];
        while (::read(g_signalPipe[0], buffer, sizeof buffer) > 0) {
        }
        QApplication::closeAllWindows();
        QCoreApplication::quit();
    });
    struct sigaction action {};
    action.sa_handler = onQuitSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int number : { SIGINT, SIGTERM, SIGHUP })
        sigaction(number, &action, nullptr);
}

void printError(const QString& message) { std::fprintf(stderr, "memscope: %s\n", qPrintable(message)); }

// Waits for `signal` of `sender` unless `done` already holds; at most 120 s.
template <typename Object, typename Signal> void waitFor(Object* sender, Signal signal, bool done)
{
    if (done)
        return;
    QEventLoop wait;
    QObject::connect(sender, signal, &wait, &QEventLoop::quit);
    QTimer::singleShot(120000, &wait, &QEventLoop::quit);
    wait.exec();
}

int takeScreenshot(memscope::app::MainWindow& window, const QString& path, const QString& out,
                   std::optional<memscope::app::DocumentWindow::View> view, const QString& at, QSize size,
                   QSize viewSize, const QString& whatIf)
{
    // Laid out and rendered like a shown window, but never mapped on a real screen.
    window.setAttribute(Qt::WA_DontShowOnScreen);
    window.resize(size);
    window.show();

    QEventLoop loop;
    bool ok = false;
    QObject::connect(&window, &memscope::app::MainWindow::loadFinished, &loop, [&](bool loaded) {
        ok = loaded;
        loop.quit();
    });
    window.openFile(path);
    loop.exec();
    if (!ok) {
        printError(window.errorText());
        return 1;
    }
    auto* doc = window.currentDocument();
    // The insights are computed in the background: wait for them, so the picture shows them.
    if (doc->insights()->isComputing()) {
        QEventLoop wait;
        QObject::connect(doc->insights(), &memscope::app::InsightsModel::computed, &wait, &QEventLoop::quit);
        wait.exec();
    }
    // A file's what-if suggestion joins the insights a moment later: the picture shows it.
    waitFor(doc, &memscope::app::DocumentWindow::suggestionDone, !doc->isSuggesting());
    if (!at.isEmpty()) {
        // --at takes what Go ▸ takes: an index, end, peak, peak-reserved, oom, oomN, largest or an annotation name.
        const auto moment = memscope::model::parseMoment(at.toStdString());
        const QString error = moment ? doc->goTo(*moment) : QStringLiteral("no moment given");
        if (!error.isEmpty()) {
            printError(QStringLiteral("--at %1: %2").arg(at, error));
            return 2;
        }
    }
    if (view == memscope::app::DocumentWindow::View::WhatIf && whatIf.isEmpty() && doc->whatIfView())
        doc->showWhatIf(doc->suggestedSettings().isEmpty() ? QStringLiteral("expandable_segments:True")
                                                            : doc->suggestedSettings());
    else if (!whatIf.isEmpty())
        doc->showWhatIf(whatIf);
    if (auto* panel = doc->whatIfView(); panel && (view == memscope::app::DocumentWindow::View::WhatIf || !whatIf.isEmpty())) {
        waitFor(panel, &memscope::app::WhatIfView::resultShown, false);
        if (panel->result() && panel->result()->ok && doc->session()->cursor() > 0)
            waitFor(panel, &memscope::app::WhatIfView::segmentsShown, false);
    }
    QWidget* target = nullptr;
    if (view) {
        target = doc->view(*view);
        if (!target) {
            printError(QStringLiteral("%1: no such view for this file").arg(memscope::app::DocumentWindow::viewName(*view)));
            return 2;
        }
        // A view alone, at a size that shows it well, outside the window's layout.
        target->setParent(nullptr);
        target->setAttribute(Qt::WA_DontShowOnScreen);
        target->resize(viewSize);
        target->show();
    }
    // The timelines build their data in the background: the picture shows it finished.
    memscope::app::finishTimelineBuilds(&window);
    memscope::app::finishTimelineBuilds(target);
    QCoreApplication::sendPostedEvents(); // pending layout requests, so the grab shows the final geometry
    QCoreApplication::processEvents();
    // The overview's largest-free line comes with the replays' labels, a moment after the rest: a picture that
    // shows the overview waits for them. Asked once the layout is in place, and of what is shown of it: a dock that is
    // a tab behind another counts as visible, with nothing of it on the screen.
    if (QWidget* overview = doc->view(memscope::app::DocumentWindow::View::Overview);
        overview == target || !overview->visibleRegion().isEmpty()) {
        doc->session()->waitForLabels();
        QCoreApplication::sendPostedEvents();
        QCoreApplication::processEvents();
    }
    memscope::app::finishTimelineBuilds(&window); // their plots at that geometry (exportView finishes its view's)
    const QString error = target ? window.exportView(out, target)
                                 : (window.grab().save(out) ? QString() : out + QStringLiteral(": cannot write the screenshot"));
    if (target)
        delete target;
    if (!error.isEmpty()) {
        printError(error);
        return 1;
    }
    return 0;
}

// --diff / --ranks with --screenshot: load the group, then render the diff tab's view (or the rank table).
int takeGroupScreenshot(memscope::app::MainWindow& window, bool ranks, const QStringList& files, const QString& out,
                        const QString& viewName, QSize size, QSize viewSize)
{
    using memscope::app::DiffWindow;
    std::optional<DiffWindow::View> view;
    if (!viewName.isEmpty() && viewName != QLatin1String("ranks")) {
        view = DiffWindow::viewFromName(viewName);
        if (!view) {
            printError(QStringLiteral("unknown view '%1': with --diff use diff-summary, diff-tree, diff-flame, "
                                      "diff-segments or diff-timeline; with --ranks, ranks")
                           .arg(viewName));
            return 2;
        }
    }
    window.setAttribute(Qt::WA_DontShowOnScreen);
    window.resize(size);
    window.show();
    QEventLoop loop;
    bool ok = false;
    QObject::connect(&window, &memscope::app::MainWindow::loadFinished, &loop, [&](bool loaded) {
        ok = loaded;
        loop.quit();
    });
    if (ranks)
        window.openRankGroup(files);
    else
        window.openDiff(files[0], files[1]);
    loop.exec();
    if (!ok) {
        printError(window.errorText());
        return 1;
    }
    QWidget* target = nullptr;
    if (auto* diff = window.currentDiff()) {
        if (view) {
            target = diff->view(*view);
            if (!target) {
                printError(QStringLiteral("%1 needs both sides from one file (e.g. FILE@INDEX twice)").arg(viewName));
                return 2;
            }
            diff->showView(*view);
            // The whole diff tab (toolbar, sides, tabs) shows what is compared.
            target = diff;
        }
    } else if (auto* group = window.currentRankGroup()) {
        target = group;
    }
    if (target) {
        target->setParent(nullptr);
        target->setAttribute(Qt::WA_DontShowOnScreen);
        target->resize(viewSize);
        target->show();
    }
    memscope::app::finishTimelineBuilds(&window);
    memscope::app::finishTimelineBuilds(target);
    QCoreApplication::sendPostedEvents();
    QCoreApplication::processEvents();
    memscope::app::finishTimelineBuilds(&window); // their plots at the final geometry (exportView finishes its view's)
    const QString error = target ? window.exportView(out, target)
                                 : (window.grab().save(out) ? QString() : out + QStringLiteral(": cannot write the screenshot"));
    delete target;
    if (!error.isEmpty()) {
        printError(error);
        return 1;
    }
    return 0;
}

// --attach with --screenshot: record until every job says goodbye (or `seconds` pass, then stop), wait until all
// is shown, render the window (with several endpoints: the Ranks tab).
int takeLiveScreenshot(memscope::app::MainWindow& window, const QStringList& endpoints, const QString& out,
                       double seconds, QSize size)
{
    using memscope::app::LiveController;
    using memscope::app::LiveState;
    using memscope::app::LiveWindow;
    window.setAttribute(Qt::WA_DontShowOnScreen);
    window.resize(size);
    window.show();
    std::vector<LiveWindow*> lives;
    if (endpoints.size() == 1) {
        lives.push_back(window.openLive(endpoints.front(), false));
    } else {
        window.openLiveGroup(endpoints, false);
        for (LiveWindow* live : window.findChildren<LiveWindow*>())
            lives.push_back(live);
    }
    QEventLoop loop;
    auto allSettled = [&] {
        return std::all_of(lives.begin(), lives.end(), [](LiveWindow* l) { return l->controller()->isSettled(); });
    };
    for (LiveWindow* live : lives)
        QObject::connect(live->controller(), &LiveController::settled, &loop, [&] {
            if (allSettled())
                loop.quit();
        });
    QTimer::singleShot(int(seconds * 1000), &loop, [&] {
        for (LiveWindow* live : lives)
            live->controller()->stop();
    });
    if (!allSettled())
        loop.exec();
    for (LiveWindow* live : lives) {
        const memscope::app::LiveUpdate& last = live->controller()->receiver()->latest();
        if (last.state == LiveState::Failed) {
            printError(last.message);
            return 1;
        }
        if (!live->documentWindow()) {
            printError(QStringLiteral("%1: nothing recorded in %2 s").arg(live->controller()->endpoint()).arg(seconds));
            return 1;
        }
    }
    // The group's table refreshes on a timer: let it take the final figures in.
    if (lives.size() > 1)
        {
            QEventLoop settle;
            QTimer::singleShot(700, &settle, &QEventLoop::quit);
            settle.exec();
        }
    memscope::app::finishTimelineBuilds(&window);
    QCoreApplication::sendPostedEvents();
    QCoreApplication::processEvents();
    memscope::app::finishTimelineBuilds(&window); // their plots at the final geometry
    if (!window.grab().save(out)) {
        printError(out + QStringLiteral(": cannot write the screenshot"));
        return 1;
    }
    for (LiveWindow* live : lives)
        std::printf("%s\n", qPrintable(live->controller()->statusText()));
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    memscope::model::tuneProcessMemory(argv); // first: it may execute the program again (model/processmemory.h)
    // --screenshot renders headless: use the offscreen platform unless the caller chose one.
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--screenshot") == 0) {
            g_headless = true;
            if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
                qputenv("QT_QPA_PLATFORM", "offscreen");
        }
    }
    g_qtHandler = qInstallMessageHandler(messageFilter);
    // --help and --version print and exit in parser.process() below, before anything needs a display.
    const bool gui = !onlyAsksForInformation(argc, argv);
    const std::unique_ptr<QCoreApplication> app
        = gui ? std::make_unique<QApplication>(argc, argv) : std::make_unique<QCoreApplication>(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("memscope"));
    QCoreApplication::setOrganizationName(QStringLiteral("memscope"));
    QCoreApplication::setApplicationVersion(QStringLiteral(MEMSCOPE_VERSION));
    if (gui) {
        memscope::app::initResources();
        QApplication::setWindowIcon(QIcon(memscope::app::iconPath()));
    }

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("GPU memory inspector for PyTorch memory snapshots"));
    parser.addHelpOption();
    parser.addVersionOption();
    const QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                        QStringLiteral("Render the window (or --view) with FILE loaded into <out> "
                                                       "(.png or .svg), then exit."),
                                        QStringLiteral("out"));
    const QCommandLineOption viewOption(QStringLiteral("view"),
                                        QStringLiteral("With --screenshot: only this view: timeline, segments, tree, "
                                                       "events, overview, insights or whatif."),
                                        QStringLiteral("name"));
    const QCommandLineOption whatIfOption(QStringLiteral("whatif"),
                                          QStringLiteral("Open the What-if panel replaying the file's job under these "
                                                         "allocator settings (PYTORCH_CUDA_ALLOC_CONF syntax)."),
                                          QStringLiteral("settings"));
    const QCommandLineOption atOption(QStringLiteral("at"),
                                      QStringLiteral("With --screenshot: put the cursor there: a state index, end, "
                                                     "peak, peak-reserved, oom, oomN, largest or a record_function "
                                                     "name (NAME:end: its end)."),
                                      QStringLiteral("moment"));
    const QCommandLineOption sizeOption(QStringLiteral("size"),
                                        QStringLiteral("With --screenshot: the window's size (default 1600x1000), or a view's alone."),
                                        QStringLiteral("WxH"), QStringLiteral("1600x1000"));
    const QCommandLineOption diffOption(QStringLiteral("diff"),
                                        QStringLiteral("Open a diff of the two FILEs (A then B) instead of tabs."));
    const QCommandLineOption ranksOption(QStringLiteral("ranks"),
                                         QStringLiteral("Open the FILEs as the ranks of one distributed job."));
    const QCommandLineOption attachOption(QStringLiteral("attach"),
                                          QStringLiteral("Record a running job live from its agent's endpoint "
                                                         "(ipc://PATH or tcp://HOST:PORT). Repeat it for several "
                                                         "jobs (the ranks of one job): a tab each and a Ranks tab."),
                                          QStringLiteral("endpoint"));
    const QCommandLineOption attachSecondsOption(QStringLiteral("attach-seconds"),
                                                 QStringLiteral("With --attach and --screenshot: record at most this "
                                                                "long (default 5) unless the job exits first."),
                                                 QStringLiteral("seconds"), QStringLiteral("5"));
    const QCommandLineOption demoOption(QStringLiteral("demo"),
                                        QStringLiteral("Start a demo job (memscope-cli demo: a training-like workload "
                                                       "on memscope's allocator, no GPU needed) and attach to it."));
    const QCommandLineOption demoRateOption(QStringLiteral("demo-rate"),
                                            QStringLiteral("With --demo: allocator events per second (default "
                                                           "20000)."),
                                            QStringLiteral("events"), QStringLiteral("20000"));
    const QCommandLineOption serverKeyOption(QStringLiteral("curve-server-key"),
                                             QStringLiteral("With --attach: the agent's CURVE public key file (for "
                                                            "agents on remote tcp:// endpoints)."),
                                             QStringLiteral("file"));
    const QCommandLineOption secretKeyOption(QStringLiteral("curve-key"),
                                             QStringLiteral("With --attach: your CURVE secret key file "
                                                            "(memscope-cli keygen NAME writes one)."),
                                             QStringLiteral("file"));
    parser.addOption(serverKeyOption);
    parser.addOption(secretKeyOption);
    parser.addOption(demoOption);
    parser.addOption(demoRateOption);
    parser.addOption(attachOption);
    parser.addOption(attachSecondsOption);
    parser.addOption(diffOption);
    parser.addOption(ranksOption);
    parser.addOption(screenshot);
    parser.addOption(viewOption);
    parser.addOption(whatIfOption);
    parser.addOption(atOption);
    parser.addOption(sizeOption);
    parser.addPositionalArgument(QStringLiteral("FILE"),
                                 QStringLiteral("Snapshots to open (pickle or JSON, optionally .xz); without any, "
                                                "the bundled sample."),
                                 QStringLiteral("[FILE...]"));
    parser.process(*app);
    if (!gui) // (process() has answered --help or --version and exited)
        return 0;
    // --size: the window's size for every kind of screenshot; a view rendered alone takes it too when given.
    const QStringList wh = parser.value(sizeOption).split(QLatin1Char('x'));
    const QSize size = wh.size() == 2 ? QSize(wh[0].toInt(), wh[1].toInt()) : QSize();
    if (size.width() < 320 || size.height() < 240 || size.width() > 8192 || size.height() > 8192) {
        printError(QStringLiteral("--size needs WIDTHxHEIGHT (320x240 to 8192x8192), not '%1'")
                       .arg(parser.value(sizeOption)));
        return 2;
    }
    const QSize viewSize = parser.isSet(sizeOption) ? size : QSize(1400, 800);

    // --demo: start the demo job, then attach to it as --attach does.
    memscope::app::DemoJob demo;
    QString demoEndpoint;
    if (parser.isSet(demoOption)) {
        bool ok = false;
        const qulonglong rate = parser.value(demoRateOption).toULongLong(&ok);
        if (!ok || rate == 0 || rate > 100000000) {
            printError(QStringLiteral("--demo-rate needs a number of events per second (1 to 100000000), not '%1'")
                           .arg(parser.value(demoRateOption)));
            return 2;
        }
        QString failure;
        QEventLoop wait;
        QObject::connect(&demo, &memscope::app::DemoJob::ready, &wait, &QEventLoop::quit);
        QObject::connect(&demo, &memscope::app::DemoJob::failed, &wait, [&](const QString& message) {
            failure = message;
            wait.quit();
        });
        QTimer::singleShot(10000, &wait, [&] {
            failure = QStringLiteral("memscope-cli demo: no endpoint within 10 s");
            wait.quit();
        });
        // Long enough to watch (rate × 3 hours at most); the job leaks a little per step so that the timeline climbs.
        demo.start({ QStringLiteral("--rate"), QString::number(rate), QStringLiteral("--events"),
                     QString::number(std::min<qulonglong>(rate * 10800, 2000000000ull)), QStringLiteral("--delay"),
                     QStringLiteral("300"), QStringLiteral("--leak") });
        if (demo.endpoint().isEmpty() && failure.isEmpty())
            wait.exec();
        if (demo.endpoint().isEmpty()) {
            printError(failure);
            return 1;
        }
        demoEndpoint = demo.endpoint();
    }

    if (parser.isSet(attachOption) || !demoEndpoint.isEmpty()) {
        memscope::app::MainWindow window;
        const QStringList endpoints = demoEndpoint.isEmpty() ? parser.values(attachOption) : QStringList { demoEndpoint };
        if (parser.isSet(screenshot)) {
            bool ok = false;
            const double seconds = parser.value(attachSecondsOption).toDouble(&ok);
            if (!ok || seconds <= 0 || seconds > 86400) {
                printError(QStringLiteral("--attach-seconds needs a positive number of seconds, not '%1'")
                               .arg(parser.value(attachSecondsOption)));
                return 2;
            }
            return takeLiveScreenshot(window, endpoints, parser.value(screenshot), seconds, size);
        }
        window.show();
        quitOnSignals(&window);
        const QString serverKey = parser.value(serverKeyOption), secretKey = parser.value(secretKeyOption);
        if (endpoints.size() == 1)
            window.openLive(endpoints.front(), true, serverKey, secretKey);
        else
            window.openLiveGroup(endpoints, true, serverKey, secretKey);
        return QApplication::exec();
    }

    QStringList files = parser.positionalArguments();
    const bool diff = parser.isSet(diffOption), ranks = parser.isSet(ranksOption);
    if (diff && ranks) {
        printError(QStringLiteral("--diff and --ranks exclude each other; see --help"));
        return 2;
    }
    if (diff && files.size() != 2) {
        printError(QStringLiteral("--diff takes two files, A and B; see --help"));
        return 2;
    }
    if (ranks && files.isEmpty()) {
        printError(QStringLiteral("--ranks takes the snapshot files of the ranks; see --help"));
        return 2;
    }
    if (files.isEmpty())
        files << memscope::app::bundledSamplePath();

    memscope::app::MainWindow window;
    if (diff || ranks) {
        if (parser.isSet(screenshot))
            return takeGroupScreenshot(window, ranks, files, parser.value(screenshot), parser.value(viewOption), size,
                                       viewSize);
        window.show();
        quitOnSignals(&window);
        if (ranks)
            window.openRankGroup(files);
        else
            window.openDiff(files[0], files[1]);
        return QApplication::exec();
    }
    if (parser.isSet(screenshot)) {
        if (files.size() > 1) {
            printError(QStringLiteral("--screenshot takes one FILE; see --help"));
            return 2;
        }
        std::optional<memscope::app::DocumentWindow::View> view;
        if (parser.isSet(viewOption)) {
            view = memscope::app::DocumentWindow::viewFromName(parser.value(viewOption));
            if (!view) {
                printError(
                    QStringLiteral("unknown view '%1': use timeline, segments, tree, events, overview, insights or "
                                   "whatif")
                        .arg(parser.value(viewOption)));
                return 2;
            }
        }
        return takeScreenshot(window, files.first(), parser.value(screenshot), view, parser.value(atOption), size,
                              viewSize, parser.value(whatIfOption));
    }
    window.show();
    quitOnSignals(&window);
    window.openFiles(files);
    if (parser.isSet(whatIfOption)) {
        const QString settings = parser.value(whatIfOption);
        QObject::connect(&window, &memscope::app::MainWindow::loadFinished, &window, [&window, settings](bool ok) {
            if (auto* doc = window.currentDocument(); ok && doc)
                doc->showWhatIf(settings);
        }, Qt::SingleShotConnection);
    }
    return QApplication::exec();
}
