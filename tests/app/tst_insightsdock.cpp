// Tests of the answers in the app: the Insights dock (InsightsModel under QAbstractItemModelTester, a click moving
// the shared cursor and selection), the Go moments (peak, OOMs, largest, annotations) and where a file opens, the
// default layout at 1280x720, 1920x1080 and twice the font size (call stacks and details beside the timeline, not
// behind tabs; no dock squeezed to a strip), "Colour by" recolouring the timeline, and torch.compile's own
// annotations hidden by default. Screenshots land in build/screenshots. GUI thread only.
#include "apptestutil.h"
#include "itemmodels/insightsmodel.h"
#include "model/framefilter.h"
#include "model/landmarks.h"
#include "report/memoryviz.h"
#include "style/colors.h"
#include "views/calltreeview.h"
#include "views/diffwindow.h"
#include "views/documentwindow.h"
#include "views/insightsview.h"
#include "views/mainwindow.h"
#include "views/timelineview.h"

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QDockWidget>
#include <QFile>
#include <QMouseEvent>
#include <QPlainTextEdit>
#include <QScreen>
#include <QSignalSpy>
#include <QTreeView>
#include <QtTest>

#include <map>
#include <set>

using namespace memscope;
using namespace memscope::app;

namespace {

std::shared_ptr<const Document> document(const QString& name)
{
    // tests/data's files first (corpus/..., the hand-made fixtures), then ../shared's snapshots.
    const std::string data = test::dataPath(name.toStdString());
    const std::string path = QFile::exists(QString::fromStdString(data)) ? data : test::snapshotPath(name.toStdString());
    io::LoadResult r = io::loadSnapshot(path);
    if (!r.ok())
        qFatal("%s", r.error.toString().c_str());
    return makeDocument(QString::fromStdString(path), r.snapshot);
}

// A window with its insights computed.
std::unique_ptr<DocumentWindow> window(const QString& name, QSize size = QSize(1280, 720))
{
    auto w = std::make_unique<DocumentWindow>(document(name));
    w->setAttribute(Qt::WA_DontShowOnScreen);
    w->resize(size);
    w->show();
    if (w->insights()->isComputing()) {
        QSignalSpy done(w->insights(), &InsightsModel::computed);
        if (!done.wait(20000))
            qFatal("insights not computed");
    }
    QCoreApplication::processEvents();
    return w;
}

// A small JSON snapshot whose annotations mix the user's with torch.compile's own.
std::shared_ptr<const Document> annotated()
{
    QString entries, annotations;
    for (int i = 0; i < 8; ++i)
        entries += QStringLiteral("{\"action\":\"alloc\",\"addr\":%1,\"size\":512,\"stream\":0,\"time_us\":%2},")
                       .arg(0x7f0000000000 + i * 512)
                       .arg(100 + i * 10);
    entries.chop(1);
    auto range = [&](const char* name, int begin, int end) {
        annotations += QStringLiteral("{\"stage\":\"START\",\"name\":\"%1\",\"device\":0,\"time_us\":%2},"
                                      "{\"stage\":\"END\",\"name\":\"%1\",\"device\":0,\"time_us\":%3},")
                           .arg(QLatin1String(name))
                           .arg(begin)
                           .arg(end);
    };
    range("step_0", 95, 200);
    range("Torch-Compiled Region: 0/0", 100, 150);
    range("## Call CompiledFxGraph fxyz ##", 110, 140);
    range("CompiledFunctionBackward", 150, 170);
    annotations.chop(1);
    QString blocks;
    for (int i = 0; i < 8; ++i)
        blocks += QStringLiteral("{\"address\":%1,\"size\":512,\"requested_size\":512,\"state\":\"active_allocated\","
                                 "\"frames\":[]},")
                      .arg(0x7f0000000000 + i * 512);
    blocks.chop(1);
    const QByteArray json
        = QStringLiteral("{\"segments\":[{\"device\":0,\"address\":%1,\"total_size\":2097152,"
                         "\"allocated_size\":4096,\"active_size\":4096,\"requested_size\":4096,"
                         "\"stream\":0,\"segment_type\":\"small\",\"segment_pool_id\":[0,0],"
                         "\"is_expandable\":false,\"frames\":[],\"blocks\":[%2,{\"address\":%3,"
                         "\"size\":2093056,\"requested_size\":0,\"state\":\"inactive\",\"frames\":[]}]"
                         "}],\"device_traces\":[[%4]],\"external_annotations\":[%5]}")
              .arg(0x7f0000000000)
              .arg(blocks)
              .arg(0x7f0000000000 + 4096)
              .arg(entries, annotations)
              .toUtf8();
    io::LoadResult r = io::loadSnapshotFromMemory(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.constData()), size_t(json.size())), "a.json");
    if (!r.ok())
        qFatal("%s", r.error.toString().c_str());
    return makeDocument(QStringLiteral("a.json"), r.snapshot);
}

} // namespace

