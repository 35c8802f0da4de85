// The diff tab: DiffModel / DiffProxyModel pass QAbstractItemModelTester; diff_before vs diff_after puts the leak
// stack at the top of the Δ tree and in the summary; swapping negates every Δ; the growth/shrink filter keeps one
// sign; a file against itself is all zeros; two moments of one trace agree with the replay's series; per-step
// normalisation divides by the step annotations; every diff view renders (screenshots saved for people to look at).
#include "apptestutil.h"
#include "model/framefilter.h"
#include "itemmodels/diffmodel.h"
#include "views/diffflamegraphview.h"
#include "views/diffwindow.h"
#include "views/segmentmapview.h"
#include "views/timelineview.h"

#include <QAbstractItemModelTester>
#include <QAction>
#include <QComboBox>
#include <QImage>
#include <QTest>
#include <QTreeView>
#include <QTreeWidget>

#include <cmath>
#include <map>
#include <set>

using namespace memscope;
using app::DiffInput;
using app::DiffModel;
using app::DiffWindow;

namespace {

std::shared_ptr<const app::Document> document(const char* name)
{
    static std::map<std::string, std::shared_ptr<const app::Document>> cache;
    auto& doc = cache[name];
    if (!doc) {
        auto session = test::loadSession(name);
        if (session)
            doc = session->documentPtr();
    }
    return doc;
}

DiffInput side(const char* name, int64_t index = model::EndOfTrace, int device = model::AllDevices)
{
    DiffInput in;
    in.document = document(name);
    in.index = index;
    in.device = device;
    return in;
}

// Every row of the source model by call path (labels joined): Δ bytes.
void collect(const QAbstractItemModel* m, const QModelIndex& parent, const QString& prefix, std::map<QString, double>& out)
{
    for (int r = 0; r < m->rowCount(parent); ++r) {
        const QModelIndex i = m->index(r, 0, parent);
        const QString path = prefix + QLatin1Char('/') + i.data().toString();
        out[path] += i.data(DiffModel::DeltaBytesRole).toDouble();
        collect(m, i, path, out);
    }
}

int colourVariety(const QImage& image)
{
    std::set<QRgb> colours;
    for (int y = 0; y < image.height(); y += 5)
        for (int x = 0; x < image.width(); x += 5)
            colours.insert(image.pixel(x, y));
    return int(colours.size());
}

// step_N annotation boundaries of transformer_train: [begin of step_1, begin of step_3].
std::pair<int64_t, int64_t> stepRange(const app::Document& doc, const QString& from, const QString& to)
{
    app::Session s(std::shared_ptr<const app::Document>(&doc, [](const app::Document*) {}));
    int64_t a = -1, b = -1;
    for (const auto& span : s.annotations()) {
        if (span.name == from && a < 0)
            a = span.begin;
        if (span.name == to && b < 0)
            b = span.begin;
    }
    return { a, b };
}

} // namespace

