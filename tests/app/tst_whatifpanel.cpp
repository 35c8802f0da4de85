// Tests of the app's what-if (document/whatifanalysis.h, views/whatifview.h) on real files: the suggestion the
// Insights offer is the setting that removes a real job's OOMs, with the figures the engine gives for it; the panel
// replays what the user picks, its summary says what changes, its segments at the cursor add up to the replayed
// curve there, and a file that cannot be replayed says why. Screenshots at 1280x720, 1920x1080 and twice the font
// land in build/screenshots. GUI thread only.
#include "apptestutil.h"
#include "document/whatifanalysis.h"
#include "itemmodels/insightsmodel.h"
#include "views/documentwindow.h"
#include "views/insightsview.h"
#include "views/whatifview.h"

#include <QLabel>
#include <QSignalSpy>
#include <QtTest>

using namespace memscope;
using namespace memscope::app;

namespace {

std::shared_ptr<const Document> document(const std::string& relative)
{
    const std::string path = test::dataPath(relative);
    io::LoadResult r = io::loadSnapshot(path);
    if (!r.ok())
        qFatal("%s", r.error.toString().c_str());
    return makeDocument(QString::fromStdString(path), r.snapshot);
}

std::unique_ptr<DocumentWindow> window(const std::string& relative, QSize size)
{
    auto w = std::make_unique<DocumentWindow>(document(relative));
    w->setAttribute(Qt::WA_DontShowOnScreen);
    w->resize(size);
    w->show();
    if (w->isSuggesting()) {
        QSignalSpy done(w.get(), &DocumentWindow::suggestionDone);
        if (!done.wait(60000))
            qFatal("no what-if suggestion");
    }
    return w;
}

} // namespace

class TestWhatIfPanel : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void suggestionRemovesTheOoms_data();
    void suggestionRemovesTheOoms();
    void panelShowsTheReplay_data();
    void panelShowsTheReplay();
    void unreplayableFileSaysWhy();
};

void TestWhatIfPanel::suggestionRemovesTheOoms_data()
{
    // Real jobs that met OOMs under the default settings on an H200 (tests/data/corpus/README.md), and the same
    // job's runs under other settings: GPT-2 trained under a 2.85 GB cap, skipping steps that ran out (7 OOMs; none
    // under expandable_segments:True), and the scripted what-if job under a 2.5 GiB cap (4 OOMs).
    QTest::addColumn<QString>("file");
    QTest::addColumn<QStringList>("runs"); // setting=file of the same job's run under it
    QTest::newRow("gpt2_oom2850_default")
        << "corpus/gpt2_oom2850_default.pickle.xz"
        << QStringList { QStringLiteral("expandable_segments:True=corpus/gpt2_oom2850_expandable.pickle.xz") };
    QTest::newRow("whatif_s0_default") << "corpus/whatif_s0_default.pickle"
                                       << QStringList { QStringLiteral("expandable_segments:True=corpus/whatif_s0_expandable.pickle"),
                                                        QStringLiteral("max_split_size_mb:128=corpus/whatif_s0_max_split128.pickle") };
}

// The insight names a setting under which the same job, run again, really met fewer OOMs; its figures are the
// engine's for that setting (with the cap the trace implies); activating it opens the panel on that setting.
void TestWhatIfPanel::suggestionRemovesTheOoms()
{
    QFETCH(QString, file);
    QFETCH(QStringList, runs);
    auto w = window(file.toStdString(), QSize(1280, 720));
    const QString settings = w->suggestedSettings();
    const QModelIndex row = w->insights()->firstOf(report::InsightKind::WhatIf);
    QVERIFY(row.isValid());
    const report::Insight* it = w->insights()->insightAt(row);
    QVERIFY(it);
    qInfo("%s", it->title.c_str());
    QVERIFY2(QString::fromStdString(it->title).startsWith(QLatin1String("With ") + settings), it->title.c_str());
    auto oomsIn = [](const model::Snapshot& s) {
        size_t n = 0;
        for (const model::TraceEntry& e : s.deviceTraces[0])
            n += e.action == model::Action::Oom;
        return n;
    };
    QString runFile;
    for (const QString& r : runs)
        if (r.section(QLatin1Char('='), 0, 0) == settings)
            runFile = r.section(QLatin1Char('='), 1);
    QVERIFY2(!runFile.isEmpty(), qPrintable(settings + QLatin1String(": no real run under it here")));
    const size_t realOoms = oomsIn(*document(runFile.toStdString())->snapshot);
    const size_t fileOoms = oomsIn(*document(file.toStdString())->snapshot);
    qInfo("the job run again under %s met %zu OOMs (the file: %zu)", qPrintable(settings), realOoms, fileOoms);
    QVERIFY(realOoms < fileOoms);

    const auto doc = document(file.toStdString());
    WhatIfOptions options;
    options.sets = { settings.toStdString() };
    const WhatIfResult truth = whatIf(*doc->snapshot, options);
    QVERIFY2(truth.ok, truth.error.c_str());
    const WhatIfDevice& d = truth.devices[0];
    QCOMPARE(it->count, int64_t(d.original.ooms.size()) - int64_t(d.replayed.ooms.size()));
    QVERIFY(it->count > 0);
    QCOMPARE(it->bytes, model::ByteCount(d.original.peakReserved) - model::ByteCount(d.replayed.peakReserved));
    const bool samePeak = d.replayed.peakReserved * 100 >= d.original.peakReserved * 99
        && d.replayed.peakReserved * 100 <= d.original.peakReserved * 101;
    QVERIFY2(QString::fromStdString(it->title)
                 .contains(Session::formatBytes(int64_t(samePeak ? d.original.peakReserved : d.replayed.peakReserved))),
             it->title.c_str());
    if (d.replayed.ooms.empty())
        QVERIFY2(QString::fromStdString(it->title).contains(QLatin1String("have happened")), it->title.c_str());
    else
        QVERIFY2(QString::fromStdString(it->title).contains(QLatin1String("the first OOM would not have happened")),
                 it->title.c_str());

    QSignalSpy shown(w->whatIfView(), &WhatIfView::resultShown);
    w->insightsView()->activate(row);
    QVERIFY(shown.wait(60000));
    QVERIFY(w->whatIfView()->isVisible());
    QCOMPARE(QString::fromStdString(w->whatIfView()->result()->newSettings), settings);
}