class TestInsightsDock : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void modelTester_data();
    void modelTester();
    void clickMovesCursorAndSelection();
    void goToMoments_data();
    void goToMoments();
    void opensWhereItSaysTheMost_data();
    void opensWhereItSaysTheMost();
    void stepsThroughOoms();
    void oomOnAnotherDevice();
    void oomShowsTheFailedRequest_data();
    void oomShowsTheFailedRequest();
    void aliveBeforeTheTraceIsExplained_data();
    void aliveBeforeTheTraceIsExplained();
    void defaultLayout_data();
    void defaultLayout();
    void layoutSurvivesRelaunch_data();
    void layoutSurvivesRelaunch();
    void firstWindowFitsTheScreen();
    void colourByRecoloursTheTimeline();
    void colourByUserMetadata();
    void detailsShowTheForwardPass();
    void compilerAnnotationsHidden();
    void diffInsightsSelectTheStack();
};

void TestInsightsDock::modelTester_data()
{
    QTest::addColumn<QString>("file");
    for (const char* f : { "transformer_train.pickle", "oom.pickle", "diff_after.pickle", "two_device.pickle",
                           "corpus/streams_record_stream.pickle" })
        QTest::newRow(f) << QString::fromLatin1(f);
}

void TestInsightsDock::modelTester()
{
    QFETCH(QString, file);
    InsightsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy done(&model, &InsightsModel::computed);
    model.compute(document(file));
    QVERIFY(done.wait(20000));
    QVERIFY(model.rowCount() > 0);
    int items = 0;
    for (int s = 0; s < model.rowCount(); ++s) {
        const QModelIndex section = model.index(s, 0);
        QVERIFY(model.data(section, InsightsModel::IsSectionRole).toBool());
        for (int r = 0; r < model.rowCount(section); ++r, ++items)
            QVERIFY(!model.data(model.index(r, 0, section)).toString().isEmpty());
    }
    QCOMPARE(size_t(items), model.insights()->items.size());
    model.setInsights(nullptr);
    QCOMPARE(model.rowCount(), 0);
}

void TestInsightsDock::clickMovesCursorAndSelection()
{
    auto w = window(QStringLiteral("transformer_train.pickle"));
    InsightsView* view = w->insightsView();
    const QModelIndex top = view->model()->firstOf(report::InsightKind::TopConsumer);
    QVERIFY(top.isValid());
    const report::Insight* it = view->model()->insightAt(top);
    QCOMPARE(it->index, int64_t(9796));
    // A click on the row, as a user does.
    QTreeView* tree = view->tree();
    tree->scrollTo(top);
    QTest::mouseClick(tree->viewport(), Qt::LeftButton, {}, tree->visualRect(top).center());
    QCOMPARE(w->session()->cursor(), int64_t(9796));
    QCOMPARE(w->session()->selection(), it->allocation);
    // The Details pane shows the selected allocation's stack.
    auto* details = w->findChild<QPlainTextEdit*>(QStringLiteral("detailsText"));
    QVERIFY(details->toPlainText().contains(QLatin1String("functional.py:1443:dropout")));
    QVERIFY(test::saveScreenshot(*w, QStringLiteral("insights-transformer_train"), QSize(1280, 720)));
}

void TestInsightsDock::goToMoments_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("spec");
    QTest::addColumn<qint64>("cursor");
    QTest::addColumn<QString>("status");
    QTest::newRow("peak") << "transformer_train.pickle"
                          << "peak" << qint64(9796) << "the peak of allocated bytes";
    QTest::newRow("peak reserved") << "transformer_train.pickle"
                                   << "peak-reserved" << qint64(9794) << "the peak of reserved bytes";
    QTest::newRow("an annotation") << "transformer_train.pickle"
                                   << "step_1" << qint64(-2) << "the start of annotation 'step_1'";
    QTest::newRow("the OOM") << "oom.pickle"
                             << "oom" << qint64(51) << "OOM 1 of 1";
    QTest::newRow("third OOM") << "corpus/gc05_fraction.pickle"
                               << "oom3" << qint64(574) << "OOM 3 of 29";
    QTest::newRow("largest") << "diff_after.pickle"
                             << "largest" << qint64(-3) << "the largest allocation";
}