class TestDiffWindow : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(document("diff_before.pickle"));
        QVERIFY(document("diff_after.pickle"));
        QVERIFY(document("transformer_train.pickle"));
    }

    void modelPassesTester_data()
    {
        QTest::addColumn<QString>("a");
        QTest::addColumn<QString>("b");
        QTest::addColumn<int>("direction");
        QTest::newRow("before vs after, bottom-up") << "diff_before.pickle" << "diff_after.pickle" << 1;
        QTest::newRow("before vs after, top-down") << "diff_before.pickle" << "diff_after.pickle" << 0;
        QTest::newRow("file against itself") << "diff_before.pickle" << "diff_before.pickle" << 1;
        QTest::newRow("different programs") << "oom.pickle" << "multistream.pickle" << 0;
    }

    void modelPassesTester()
    {
        QFETCH(QString, a);
        QFETCH(QString, b);
        QFETCH(int, direction);
        app::DiffSession session(side(qPrintable(a)), side(qPrintable(b)));
        QVERIFY(session.result().ok());
        DiffModel model;
        app::DiffProxyModel proxy;
        proxy.setSourceModel(&model);
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester proxyTester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setTree(std::make_shared<app::DiffTree>(app::buildDiffTree(
            session.resultPtr(), direction ? model::CallTreeDirection::BottomUp : model::CallTreeDirection::TopDown)));
        proxy.setFilter(app::DiffFilter::Growth);
        proxy.setFilter(app::DiffFilter::Shrink);
        model.setDivisors(2, 3);
        proxy.setFilterFixedString(QStringLiteral("py"));
        model.setTree(nullptr);
    }

    void leakStackOnTop()
    {
        DiffWindow w(side("diff_before.pickle"), side("diff_after.pickle"));
        const QModelIndex top = w.proxy()->index(0, 0);
        QVERIFY(top.isValid());
        QCOMPARE(top.data().toString(), QStringLiteral("gen_snapshots.py:126:step"));
        QCOMPARE(top.data(DiffModel::DeltaBytesRole).toDouble(), 9486336.0);
        QCOMPARE(top.data(DiffModel::DeltaCountRole).toDouble(), 3.0);
        QCOMPARE(w.proxy()->index(0, DiffModel::DeltaBytesColumn).data().toString(), QStringLiteral("+9.05 MiB"));
        const QString summary = w.summaryText();
        QVERIFY2(summary.contains(QLatin1String("gen_snapshots.py:126:step")), qPrintable(summary));
        // The first growth row of the summary is the leak.
        const int growth = summary.indexOf(QLatin1String("Largest growth"));
        QVERIFY(growth >= 0);
        const QString firstGrowth = summary.mid(growth).section(QLatin1Char('\n'), 1, 1);
        QVERIFY2(firstGrowth.contains(QLatin1String("gen_snapshots.py:126:step"))
                     && firstGrowth.contains(QStringLiteral("+9.05 MiB (+3 allocs)")),
                 qPrintable(firstGrowth));
        QCOMPARE(w.title(), QStringLiteral("Δ diff_before.pickle → diff_after.pickle"));
        QVERIFY(!w.timeline()); // two files: no shared timeline
        QVERIFY(!w.view(DiffWindow::View::Timeline));
    }

    void swapNegatesEveryDelta_data()
    {
        QTest::addColumn<QString>("a");
        QTest::addColumn<QString>("b");
        QTest::newRow("before vs after") << "diff_before.pickle" << "diff_after.pickle";
        QTest::newRow("oom vs multistream") << "oom.pickle" << "multistream.pickle";
    }

    void swapNegatesEveryDelta()
    {
        QFETCH(QString, a);
        QFETCH(QString, b);
        DiffWindow w(side(qPrintable(a)), side(qPrintable(b)));
        std::map<QString, double> before, after;
        collect(w.model(), {}, {}, before);
        const model::DiffMetrics total = w.session()->result().totals.front().delta;
        QVERIFY(!before.empty());
        w.findChild<QAction*>(QStringLiteral("swapAction"))->trigger();
        QVERIFY(w.session()->isSwapped());
        collect(w.model(), {}, {}, after);
        QCOMPARE(after.size(), before.size());
        for (const auto& [path, delta] : before) {
            QVERIFY2(after.count(path), qPrintable(path));
            QCOMPARE(after[path], -delta);
        }
        const model::DiffMetrics swapped = w.session()->result().totals.front().delta;
        QCOMPARE(swapped.allocated, -total.allocated);
        QCOMPARE(swapped.reserved, -total.reserved);
        QCOMPARE(swapped.allocations, -total.allocations);
        QCOMPARE(w.title(), QStringLiteral("Δ %1 → %2").arg(b, a));
    }

    void filterKeepsOneSign_data()
    {
        QTest::addColumn<int>("filter");
        QTest::addColumn<int>("sign");
        QTest::newRow("growth only") << int(app::DiffFilter::Growth) << 1;
        QTest::newRow("shrink only") << int(app::DiffFilter::Shrink) << -1;
        QTest::newRow("all changes") << int(app::DiffFilter::All) << 0;
    }

    void filterKeepsOneSign()
    {
        QFETCH(int, filter);
        QFETCH(int, sign);
        DiffWindow w(side("oom.pickle"), side("multistream.pickle"));
        auto* box = w.findChild<QComboBox*>(QStringLiteral("filterBox"));
        box->setCurrentIndex(box->findData(filter));
        QCOMPARE(int(w.session()->filter()), filter);
        const QAbstractItemModel* proxy = w.proxy();
        QVERIFY(proxy->rowCount() > 0);
        int matching = 0;
        std::function<void(const QModelIndex&)> walk = [&](const QModelIndex& parent) {
            for (int r = 0; r < proxy->rowCount(parent); ++r) {
                const QModelIndex i = proxy->index(r, 0, parent);
                const double d = i.data(DiffModel::DeltaBytesRole).toDouble();
                // A row of the other sign only shows as the parent of a matching row (recursive filtering).
                if (sign != 0 && d * sign <= 0)
                    QVERIFY2(proxy->rowCount(i) > 0, qPrintable(i.data().toString()));
                else
                    ++matching;
                walk(i);
            }
        };
        walk({});
        QVERIFY(matching > 0);
        // Sorted by |Δ| descending at the top level.
        for (int r = 1; r < proxy->rowCount(); ++r)
            QVERIFY(std::abs(proxy->index(r - 1, 0).data(DiffModel::DeltaBytesRole).toDouble())
                    >= std::abs(proxy->index(r, 0).data(DiffModel::DeltaBytesRole).toDouble()));
    }

    void fileAgainstItselfIsZero_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("sameDocument");
        QTest::newRow("diff_before, one document twice") << "diff_before.pickle" << true;
        QTest::newRow("transformer_train, one document twice") << "transformer_train.pickle" << true;
        QTest::newRow("multistream, loaded twice") << "multistream.pickle" << false;
    }

    void fileAgainstItselfIsZero()
    {
        QFETCH(QString, file);
        QFETCH(bool, sameDocument);
        DiffInput a = side(qPrintable(file));
        DiffInput b = a;
        if (!sameDocument) {
            auto again = test::loadSession(file.toStdString());
            QVERIFY(again);
            b.document = again->documentPtr();
        }
        DiffWindow w(a, b);
        QCOMPARE(w.session()->sameDocument(), sameDocument);
        for (const model::DiffTotals& t : w.session()->result().totals)
            QCOMPARE(t.delta, model::DiffMetrics {});
        std::map<QString, double> rows;
        collect(w.model(), {}, {}, rows);
        QVERIFY(!rows.empty()); // unchanged stacks still show A and B
        for (const auto& [path, delta] : rows)
            QCOMPARE(delta, 0.0);
        QCOMPARE(w.session()->result().segments.onlyA.count, int64_t(0));
        QCOMPARE(w.session()->result().segments.onlyB.count, int64_t(0));
        auto* box = w.findChild<QComboBox*>(QStringLiteral("filterBox"));
        box->setCurrentIndex(box->findData(int(app::DiffFilter::Growth)));
        QCOMPARE(w.proxy()->rowCount(), 0);
    }

    void twoMomentsAgreeWithReplay_data()
    {
        QTest::addColumn<QString>("from");
        QTest::addColumn<QString>("to");
        QTest::newRow("step_1 to step_3") << "step_1" << "step_3";
        QTest::newRow("step_0 to step_5") << "step_0" << "step_5";
        QTest::newRow("step_3 back to step_1") << "step_3" << "step_1";
    }

    void twoMomentsAgreeWithReplay()
    {
        QFETCH(QString, from);
        QFETCH(QString, to);
        auto doc = document("transformer_train.pickle");
        const auto [ia, ib] = stepRange(*doc, from, to);
        QVERIFY(ia >= 0 && ib >= 0 && ia != ib);
        DiffWindow w(side("transformer_train.pickle", ia, 0), side("transformer_train.pickle", ib, 0));
        const model::DiffResult& r = w.session()->result();
        QVERIFY2(r.ok(), r.error.c_str());
        QVERIFY(r.sameTrace);
        const model::ReplaySeries& s = doc->replays[0].series();
        const model::DiffMetrics& d = r.totals.front().delta;
        QCOMPARE(d.allocated, s.allocated[size_t(ib)] - s.allocated[size_t(ia)]);
        QCOMPARE(d.active, s.active[size_t(ib)] - s.active[size_t(ia)]);
        QCOMPARE(d.reserved, s.reserved[size_t(ib)] - s.reserved[size_t(ia)]);
        // The Δ tree's root sums the same live bytes.
        double sum = 0;
        for (int row = 0; row < w.model()->rowCount(); ++row)
            sum += w.model()->index(row, 0).data(DiffModel::DeltaBytesRole).toDouble();
        QCOMPARE(int64_t(sum), d.active);
        // Lifetimes: new - freed bytes = Δ active.
        QCOMPARE(r.lifetimes.newAllocations.bytes - r.lifetimes.freed.bytes, d.active);
        const QString summary = w.summaryText();
        QVERIFY(summary.contains(QLatin1String("new (live in B only)")));
        QVERIFY(summary.contains(QLatin1String("surviving (live in both)")));
        // The timeline shows both cursors: the cursor at B.
        QVERIFY(w.timeline());
        QCOMPARE(w.sessionB()->cursor(), ib);
        QCOMPARE(w.sessionA()->cursor(), ia);
        QVERIFY(!w.findChild<QAction*>(QStringLiteral("perStepAction"))->isEnabled()); // one trace: no per step
    }

    void perStepNormalisation()
    {
        // Two runs of one program of unequal length: transformer_train at step_2's end and at its end.
        auto doc = document("transformer_train.pickle");
        app::Session s(doc);
        int64_t mid = -1;
        for (const auto& span : s.annotations())
            if (span.name == QLatin1String("step_2"))
                mid = span.end;
        QVERIFY(mid > 0);
        auto other = test::loadSession("transformer_train.pickle");
        DiffInput a = side("transformer_train.pickle", mid, 0);
        DiffInput b = side("transformer_train.pickle", model::EndOfTrace, 0);
        b.document = other->documentPtr(); // a different document: two runs
        DiffWindow w(a, b);
        app::DiffSession* session = w.session();
        QCOMPARE(session->stepsA(), 3); // step_0..step_2
        QVERIFY(session->stepsB() > 3);
        QVERIFY(session->perStepAvailable());
        auto* action = w.findChild<QAction*>(QStringLiteral("perStepAction"));
        QVERIFY(action->isEnabled());
        const QModelIndex top = w.model()->index(0, 0);
        const double a0 = top.data(DiffModel::BytesARole).toDouble();
        const double b0 = top.data(DiffModel::BytesBRole).toDouble();
        action->trigger();
        QVERIFY(session->perStep());
        const QModelIndex top2 = w.model()->index(0, 0);
        QCOMPARE(top2.data(DiffModel::BytesARole).toDouble(), a0 / session->stepsA());
        QCOMPARE(top2.data(DiffModel::BytesBRole).toDouble(), b0 / session->stepsB());
        QCOMPARE(top2.data(DiffModel::DeltaBytesRole).toDouble(), b0 / session->stepsB() - a0 / session->stepsA());
        QVERIFY(w.summaryText().contains(QLatin1String("Per step")));

        // The flame graph is normalised too: its root's width is Σ |B/stepsB - A/stepsA| over the stacks.
        const double divA = session->stepsA(), divB = session->stepsB();
        const auto tree = app::buildDiffTree(session->resultPtr(), model::CallTreeDirection::TopDown,
                                             app::DiffWeight::Gross, divA, divB);
        int64_t expected = 0;
        for (const model::DiffStackRow& row : session->resultPtr()->byStack)
            expected += std::abs(std::llround(double(row.bytesB) / divB - double(row.bytesA) / divA));
        QCOMPARE(tree.tree->root().bytes, expected);
        const auto plain = app::buildDiffTree(session->resultPtr(), model::CallTreeDirection::TopDown,
                                              app::DiffWeight::Gross);
        QVERIFY(plain.tree->root().bytes != expected);
    }

    // A diff of a file with C++ frames (PyTorch's default): with "Hide internal frames" (on by default) the Δ tree's
    // bottom-up roots are the stacks' sites, not the allocator's frames, and the same bytes are shown in fewer levels.
    void hideInternalFramesInTheDiffTree()
    {
        DiffWindow w(side("mlp_train.pickle", 100, 0), side("mlp_train.pickle", model::EndOfTrace, 0));
        app::DiffSession* session = w.session();
        QVERIFY(session->hideInternal());
        const auto& r = *session->resultPtr();
        const model::Snapshot& frames = *r.frames;
        const auto hidden = app::buildDiffTree(session->resultPtr(), model::CallTreeDirection::BottomUp,
                                               app::DiffWeight::Gross, 1, 1, true);
        const auto whole = app::buildDiffTree(session->resultPtr(), model::CallTreeDirection::BottomUp,
                                              app::DiffWeight::Gross, 1, 1, false);
        QCOMPARE(hidden.tree->root().bytes, whole.tree->root().bytes);
        QVERIFY(hidden.tree->root().bytes > 0);
        // Independently of the tree: each changed stack's site (model/framefilter.h) is a root of the hidden tree.
        std::set<model::FrameId> sites;
        for (const model::DiffStackRow& row : r.byStack) {
            if (row.deltaBytes == 0 && row.deltaCount == 0)
                continue;
            const int site = model::siteIndex(frames, row.stack);
            if (site >= 0)
                sites.insert(frames.stackBegin(row.stack)[site]);
        }
        QVERIFY(!sites.empty());
        std::set<model::FrameId> roots, wholeRoots;
        for (const model::CallNode& c : hidden.tree->children(model::CallTreeRoot))
            roots.insert(c.frame);
        for (const model::CallNode& c : whole.tree->children(model::CallTreeRoot))
            wholeRoots.insert(c.frame);
        QCOMPARE(roots, sites);
        QVERIFY(roots != wholeRoots); // without it the roots are the allocator's frames
        QVERIFY(hidden.tree->size() < whole.tree->size());
        // The toolbar's toggle rebuilds the window's tree.
        auto* action = w.findChild<QAction*>(QStringLiteral("diffHideInternalAction"));
        QVERIFY(action && action->isChecked());
        const int rowsHidden = w.model()->rowCount();
        action->setChecked(false);
        QVERIFY(!session->hideInternal());
        QVERIFY(w.model()->rowCount() != rowsHidden || w.model()->index(0, 0).data() != QVariant());
    }

    void screenshots_data()
    {
        QTest::addColumn<QString>("a");
        QTest::addColumn<QString>("b");
        QTest::addColumn<int>("view");
        const std::pair<DiffWindow::View, const char*> views[] = {
            { DiffWindow::View::Summary, "summary" }, { DiffWindow::View::Tree, "tree" },
            { DiffWindow::View::Flame, "flame" }, { DiffWindow::View::Segments, "segments" } };
        for (const auto& [v, name] : views)
            QTest::addRow("before-after %s", name) << "diff_before.pickle" << "diff_after.pickle" << int(v);
        for (const auto& [v, name] : views)
            QTest::addRow("transformer moments %s", name) << "transformer_train.pickle@moments" << "" << int(v);
        QTest::addRow("transformer moments timeline") << "transformer_train.pickle@moments" << "" << int(DiffWindow::View::Timeline);
    }

    void screenshots()
    {
        QFETCH(QString, a);
        QFETCH(QString, b);
        QFETCH(int, view);
        DiffInput sa, sb;
        QString name;
        if (b.isEmpty()) {
            const auto [ia, ib] = stepRange(*document("transformer_train.pickle"), QStringLiteral("step_1"), QStringLiteral("step_3"));
            sa = side("transformer_train.pickle", ia, 0);
            sb = side("transformer_train.pickle", ib, 0);
            name = QStringLiteral("diff-moments-");
        } else {
            sa = side(qPrintable(a));
            sb = side(qPrintable(b));
            name = QStringLiteral("diff-files-");
        }
        DiffWindow w(sa, sb);
        w.showView(DiffWindow::View(view));
        name += DiffWindow::viewName(DiffWindow::View(view)).mid(5);
        QVERIFY(test::saveScreenshot(w, name, QSize(1400, 800)));
        QCoreApplication::processEvents();
        const QImage image = w.grab().toImage();
        QVERIFY2(colourVariety(image) > 6, qPrintable(name));
    }
};

QTEST_MAIN(TestDiffWindow)
#include "tst_diffwindow.moc"
