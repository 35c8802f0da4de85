// memscope's entry point: `memscope [FILE]` opens FILE (or the bundled sample) in the main window;
// `memscope --screenshot OUT.png [FILE]` renders the loaded window into OUT.png and exits (0, or 1 with the error on
// stderr). Runs on the GUI thread.
#include "ingest/resources.h"
#include "views/mainwindow.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QEventLoop>
#include <QIcon>
#include <QPixmap>

#include <cstdio>

namespace {

void printError(const QString& message) { std::fprintf(stderr, "memscope: %s\n", qPrintable(message)); }

int takeScreenshot(memscope::app::MainWindow& window, const QString& path, const QString& out)
{
    // Laid out and rendered like a shown window, but never mapped on a real screen.
    window.setAttribute(Qt::WA_DontShowOnScreen);
    window.resize(1000, 700);
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
    QCoreApplication::sendPostedEvents(); // pending layout requests, so the grab shows the final geometry
    if (!window.grab().save(out)) {
        printError(out + QStringLiteral(": cannot write the screenshot"));
        return 1;
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("memscope"));
    QApplication::setApplicationVersion(QStringLiteral(MEMSCOPE_VERSION));
    memscope::app::initResources();
    QApplication::setWindowIcon(QIcon(memscope::app::iconPath()));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("GPU memory inspector for PyTorch memory snapshots"));
    parser.addHelpOption();
    parser.addVersionOption();
    const QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                        QStringLiteral("Render the window with FILE loaded into <png>, then exit."),
                                        QStringLiteral("png"));
    parser.addOption(screenshot);
    parser.addPositionalArgument(QStringLiteral("FILE"),
                                 QStringLiteral("Snapshot to open (pickle or JSON, optionally .xz); without it, "
                                                "the bundled sample."),
                                 QStringLiteral("[FILE]"));
    parser.process(app);

    const QStringList files = parser.positionalArguments();
    if (files.size() > 1) {
        printError(QStringLiteral("expected at most one FILE; see --help"));
        return 2;
    }
    const QString path = files.isEmpty() ? memscope::app::bundledSamplePath() : files.first();

    memscope::app::MainWindow window;
    if (parser.isSet(screenshot))
        return takeScreenshot(window, path, parser.value(screenshot));
    window.show();
    window.openFile(path);
    return QApplication::exec();
}