void TestInsightsDock::goToMoments()
{
    QFETCH(QString, file);
    QFETCH(QString, spec);
    QFETCH(qint64, cursor);
    QFETCH(QString, status);
    auto w = window(file);
    Session* s = w->session();
    QCOMPARE(w->goTo(*model::parseMoment(spec.toStdString())), QString());
    if (cursor == -2) { // an annotation: its START, as landmarks.h resolves it
        const auto ranges = model::annotationRanges(s->snapshot(), 0);
        cursor
            = std::find_if(ranges.begin(), ranges.end(), [&](auto& r) { return r.name == spec.toStdString(); })->begin;
    } else if (cursor == -3) { // the largest allocation, selected, right after its alloc
        const model::AllocationId id = model::largestAllocation(s->replay());
        QCOMPARE(s->selection(), id);
        cursor = s->replay().allocation(id).allocIndex + 1;
    }
    QCOMPARE(s->cursor(), cursor);
    QVERIFY2(w->statusText().contains(status), qPrintable(w->statusText()));
    if (spec.startsWith(QLatin1String("oom"))) {
        // An OOM selects nothing: the request failed and made no block; the details pane shows it.
        QCOMPARE(s->selection(), model::NoAllocation);
        QVERIFY(s->describeOomAtCursor().startsWith(QLatin1String("Out of memory: ")));
    } else {
        // Every other moment but an index selects something alive there.
        QVERIFY(s->selection() != model::NoAllocation);
        const auto live = s->replay().liveAt(s->cursor());
        QVERIFY(std::find(live.begin(), live.end(), s->selection()) != live.end());
    }
    // The reason goes once the user moves the cursor.
    s->setCursor(0);
    QVERIFY(!w->statusText().contains(status));
    // A moment that is not there says why and moves nothing.
    QVERIFY(!w->goTo(*model::parseMoment("no_such_annotation")).isEmpty());
    QCOMPARE(s->cursor(), int64_t(0));
}

void TestInsightsDock::opensWhereItSaysTheMost_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<qint64>("cursor"); // -1: the end
    QTest::addColumn<QString>("status");
    QTest::newRow("an OOM") << "oom.pickle" << qint64(51) << "opened at the OOM";
    QTest::newRow("several OOMs") << "corpus/oom_retry.pickle" << qint64(22) << "opened at the first of 81 OOMs";
    QTest::newRow("no OOM") << "transformer_train.pickle" << qint64(-1) << "opened at the end of the trace";
}

void TestInsightsDock::opensWhereItSaysTheMost()
{
    QFETCH(QString, file);
    QFETCH(qint64, cursor);
    QFETCH(QString, status);
    auto w = window(file);
    QCOMPARE(w->session()->cursor(), cursor < 0 ? w->session()->entryCount() : cursor);
    QVERIFY2(w->statusText().contains(status), qPrintable(w->statusText()));
}

void TestInsightsDock::stepsThroughOoms()
{
    auto w = window(QStringLiteral("corpus/gc05_fraction.pickle"));
    Session* s = w->session();
    const std::vector<int64_t> ooms = s->oomIndices();
    QCOMPARE(ooms.size(), size_t(29));
    // What the load kept (Document::oomEntries) is what a pass over the trace finds, from any entry on.
    QVERIFY(!s->documentPtr()->isLive() && s->documentPtr()->oomEntries.size() > size_t(s->device()));
    std::vector<int64_t> read;
    for (int64_t entry : memscope::model::oomEntries(s->entries()))
        read.push_back(entry + 1);
    QCOMPARE(ooms, read);
    QCOMPARE(s->oomIndices(ooms[10] - 1), std::vector<int64_t>(ooms.begin() + 10, ooms.end()));
    QCOMPARE(s->oomIndices(ooms[10]), std::vector<int64_t>(ooms.begin() + 11, ooms.end()));
    QCOMPARE(s->cursor(), ooms[0]);
    for (size_t k = 1; k < ooms.size(); ++k) {
        QVERIFY(w->stepOom(1));
        QCOMPARE(s->cursor(), ooms[k]);
    }
    QVERIFY(!w->stepOom(1));
    QVERIFY(w->statusText().contains(QLatin1String("no OOM after the cursor")));
    QVERIFY(w->stepOom(-1));
    QCOMPARE(s->cursor(), ooms[27]);
}

