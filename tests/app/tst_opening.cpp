// Ways to open a snapshot besides the command line: dropping files on the window, and File ▸ Open Recent (a
// QSettings list that survives restarts). Runs offscreen, with its own settings scope.
#include "apptestutil.h"
#include "ingest/resources.h"
#include "views/mainwindow.h"

#include <QAction>
#include <QCoreApplication>
#include <QFile>
#include <QImage>
#include <QProcess>
#include <QMenu>
#include <QMenuBar>
#include <QMimeData>
#include <QSettings>
#include <QSignalSpy>
#include <QTest>
#include <QUrl>

using memscope::app::MainWindow;

namespace {

QString snapshot(const char* name)
{
    return QString::fromStdString(memscope::test::snapshotPath(name));
}

QMenu* recentMenu(MainWindow& window)
{
    for (QAction* a : window.menuBar()->actions()) {
        if (!a->menu())
            continue;
        for (QAction* sub : a->menu()->actions())
            if (sub->menu() && sub->text().contains(QLatin1String("Recent")))
                return sub->menu();
    }
    return nullptr;
}

} // namespace

class TestOpening : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        memscope::app::initResources();
        QCoreApplication::setOrganizationName(QStringLiteral("memscope-tests"));
        QCoreApplication::setApplicationName(QStringLiteral("tst_opening"));
        QSettings().clear();
    }

    void droppedFilesOpenAsTabs()
    {
        MainWindow window;
        window.show();
        QSignalSpy spy(&window, &MainWindow::loadFinished);
        QMimeData mime;
        mime.setUrls({ QUrl::fromLocalFile(snapshot("oom.pickle")), QUrl::fromLocalFile(snapshot("cudagraph.pickle")) });
        QDragEnterEvent enter(QPoint(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QCoreApplication::sendEvent(&window, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QCoreApplication::sendEvent(&window, &drop);
        while (spy.size() < 2)
            QVERIFY(spy.wait(60'000));
        QCOMPARE(window.documentCount(), 2);
    }

    void diffOfTwoMomentsFromTheCommandLine_data()
    {
        QTest::addColumn<QStringList>("sides");
        QTest::addColumn<int>("status");
        QTest::addColumn<QString>("message");
        // transformer_train: step_1 starts near entry 2,083 and step_3 near 5,707 (its record_function annotations).
        QTest::newRow("two moments of one trace, timeline view")
            << QStringList { snapshot("transformer_train.pickle") + QLatin1String("@2083"),
                             snapshot("transformer_train.pickle") + QLatin1String("@5707") }
            << 0 << QString();
        QTest::newRow("an index beyond the trace")
            << QStringList { snapshot("diff_before.pickle") + QLatin1String("@999"), snapshot("diff_after.pickle") }
            << 1 << "index 999 is beyond the trace (136 entries)";
    }

    void diffOfTwoMomentsFromTheCommandLine()
    {
        QFETCH(QStringList, sides);
        QFETCH(int, status);
        QFETCH(QString, message);
        const QString out = memscope::test::screenshotDir() + QLatin1String("/diff-moments-cli-timeline.png");
        QFile::remove(out);
        QProcess p;
        p.start(QCoreApplication::applicationDirPath() + QLatin1String("/memscope"),
                QStringList { QStringLiteral("--diff") } + sides
                    + QStringList { QStringLiteral("--screenshot"), out, QStringLiteral("--view"),
                                    QStringLiteral("diff-timeline") });
        QVERIFY(p.waitForFinished(120'000));
        const QByteArray err = p.readAllStandardError();
        QCOMPARE(p.exitCode(), status);
        if (status == 0)
            QVERIFY(!QImage(out).isNull());
        else
            QVERIFY2(err.contains(message.toUtf8()), err.constData());
    }

    void recentFilesPersistAndReopen()
    {
        QSettings().clear();
        {
            MainWindow window;
            window.show();
            QSignalSpy spy(&window, &MainWindow::loadFinished);
            window.openFile(snapshot("two_device.pickle"));
            QVERIFY(spy.wait(60'000));
            window.openFile(snapshot("oom.pickle"));
            QVERIFY(spy.wait(60'000));
        }
        // Most recent first, stored as absolute paths.
        const QStringList recent = QSettings().value(QStringLiteral("recentFiles")).toStringList();
        QCOMPARE(recent.size(), 2);
        QVERIFY(recent[0].endsWith(QLatin1String("oom.pickle")));
        QVERIFY(recent[1].endsWith(QLatin1String("two_device.pickle")));

        // A new window lists them and reopens one from the menu.
        MainWindow again;
        again.show();
        QMenu* menu = recentMenu(again);
        QVERIFY(menu);
        QCOMPARE(menu->actions().size(), 2);
        QSignalSpy spy(&again, &MainWindow::loadFinished);
        menu->actions().at(1)->trigger();
        QVERIFY(spy.wait(60'000));
        QCOMPARE(again.documentCount(), 1);
        QCOMPARE(again.currentDocument()->session()->devices().size(), size_t(2));
    }
};

QTEST_MAIN(TestOpening)
#include "tst_opening.moc"
