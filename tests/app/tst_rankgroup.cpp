// The rank group: per-rank figures of real snapshots standing in for the ranks of one job, the median and the outlier
// by peak allocated, the model passes QAbstractItemModelTester, and one click asks for a diff (median vs that rank).
#include "apptestutil.h"
#include "model/diff.h"
#include "document/rankgroup.h"
#include "views/rankgroupview.h"

#include <QAbstractItemModelTester>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>

using namespace memscope;

namespace {

QStringList names(const char* spaceSeparated) { return QString::fromLatin1(spaceSeparated).split(QLatin1Char(' ')); }

std::vector<std::shared_ptr<const app::Document>> documents(const QStringList& names)
{
    std::vector<std::shared_ptr<const app::Document>> out;
    for (const QString& n : names) {
        auto s = test::loadSession(n.toStdString());
        if (s)
            out.push_back(s->documentPtr());
    }
    return out;
}

} // namespace

class TestRankGroup : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void medianAndOutlier_data()
    {
        QTest::addColumn<QStringList>("files");
        QTest::addColumn<QString>("median");
        QTest::addColumn<QString>("outlier"); // empty: none
        QTest::newRow("four ranks, oom.pickle is the outlier")
            << names("diff_before.pickle diff_after.pickle oom.pickle multistream.pickle")
            << "diff_before.pickle" << "oom.pickle";
        QTest::newRow("three ranks, odd count")
            << names("multistream.pickle diff_after.pickle diff_before.pickle") << "diff_before.pickle"
            << "multistream.pickle";
        QTest::newRow("two ranks: no outlier") << names("diff_before.pickle diff_after.pickle")
                                               << "diff_before.pickle" << "";
        QTest::newRow("identical ranks: no outlier")
            << names("diff_before.pickle diff_before.pickle diff_before.pickle") << "diff_before.pickle"
            << "";
    }

    void medianAndOutlier()
    {
        QFETCH(QStringList, files);
        QFETCH(QString, median);
        QFETCH(QString, outlier);
        const app::RankGroup g = app::makeRankGroup(documents(files));
        QCOMPARE(g.ranks.size(), size_t(files.size()));
        QVERIFY(g.median >= 0);
        QVERIFY(g.ranks[size_t(g.median)].path.endsWith(median));
        if (outlier.isEmpty())
            QCOMPARE(g.outlier, -1);
        else
            QVERIFY2(g.outlier >= 0 && g.ranks[size_t(g.outlier)].path.endsWith(outlier),
                     qPrintable(QString::number(g.outlier)));
        // Peaks are at least the end state's.
        for (const app::RankStats& r : g.ranks) {
            QVERIFY(r.peakAllocated >= r.allocated);
            QVERIFY(r.peakReserved >= r.reserved);
            QCOMPARE(r.fragmentation >= 0, true);
        }
    }

    void figuresOfKnownFiles()
    {
        const auto docs = documents(names("diff_before.pickle oom.pickle"));
        const app::RankGroup g = app::makeRankGroup(docs);
        // The same end-state figures as the diff engine's totals (model/diff.h), which the diff summary shows;
        // oom.pickle's trace has an OOM entry.
        model::DiffSide side;
        side.snapshot = docs[0]->snapshot;
        const model::DiffMetrics end = model::computeDiff(side, side).totals.front().a;
        QCOMPARE(g.ranks[0].allocated, end.allocated);
        QCOMPARE(g.ranks[0].reserved, end.reserved);
        QCOMPARE(g.ranks[0].fragmentation, end.fragmentation);
        QCOMPARE(g.ranks[0].reserved, model::ByteCount(186) << 20);
        QCOMPARE(g.ranks[0].ooms, 0);
        QVERIFY(g.ranks[1].ooms >= 1);
    }

    void modelPassesTester()
    {
        app::RankGroupModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setGroup(std::make_shared<app::RankGroup>(
            app::makeRankGroup(documents(names("diff_before.pickle diff_after.pickle oom.pickle")))));
        QCOMPARE(model.rowCount(), 3);
        QCOMPARE(model.index(2, app::RankGroupModel::RankColumn).data(app::RankGroupModel::IsOutlierRole).toBool(), true);
        QVERIFY(model.index(2, 0).data(Qt::BackgroundRole).isValid());
        model.setGroup(nullptr);
        QCOMPARE(model.rowCount(), 0);
    }

    void oneClickOpensDiff()
    {
        auto group = std::make_shared<app::RankGroup>(app::makeRankGroup(
            documents(names("diff_before.pickle diff_after.pickle oom.pickle multistream.pickle"))));
        app::RankGroupView view(group);
        QSignalSpy spy(&view, &app::RankGroupView::diffRequested);
        // Double-click the outlier's row.
        QTableView* table = view.table();
        view.resize(1200, 500);
        view.show();
        const QModelIndex outlierCell = table->model()->index(group->outlier, 1);
        QVERIFY(outlierCell.isValid());
        Q_EMIT table->doubleClicked(outlierCell);
        QCOMPARE(spy.size(), 1);
        QCOMPARE(spy.first().at(0).toInt(), group->median);
        QCOMPARE(spy.first().at(1).toInt(), group->outlier);
        // Select two rows and diff them.
        table->selectRow(1);
        table->selectionModel()->select(table->model()->index(3, 0),
                                        QItemSelectionModel::Select | QItemSelectionModel::Rows);
        view.findChild<QPushButton*>(QStringLiteral("diffSelectedButton"))->click();
        QCOMPARE(spy.size(), 2);
        QCOMPARE(spy.at(1).at(0).toInt(), 1);
        QCOMPARE(spy.at(1).at(1).toInt(), 3);
        QVERIFY(test::saveScreenshot(view, QStringLiteral("rank-group"), QSize(1200, 360)));
    }
};

QTEST_MAIN(TestRankGroup)
#include "tst_rankgroup.moc"