// At an OOM (opened there, Go > Next OOM, the OOM insight clicked) the details pane shows the request that failed:
// its size, the device's free memory then and its stack with the site first; a selection replaces it, and it comes
// back when the selection is cleared.
void TestInsightsDock::oomShowsTheFailedRequest_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QSize>("size");
    QTest::newRow("gc05_fraction 1280x720") << "corpus/gc05_fraction.pickle" << QSize(1280, 720);
    QTest::newRow("oom_retry 1920x1080") << "corpus/oom_retry.pickle" << QSize(1920, 1080);
}

void TestInsightsDock::oomShowsTheFailedRequest()
{
    QFETCH(QString, file);
    QFETCH(QSize, size);
    auto w = window(file, size);
    Session* s = w->session();
    auto* details = w->findChild<QPlainTextEdit*>(QStringLiteral("detailsText"));
    QVERIFY(details);
    const std::vector<int64_t> ooms = s->oomIndices();
    QVERIFY(ooms.size() >= 2);
    auto expectRequest = [&](int64_t stateIndex) {
        const model::TraceEntry& e = s->entries()[size_t(stateIndex - 1)];
        QCOMPARE(e.action, model::Action::Oom);
        const QString text = details->toPlainText();
        QVERIFY2(text.startsWith(QLatin1String("Out of memory: ")), qPrintable(text.left(200)));
        QVERIFY2(text.contains(QStringLiteral("(%1 B)").arg(e.size)), qPrintable(text.left(200)));
        QVERIFY(
            text.contains(QLatin1String("free on the device then: ") + Session::formatBytes(model::ByteCount(e.addr))));
        // The stack: the site's line first ("at file:line:function").
        const int site = model::siteIndex(s->snapshot(), e.stack);
        QVERIFY(site >= 0);
        const std::string siteText
            = report::displayFrame(s->snapshot(), s->snapshot().frame(s->snapshot().stackBegin(e.stack)[site]));
        QVERIFY2(text.contains(QLatin1String("at ") + QString::fromStdString(siteText)), qPrintable(text));
    };
    // Opened at the first OOM: nothing selected, the request shown, the Insights on that OOM's item.
    QCOMPARE(s->cursor(), ooms[0]);
    QCOMPARE(s->selection(), model::NoAllocation);
    expectRequest(ooms[0]);
    const report::Insight* current = w->insightsView()->model()->insightAt(w->insightsView()->tree()->currentIndex());
    QVERIFY(current);
    QCOMPARE(current->kind, report::InsightKind::Oom);
    QCOMPARE(current->index, ooms[0]);
    QVERIFY(test::saveScreenshot(*w, QStringLiteral("oom-request-%1x%2").arg(size.width()).arg(size.height()), size));
    QVERIFY(w->stepOom(+1));
    expectRequest(ooms[1]);
    // A selection replaces it; cleared, the request is back.
    const auto live = s->replay().liveAt(s->cursor());
    QVERIFY(!live.empty());
    s->setSelection(live.front());
    QVERIFY(details->toPlainText().startsWith(s->allocationName(live.front())));
    s->setSelection(model::NoAllocation);
    expectRequest(ooms[1]);
    // Away from an OOM the pane is empty again.
    s->setCursor(ooms[1] + 1 < s->entryCount() ? ooms[1] + 1 : 0);
    if (s->entries()[size_t(s->cursor() - 1)].action != model::Action::Oom)
        QVERIFY(details->toPlainText().isEmpty());
    // The OOM insight, clicked: the cursor at its OOM, the request shown.
    InsightsView* view = w->insightsView();
    const QModelIndex row = view->model()->firstOf(report::InsightKind::Oom);
    QVERIFY(row.isValid());
    QTreeView* tree = view->tree();
    tree->scrollTo(row);
    QTest::mouseClick(tree->viewport(), Qt::LeftButton, {}, tree->visualRect(row).center());
    QCOMPARE(s->cursor(), ooms[0]);
    QCOMPARE(s->selection(), model::NoAllocation);
    expectRequest(ooms[0]);
}