void TestWhatIfPanel::panelShowsTheReplay_data()
{
    QTest::addColumn<QSize>("size");
    QTest::addColumn<int>("fontScale");
    QTest::newRow("1280x720") << QSize(1280, 720) << 1;
    QTest::newRow("1920x1080") << QSize(1920, 1080) << 1;
    QTest::newRow("2x font") << QSize(1920, 1080) << 2;
}

void TestWhatIfPanel::panelShowsTheReplay()
{
    QFETCH(QSize, size);
    QFETCH(int, fontScale);
    const QFont before = QApplication::font();
    if (fontScale != 1) {
        QFont f = before;
        f.setPointSizeF(before.pointSizeF() * fontScale);
        QApplication::setFont(f);
    }
    auto w = window("corpus/gpt2_oom2850_default.pickle.xz", size);
    WhatIfView* panel = w->whatIfView();
    QVERIFY(panel);
    QSignalSpy shown(panel, &WhatIfView::resultShown);
    QSignalSpy segments(panel, &WhatIfView::segmentsShown);
    w->showWhatIf(QStringLiteral("expandable_segments:True,garbage_collection_threshold:0.8"));
    QVERIFY(shown.wait(60000));
    const WhatIfResult* r = panel->result();
    QVERIFY(r && r->ok);
    QCOMPARE(QString::fromStdString(r->newSettings), QStringLiteral("expandable_segments:True,garbage_collection_threshold:0.8"));
    QVERIFY(r->originalCapInferred);
    const WhatIfDevice& d = r->devices[0];
    // The summary: both peaks and OOM counts, and where the replay stops being exact.
    const QString summary = panel->summaryText();
    QVERIFY2(summary.contains(Session::formatBytes(int64_t(d.original.peakReserved))), qPrintable(summary));
    QVERIFY2(summary.contains(Session::formatBytes(int64_t(d.replayed.peakReserved))), qPrintable(summary));
    QVERIFY2(summary.contains(QStringLiteral("Exact up to request %1").arg(d.firstChangedOom)), qPrintable(summary));
    // The segments at three moments add up to the replayed curve there.
    const int64_t first = w->session()->replay().firstEntry();
    for (int64_t state : { w->session()->entryCount() / 4, w->session()->entryCount() / 2, w->session()->entryCount() }) {
        segments.clear();
        w->session()->setCursor(state);
        QVERIFY(segments.wait(30000));
        const size_t entry = size_t(first + state - 1);
        size_t reserved = 0;
        for (const CurvePoint& p : d.replayed.curve)
            if (p.entry <= entry)
                reserved = p.reserved;
        std::string error;
        WhatIfOptions options;
        options.sets = { "expandable_segments:True", "garbage_collection_threshold:0.8" };
        options.original.memoryLimit = r->originalCap;
        const RecoveredJob job = recoverJob(*w->session()->documentPtr()->snapshot, options.original);
        size_t sum = 0;
        for (const WhatIfSegment& s : whatIfStateAt(job, options, 0, entry, &error))
            sum += s.size;
        QVERIFY2(error.empty(), error.c_str());
        QCOMPARE(sum, reserved);
    }
    w->showView(DocumentWindow::View::WhatIf);
    const QString tag = QString::fromLatin1(QTest::currentDataTag()).replace(QLatin1Char(' '), QLatin1Char('_'));
    QVERIFY(test::saveScreenshot(*w, QStringLiteral("whatif-") + tag, size));
    // The summary is read whole: no line of it is wider than the panel.
    auto* label = panel->findChild<QLabel*>(QStringLiteral("whatIfSummary"));
    QVERIFY(label);
    QVERIFY2(label->sizeHint().width() <= panel->width() + 1 || label->wordWrap(), "the summary is cut");
    QApplication::setFont(before);
}

// A trace whose ring wrapped cannot be replayed: the panel says so, naming the reason, and offers nothing.
void TestWhatIfPanel::unreplayableFileSaysWhy()
{
    auto w = window("long/gpt2_long.pickle.xz", QSize(1280, 720));
    QVERIFY(w->suggestedSettings().isEmpty());
    QVERIFY(!w->insights()->firstOf(report::InsightKind::WhatIf).isValid());
    QSignalSpy shown(w->whatIfView(), &WhatIfView::resultShown);
    w->showWhatIf(QStringLiteral("expandable_segments:True"));
    QVERIFY(shown.wait(60000));
    QVERIFY(!w->whatIfView()->result()->ok);
    QVERIFY2(w->whatIfView()->summaryText().contains(QLatin1String("No what-if for this file")),
             qPrintable(w->whatIfView()->summaryText()));
    QVERIFY2(w->whatIfView()->summaryText().contains(QLatin1String("incomplete")),
             qPrintable(w->whatIfView()->summaryText()));
}

QTEST_MAIN(TestWhatIfPanel)
#include "tst_whatifpanel.moc"
