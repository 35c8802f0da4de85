// MainWindow end to end: the bundled sample loads (on the thread pool) and its summary shows the right numbers; bad
// files show an error naming the file and the reason, and never a summary. Runs offscreen on the GUI thread.
#include "ingest/resources.h"
#include "views/mainwindow.h"

#include <QFile>
#include <QLabel>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTreeWidget>

using memscope::app::MainWindow;

namespace {

// The value column of the top-level summary row called `name`, or a null QString.
QString summaryValue(const MainWindow& window, const QString& name)
{
    const auto* tree = window.findChild<QTreeWidget*>(QStringLiteral("summaryTree"));
    if (!tree)
        return {};
    for (int i = 0; i < tree->topLevelItemCount(); ++i) {
        if (tree->topLevelItem(i)->text(0) == name)
            return tree->topLevelItem(i)->text(1);
    }
    return {};
}

bool loadAndWait(MainWindow& window, const QString& path)
{
    QSignalSpy spy(&window, &MainWindow::loadFinished);
    window.openFile(path);
    if (!spy.wait(60'000))
        return false;
    return spy.takeFirst().at(0).toBool();
}

} // namespace

class TestMainWindow : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { memscope::app::initResources(); }

    void showsBundledSample()
    {
        MainWindow window;
        window.show();
        QVERIFY(loadAndWait(window, memscope::app::bundledSamplePath()));

        QCOMPARE(window.windowTitle(), QStringLiteral("memscope — transformer_train.pickle"));
        QVERIFY(window.errorText().isEmpty());
        QVERIFY(!window.findChild<QLabel*>(QStringLiteral("errorLabel"))->isVisible());
        QCOMPARE(summaryValue(window, QStringLiteral("File")), QStringLiteral("transformer_train.pickle"));
        QCOMPARE(summaryValue(window, QStringLiteral("Devices")), QStringLiteral("1"));
        // Counted by Python, not by our reader:
        //   python3 -c "import pickle;print(len(pickle.load(open('transformer_train.pickle','rb'))['segments']))"
        // prints 86 for resources/samples/transformer_train.pickle.
        QCOMPARE(summaryValue(window, QStringLiteral("Segments")), QStringLiteral("86"));
        // ../shared/README.md: "11,137 trace entries".
        QCOMPARE(summaryValue(window, QStringLiteral("Trace entries")), QStringLiteral("11,137"));
    }

    void showsErrorForBadFile_data()
    {
        QTest::addColumn<QByteArray>("content"); // null: the file is not created

        QFile sample(memscope::app::bundledSamplePath());
        QVERIFY(sample.open(QIODevice::ReadOnly));
        const QByteArray pickle = sample.readAll();

        QTest::newRow("missing file") << QByteArray();
        QTest::newRow("empty file") << QByteArray("");
        QTest::newRow("plain text") << QByteArray("not a snapshot at all\n");
        QTest::newRow("truncated pickle") << pickle.left(pickle.size() / 2);
    }

    void showsErrorForBadFile()
    {
        QFETCH(QByteArray, content);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString path = dir.filePath(QStringLiteral("bad_snapshot.pickle"));
        if (!content.isNull()) {
            QFile file(path);
            QVERIFY(file.open(QIODevice::WriteOnly));
            QCOMPARE(file.write(content), content.size());
        }

        MainWindow window;
        window.show();
        QVERIFY(!loadAndWait(window, path));

        QCOMPARE(window.windowTitle(), QStringLiteral("memscope — bad_snapshot.pickle"));
        QVERIFY(window.snapshot() == nullptr);
        const QString error = window.errorText();
        QVERIFY2(error.contains(path), qPrintable(error));
        // The reason follows the file name.
        QVERIFY2(error.size() > path.size() + 2, qPrintable(error));
        const auto* label = window.findChild<QLabel*>(QStringLiteral("errorLabel"));
        QVERIFY(label->isVisible());
        QVERIFY(label->text().contains(error));
        QVERIFY(!window.findChild<QTreeWidget*>(QStringLiteral("summaryTree"))->isVisible());
    }

    void latestLoadWins()
    {
        // A load superseded before it finished must not overwrite the newer one.
        MainWindow window;
        QSignalSpy spy(&window, &MainWindow::loadFinished);
        window.openFile(QStringLiteral("/nonexistent/first.pickle"));
        window.openFile(memscope::app::bundledSamplePath());
        QVERIFY(spy.wait(60'000));
        QCOMPARE(spy.size(), 1);
        QVERIFY(spy.at(0).at(0).toBool());
        QTest::qWait(100);
        QCOMPARE(spy.size(), 1);
        QCOMPARE(summaryValue(window, QStringLiteral("Segments")), QStringLiteral("86"));
    }
};

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"