// A trace that does not start with the process (its ring overflowed, or recording began late): the window says so
// at open, with why when PyTorch wrote it (allocator_settings.trace_alloc_overflowed); a complete trace says nothing.
void TestInsightsDock::aliveBeforeTheTraceIsExplained_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("expected"); // "" for nothing said
    QTest::newRow("ring overflowed") << "ring-overflowed.pickle"
                                     << "9 block(s) (105.3 MiB) alive before the trace: PyTorch's history kept its "
                                        "last 150 events only";
    QTest::newRow("complete") << "corpus/streams_record_stream.pickle" << "";
}

void TestInsightsDock::aliveBeforeTheTraceIsExplained()
{
    QFETCH(QString, file);
    QFETCH(QString, expected);
    auto w = window(file);
    QCOMPARE(w->session()->aliveBeforeTheTrace(), expected);
    if (expected.isEmpty()) {
        QVERIFY(!w->statusText().contains(QLatin1String("alive before the trace")));
        return;
    }
    QVERIFY2(w->statusText().contains(expected), qPrintable(w->statusText()));
    // Independently: the blocks live in the replay's first state are those the trace never allocates.
    const auto first = w->session()->replay().stateAt(0);
    int blocks = 0;
    for (const auto& b : first.blocks)
        blocks += b.state != model::BlockState::Inactive;
    QCOMPARE(blocks, 9);
}

// A two-device file whose OOM is on cuda:1 (tests/data/oom-on-cuda1.pickle): the window opens on cuda:1 at that
// OOM and says so; shown cuda:0 again, "next OOM" goes back to it, device and all.
void TestInsightsDock::oomOnAnotherDevice()
{
    const std::string path = test::dataPath("oom-on-cuda1.pickle");
    io::LoadResult r = io::loadSnapshot(path);
    QVERIFY2(r.ok(), r.error.toString().c_str());
    auto w = std::make_unique<DocumentWindow>(makeDocument(QString::fromStdString(path), r.snapshot));
    w->setAttribute(Qt::WA_DontShowOnScreen);
    w->resize(1280, 720);
    w->show();
    QCoreApplication::processEvents();
    QCOMPARE(w->session()->device(), 1);
    const std::vector<int64_t> ooms = w->session()->oomIndices();
    QCOMPARE(ooms.size(), size_t(1));
    QVERIFY2(w->cursorReason().contains(QLatin1String("OOM")) && w->cursorReason().contains(QLatin1String("cuda:1")),
             qPrintable(w->cursorReason()));
    auto* box = w->findChild<QComboBox*>(QStringLiteral("deviceBox"));
    QVERIFY(box);
    QCOMPARE(box->currentText(), QStringLiteral("cuda:1"));
    const int64_t at = w->session()->cursor();
    // The Insights' current item is that OOM's, on cuda:1, once they are computed.
    QTRY_VERIFY_WITH_TIMEOUT(w->insightsView()->model()->insights() != nullptr, 20000);
    const report::Insight* current = w->insightsView()->model()->insightAt(w->insightsView()->tree()->currentIndex());
    QVERIFY(current);
    QCOMPARE(current->kind, report::InsightKind::Oom);
    QCOMPARE(current->device, 1);
    QCOMPARE(current->index, at);
    w->session()->setDevice(0);
    QCOMPARE(box->currentText(), QStringLiteral("cuda:0"));
    QVERIFY(w->stepOom(+1));
    QCOMPARE(w->session()->device(), 1);
    QCOMPARE(w->session()->cursor(), at);
    QVERIFY2(w->cursorReason().contains(QLatin1String("cuda:1")), qPrintable(w->cursorReason()));
}

void TestInsightsDock::defaultLayout_data()
{
    QTest::addColumn<QSize>("size");
    QTest::addColumn<int>("fontScale"); // font size in percent: 200 stands for a 2x-scaled desktop
    QTest::newRow("1280x720") << QSize(1280, 720) << 100;
    QTest::newRow("1920x1080") << QSize(1920, 1080) << 100;
    QTest::newRow("3840x2160") << QSize(3840, 2160) << 100;
    QTest::newRow("1920x1080, 2x text") << QSize(1920, 1080) << 200;
}

void TestInsightsDock::defaultLayout()
{
    QFETCH(QSize, size);
    QFETCH(int, fontScale);
    const test::ScopedFontScale font(fontScale);
    auto w = window(QStringLiteral("transformer_train.pickle"), size);
    w->goTo(*model::parseMoment("peak"));
    QCoreApplication::processEvents();
    // The call stacks and the details are on screen beside the timeline, not behind a tab, and roomy.
    auto* tree = w->view(DocumentWindow::View::Tree);
    auto* details = w->findChild<QPlainTextEdit*>(QStringLiteral("detailsText"));
    auto* insights = w->view(DocumentWindow::View::Insights);
    for (QWidget* v : { static_cast<QWidget*>(w->view(DocumentWindow::View::Timeline)), tree,
                        static_cast<QWidget*>(details), insights }) {
        QVERIFY2(v->isVisible(), qPrintable(v->objectName()));
        QVERIFY2(v->visibleRegion().boundingRect().width() >= 300, qPrintable(v->objectName()));
    }
    QVERIFY(tree->width() >= size.width() * 35 / 100);
    QVERIFY(details->height() >= size.height() * 35 / 100);
    QVERIFY(insights->height() >= std::min(170, size.height() / 4));
    QVERIFY(w->view(DocumentWindow::View::Timeline)->width() >= size.width() / 2);
    // The selected allocation's stack (15 frames at the peak) is whole in the Details pane: no line hidden below.
    const int lines = int(details->toPlainText().count(QLatin1Char('\n'))) + 1;
    const int shown = details->viewport()->height() / details->fontMetrics().lineSpacing();
    if (fontScale == 100 && size.height() >= 1080)
        QVERIFY2(shown >= lines, qPrintable(QStringLiteral("%1 lines, %2 shown").arg(lines).arg(shown)));
    // The overview chart, one click away, is no strip either.
    w->showView(DocumentWindow::View::Overview);
    QCoreApplication::processEvents();
    QVERIFY(w->view(DocumentWindow::View::Overview)->height() >= 150);
    w->showView(DocumentWindow::View::Insights);
    QVERIFY(test::saveScreenshot(
        *w, QStringLiteral("layout-%1x%2-%3pct").arg(size.width()).arg(size.height()).arg(fontScale), size));
}

void TestInsightsDock::layoutSurvivesRelaunch_data()
{
    QTest::addColumn<QSize>("size");
    QTest::newRow("1280x720") << QSize(1280, 720);
    QTest::newRow("1920x1080") << QSize(1920, 1080);
}

// The app saves a document window's layout when it quits and restores it into the next window before that one is
// shown (MainWindow): the docks keep their proportions (the call stacks' column, the details under them, the
// insights' height), whether they are the defaults or what the user dragged, and View > Reset Layout gives the
// defaults back.
void TestInsightsDock::layoutSurvivesRelaunch()
{
    QFETCH(QSize, size);
    auto fractions = [](DocumentWindow& w) {
        auto* tree = w.view(DocumentWindow::View::Tree);
        auto* insights = w.view(DocumentWindow::View::Insights);
        return std::pair<double, double> { double(tree->width()) / w.width(), double(insights->height()) / w.height() };
    };
    auto relaunch = [&](const QByteArray& saved) {
        auto w = std::make_unique<DocumentWindow>(document(QStringLiteral("transformer_train.pickle")));
        w->restoreLayout(saved); // before it is shown or sized, as the app does
        w->setAttribute(Qt::WA_DontShowOnScreen);
        w->resize(size);
        w->show();
        QCoreApplication::processEvents();
        return w;
    };
    auto first = window(QStringLiteral("transformer_train.pickle"), size);
    const auto defaults = fractions(*first);
    QVERIFY(defaults.first >= 0.35);
    // Launched again with the saved layout, twice (a third launch restores what the second saved).
    auto second = relaunch(first->saveLayout());
    auto third = relaunch(second->saveLayout());
    for (DocumentWindow* w : { second.get(), third.get() }) {
        const auto f = fractions(*w);
        qInfo("call stacks %.3f of the width (first launch %.3f), insights %.3f of the height (%.3f)", f.first,
              defaults.first, f.second, defaults.second);
        QVERIFY(std::abs(f.first - defaults.first) <= 0.03);
        QVERIFY(std::abs(f.second - defaults.second) <= 0.03);
    }
    // The user widens the call stacks' column (a drag on the separator: a press on the window itself first).
    QMouseEvent press(QEvent::MouseButtonPress, QPointF(1, 1), QPointF(1, 1), Qt::LeftButton, Qt::LeftButton,
                      Qt::NoModifier);
    QCoreApplication::sendEvent(third.get(), &press);
    third->resizeDocks({ qobject_cast<QDockWidget*>(third->view(DocumentWindow::View::Tree)->parentWidget()) },
                       { size.width() * 50 / 100 }, Qt::Horizontal);
    QCoreApplication::processEvents();
    const double dragged = fractions(*third).first;
    qInfo("dragged to %.3f of the width", dragged);
    QVERIFY(dragged >= 0.45);
    auto fourth = relaunch(third->saveLayout());
    QVERIFY2(std::abs(fractions(*fourth).first - dragged) <= 0.03,
             qPrintable(QStringLiteral("%1 against %2").arg(fractions(*fourth).first).arg(dragged)));
    // View > Reset Layout.
    fourth->resetLayout();
    QCoreApplication::processEvents();
    QVERIFY2(std::abs(fractions(*fourth).first - defaults.first) <= 0.03,
             qPrintable(QStringLiteral("%1 against %2").arg(fractions(*fourth).first).arg(defaults.first)));
    QVERIFY(
        test::saveScreenshot(*fourth, QStringLiteral("layout-reset-%1x%2").arg(size.width()).arg(size.height()), size));
}

void TestInsightsDock::firstWindowFitsTheScreen()
{
    MainWindow w;
    const QSize screen = QGuiApplication::primaryScreen()->availableGeometry().size();
    QVERIFY(w.width() <= screen.width());
    QVERIFY(w.height() <= screen.height());
}

void TestInsightsDock::colourByRecoloursTheTimeline()
{
    auto w = window(QStringLiteral("transformer_train.pickle"));
    QWidget* timeline = w->view(DocumentWindow::View::Timeline);
    app::finishTimelineBuilds(timeline);
    const QImage byAllocation = timeline->grab().toImage();
    w->session()->setColorMode(ColorMode::Stack);
    app::finishTimelineBuilds(timeline); // the colours are built in the background
    const QImage byStack = timeline->grab().toImage();
    QVERIFY(byAllocation != byStack);
    w->session()->setColorMode(ColorMode::Allocation);
    app::finishTimelineBuilds(timeline);
    QCOMPARE(timeline->grab().toImage(), byAllocation);
}

// A real trace whose job set user metadata around two phases (corpus/compile_fx_metadata.pickle: torch.compile on an
// H200, torch.cuda.memory._set_memory_metadata('{"phase": ...}')): "Colour by user metadata" is offered, and the
// timeline's colours follow each allocation's metadata: one colour per distinct text, grey where there is none.
void TestInsightsDock::colourByUserMetadata()
{
    auto w = window(QStringLiteral("corpus/compile_fx_metadata.pickle"));
    Session* s = w->session();
    QVERIFY(s->hasUserMetadata());
    auto* box = w->findChild<QComboBox*>(QStringLiteral("colourBox"));
    QVERIFY(box);
    const int index = box->findData(int(ColorMode::Metadata));
    QVERIFY(index >= 0);
    box->setCurrentIndex(index);
    QCOMPARE(s->colorMode(), ColorMode::Metadata);
    QWidget* timeline = w->view(DocumentWindow::View::Timeline);
    app::finishTimelineBuilds(timeline);
    // Independently of the colouring: the texts the trace's alloc entries carry, read from the file's entries.
    std::set<std::string> texts;
    for (const auto& e : s->entries())
        if (e.action == model::Action::Alloc)
            texts.insert(std::string(s->snapshot().str(s->snapshot().form(e).userMetadata)));
    QVERIFY(texts.count("{\"phase\": \"warmup\"}") && texts.count("{\"phase\": \"train\"}"));
    // Each allocation's colour is its metadata's; two allocations of the two phases differ.
    std::map<std::string, QRgb> seen;
    const auto& allocations = s->replay().allocations();
    for (uint32_t k = 0; k < allocations.size(); ++k) {
        const model::StringId text = s->userMetadata(model::AllocationId { k });
        const QRgb rgb = colors::metadata(text).rgb();
        auto [it, fresh] = seen.emplace(std::string(s->snapshot().str(text)), rgb);
        QCOMPARE(it->second, rgb);
    }
    QVERIFY(seen.size() >= 2);
    QVERIFY(seen.at("{\"phase\": \"warmup\"}") != seen.at("{\"phase\": \"train\"}"));
    // The picture changes with the mode, and the details name the metadata.
    const QImage byMetadata = timeline->grab().toImage();
    QVERIFY(test::saveScreenshot(*w, QStringLiteral("colour-by-metadata-1280x720"), QSize(1280, 720)));
    // The timeline's header is the legend: every text met, with the colour its allocations have.
    auto data = static_cast<app::TimelineView*>(timeline)->data();
    QVERIFY(data);
    QCOMPARE(data->metadataLegend.size(), seen.size());
    for (const auto& [text, rgb] : data->metadataLegend)
        QCOMPARE(QRgb(rgb), seen.at(text));
    s->setColorMode(ColorMode::Allocation);
    app::finishTimelineBuilds(timeline);
    QVERIFY(timeline->grab().toImage() != byMetadata);
    for (uint32_t k = 0; k < allocations.size(); ++k) {
        if (s->userMetadata(model::AllocationId { k }) != model::EmptyString) {
            QVERIFY(s->describeAllocation(model::AllocationId { k }).contains(QLatin1String("user metadata: {\"phase\"")));
            break;
        }
    }
    // A trace without any offers no such mode.
    auto plain = window(QStringLiteral("transformer_train.pickle"));
    QCOMPARE(plain->findChild<QComboBox*>(QStringLiteral("colourBox"))->findData(int(ColorMode::Metadata)), -1);
}

// A backward allocation of a trace recorded in anomaly mode (corpus/anomaly_forward_frames.pickle, real): its details
// list the forward pass its autograd node came from (the entry's forward_frames) after its own stack.
void TestInsightsDock::detailsShowTheForwardPass()
{
    auto w = window(QStringLiteral("corpus/anomaly_forward_frames.pickle"));
    Session* s = w->session();
    const model::Snapshot& snap = s->snapshot();
    int shown = 0;
    const auto& allocations = s->replay().allocations();
    for (uint32_t k = 0; k < allocations.size() && shown < 3; ++k) {
        const model::Allocation& a = allocations[k];
        if (a.allocIndex < 0)
            continue;
        const model::StackId forward = snap.forwardStack(s->entries()[size_t(a.allocIndex)]);
        const QString text = s->describeAllocation(model::AllocationId { k });
        if (forward == model::EmptyStack) {
            QVERIFY(!text.contains(QLatin1String("the backward of")));
            continue;
        }
        QVERIFY2(text.contains(QLatin1String("the backward of (its forward pass):")), qPrintable(text));
        // The forward stack's frames appear after that line, as the stack text gives them.
        const QString after = text.mid(text.indexOf(QLatin1String("the backward of")));
        QVERIFY(after.contains(s->stackText(forward)));
        ++shown;
    }
    QCOMPARE(shown, 3);
}

void TestInsightsDock::compilerAnnotationsHidden()
{
    Session s(annotated());
    auto names = [&] {
        QStringList out;
        for (const AnnotationSpan& a : s.annotations())
            out << a.name;
        return out;
    };
    QCOMPARE(names(), QStringList { QStringLiteral("step_0") });
    QSignalSpy changed(&s, &Session::filterChanged);
    s.setCompilerAnnotationsShown(true);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(names().size(), 4);
}

void TestInsightsDock::diffInsightsSelectTheStack()
{
    DiffInput a, b;
    a.document = document(QStringLiteral("diff_before.pickle"));
    b.document = document(QStringLiteral("diff_after.pickle"));
    DiffWindow w(a, b);
    w.resize(1280, 720);
    w.show();
    auto* view = w.findChild<InsightsView*>(QStringLiteral("diffInsights"));
    QVERIFY(view);
    const QModelIndex section = view->model()->index(0, 0);
    QCOMPARE(view->model()->rowCount(section), 3); // the totals, then the two stacks that grew
    const QModelIndex leak = view->model()->index(1, 0, section);
    QVERIFY(view->model()->data(leak).toString().startsWith(
        QLatin1String("+9.0MiB in +3 blocks from gen_snapshots.py:126:step")));
    view->activate(leak);
    QCOMPARE(w.view(DiffWindow::View::Tree)->isVisible(), true);
    const QModelIndex current = w.treeView()->currentIndex();
    QVERIFY(current.isValid());
    QVERIFY2(current.data().toString().contains(QLatin1String("gen_snapshots.py:126")),
             qPrintable(current.data().toString()));
}

QTEST_MAIN(TestInsightsDock)
#include "tst_insightsdock.moc"
