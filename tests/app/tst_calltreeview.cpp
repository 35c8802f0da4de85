// Tests of the call tree and flame graph (app/itemmodels/calltreemodel, app/views/calltreeview,
// app/views/flamegraphview) on the real snapshots in ../shared/snapshots: QAbstractItemModelTester on the model and the
// proxy, the tree following the Session cursor (synchronously and through the thread pool, stale jobs dropped), search,
// the frame filter toggle, expand-to-largest, the selection link, the icicle geometry (hit tests and rectangles at
// several zooms), and screenshots of the tree and the flame graph of every snapshot. Offscreen, GUI thread.
#include "apptestutil.h"
#include "itemmodels/calltreemodel.h"
#include "model/calltree.h"
#include "model/framefilter.h"
#include "report/memoryviz.h"
#include "views/calltreeview.h"
#include "views/flamegraphview.h"

#include <QAbstractItemModelTester>
#include <QAction>
#include <QDir>
#include <QHelpEvent>
#include <QImage>
#include <QLineEdit>
#include <QSet>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTest>
#include <QToolTip>
#include <QTreeView>

#include <functional>
#include <map>
#include <memory>

using namespace memscope;
using app::CallTreeModel;
using app::CallTreeView;
using app::FlameGraphView;
using app::IcicleLayout;
using model::CallNodeId;
using model::CallTree;
using model::CallTreeDirection;
using model::FrameId;

Q_DECLARE_METATYPE(CallTreeDirection)

namespace {

QStringList snapshotFiles()
{
    const QDir dir(QString::fromStdString(test::snapshotPath("")));
    return dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name);
}

// Sessions are loaded once per process (big_trace takes a while to decompress); tests put cursor and filters back.
app::Session* session(const QString& file)
{
    static std::map<QString, std::unique_ptr<app::Session>> cache;
    auto& slot = cache[file];
    if (!slot)
        slot = test::loadSession(file.toStdString());
    if (slot) {
        slot->setCursor(slot->entryCount());
        slot->setFrameFilter(true);
        slot->setSelection(model::NoAllocation);
    }
    return slot.get();
}

int64_t activeBytes(const model::ReplayState& state)
{
    int64_t sum = 0;
    for (const model::ReplayBlock& b : state.blocks)
        if (b.state == model::BlockState::ActiveAllocated || b.state == model::BlockState::ActivePendingFree)
            sum += b.size;
    return sum;
}

// Every row of a (proxy) model, depth first.
void forEachRow(const QAbstractItemModel* m, const QModelIndex& parent,
                const std::function<void(const QModelIndex&)>& f)
{
    for (int r = 0; r < m->rowCount(parent); ++r) {
        const QModelIndex i = m->index(r, 0, parent);
        f(i);
        forEachRow(m, i, f);
    }
}

// A hand-made tree for the geometry tests: frames 1..4 are A, B, C, D.
//   root 100 (self 10) ── A 60 ── B 40
//                      │       └─ C 20
//                      └─ D 30
std::shared_ptr<const CallTree> geometryTree(bool diff)
{
    model::CallTreeBuilder b({ CallTreeDirection::TopDown, false });
    const FrameId A { 1 }, B { 2 }, C { 3 }, D { 4 };
    if (diff) {
        // A diff: A grew by 50 = B +80, C -30. C gets no width, B is clipped to A's.
        b.add(std::vector<FrameId> { A, B }, 80, 1);
        b.add(std::vector<FrameId> { A, C }, -30, -1);
    } else {
        b.add(std::vector<FrameId> { A, B }, 40, 1);
        b.add(std::vector<FrameId> { A, C }, 20, 1);
        b.add(std::vector<FrameId> { D }, 30, 1);
        b.add(std::vector<FrameId> {}, 10, 1);
    }
    return std::make_shared<const CallTree>(b.finish());
}

CallNodeId nodeOfPath(const CallTree& t, const QString& path)
{
    if (path == QLatin1String("-"))
        return model::NoCallNode;
    std::vector<FrameId> frames;
    for (const QString& name : path.split(QLatin1Char(';'), Qt::SkipEmptyParts))
        frames.push_back(FrameId { uint32_t(name.at(0).unicode() - u'A' + 1) });
    return t.findPath(frames);
}

// Distinct colours in an image, up to `limit`.
int distinctColors(const QImage& image, int limit = 64)
{
    QSet<QRgb> seen;
    for (int y = 0; y < image.height(); y += 2)
        for (int x = 0; x < image.width(); x += 2)
            if (seen.size() < limit)
                seen.insert(image.pixel(x, y));
    return int(seen.size());
}

} // namespace

class TestCallTreeView : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void modelTester_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<CallTreeDirection>("direction");
        QTest::addColumn<QString>("search");
        for (const char* f : { "mlp_train.pickle", "transformer_train.pickle", "two_device.pickle", "oom.pickle" }) {
            QTest::addRow("%s top-down", f) << QString::fromLatin1(f) << CallTreeDirection::TopDown << QString();
            QTest::addRow("%s bottom-up", f) << QString::fromLatin1(f) << CallTreeDirection::BottomUp << QString();
            QTest::addRow("%s searching 'py'", f)
                << QString::fromLatin1(f) << CallTreeDirection::TopDown << QStringLiteral("py");
        }
    }

    void modelTester()
    {
        QFETCH(QString, file);
        QFETCH(CallTreeDirection, direction);
        QFETCH(QString, search);
        app::Session* s = session(file);
        QVERIFY(s);
        std::vector<model::CallSample> samples;
        CallTree::appendActiveBlocks(s->state(), samples);
        auto tree = std::make_shared<const CallTree>(CallTree::build(s->snapshot(), samples, { direction, true }));

        CallTreeModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        auto* proxy = app::makeCallTreeProxy(&model, &model);
        QAbstractItemModelTester proxyTester(proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
        proxy->setFilterFixedString(search);
        model.setTree(s->documentPtr()->snapshot, tree);
        QCOMPARE(model.rowCount(), int(tree->root().childCount));

        // Every node is a row whose roles give the node's raw values, and indexOf/nodeOf round-trip.
        int rows = 0;
        forEachRow(&model, {}, [&](const QModelIndex& i) {
            ++rows;
            const CallNodeId id = model.nodeOf(i);
            const model::CallNode& n = tree->node(id);
            QCOMPARE(model.indexOf(id), i);
            QCOMPARE(i.data(CallTreeModel::BytesRole).toLongLong(), n.bytes);
            QCOMPARE(i.data(CallTreeModel::CountRole).toLongLong(), n.count);
            QCOMPARE(i.siblingAtColumn(CallTreeModel::SelfBytesColumn).data(CallTreeModel::SortRole).toLongLong(),
                     n.selfBytes);
            QVERIFY(!i.data(Qt::DisplayRole).toString().isEmpty());
            QVERIFY(!i.data(Qt::ToolTipRole).toString().isEmpty());
        });
        QCOMPARE(rows, int(tree->size()) - 1);
        model.setTree(s->documentPtr()->snapshot, std::make_shared<const CallTree>()); // and an empty tree
        QCOMPARE(model.rowCount(), 0);
    }

    void frameLabels()
    {
        // basename:line:name (PyTorch's _frame_fmt), the function alone where there is no file; the full path in
        // the search text.
        app::Session* s = session(QStringLiteral("mlp_train.pickle"));
        QVERIFY(s);
        const model::Snapshot& snap = s->snapshot();
        bool sawPython = false, sawCpp = false;
        for (uint32_t f = 0; f < snap.frames.size(); ++f) {
            const model::Frame& fr = snap.frame(FrameId { f });
            const QString file
                = QString::fromUtf8(snap.str(fr.filename).data(), qsizetype(snap.str(fr.filename).size()));
            const QString label = app::frameLabel(snap, FrameId { f });
            QVERIFY(app::frameFullText(snap, FrameId { f }).startsWith(file + QLatin1Char(':')));
            const QString shortName = app::shortFunctionName(snap, FrameId { f });
            if (file.isEmpty() || file == QLatin1String("??")) {
                // No file: the function alone, without PyTorch's "??:0:".
                QVERIFY(!label.startsWith(QLatin1String("??:")));
                QCOMPARE(app::frameDisplayLabel(snap, FrameId { f }), shortName);
            } else {
                QVERIFY(label.startsWith(file.section(QLatin1Char('/'), -1) + QLatin1Char(':')));
                const QString fileAndLine = label.section(QLatin1Char(':'), 0, 1) + QLatin1Char(':');
                QVERIFY(app::frameDisplayLabel(snap, FrameId { f }).startsWith(fileAndLine));
            }
            QVERIFY(shortName.size() <= int(snap.str(fr.name).size()) + 4);
            sawPython = sawPython || file.endsWith(QLatin1String(".py"));
            sawCpp = sawCpp || shortName.contains(QStringLiteral("(\u2026)"));
        }
        QVERIFY(sawPython);
        QVERIFY(sawCpp);
    }

    void shortNames_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("expected");
        QTest::newRow("python name") << QStringLiteral("<module>") << QStringLiteral("<module>");
        QTest::newRow("plain C function") << QStringLiteral("PyObject_Call") << QStringLiteral("PyObject_Call");
        QTest::newRow("templates and parameters")
            << QStringLiteral("c10::impl::wrap_kernel_functor_unboxed_<c10::F<at::Tensor (at::Tensor const&)>, "
                              "at::Tensor>::call(c10::OperatorKernel*, at::Tensor const&)")
            << QStringLiteral("c10::impl::wrap_kernel_functor_unboxed_<\u2026>::call(\u2026)");
        QTest::newRow("anonymous namespace")
            << QStringLiteral("torch::autograd::VariableType::(anonymous namespace)::addmm(c10::DispatchKeySet)")
            << QStringLiteral("torch::autograd::VariableType::(anonymous)::addmm(\u2026)");
        QTest::newRow("operator()") << QStringLiteral("at::Foo::operator()(int) const")
                                    << QStringLiteral("at::Foo::operator()(\u2026) const");
    }

    void shortNames()
    {
        QFETCH(QString, name);
        QFETCH(QString, expected);
        model::Snapshot s;
        model::StackInterner interner(s);
        const FrameId f = interner.frame(s.strings.intern(name.toStdString()), s.strings.intern("x.cpp"), 1);
        QCOMPARE(app::shortFunctionName(s, f), expected);
    }

    // A Windows path is shortened to its file as a POSIX one is: the flame graph's bar label and the details pane.
    void windowsPathsAreShortened()
    {
        auto snap = std::make_shared<model::Snapshot>();
        model::StackInterner interner(*snap);
        const FrameId user = interner.frame(snap->strings.intern("update_nodes"),
                                            snap->strings.intern("C:\\research\\gnn\\models.py"), 174);
        const FrameId lib = interner.frame(
            snap->strings.intern("forward"),
            snap->strings.intern(
                "C:\\Users\\ana\\venv\\Lib\\site-packages\\transformers\\models\\gpt2\\modeling_gpt2.py"),
            310);
        const model::StackId stack = interner.stack({ lib, user });
        const std::vector<model::CallSample> samples { { stack, 4096, 1 } };
        auto tree = std::make_shared<const CallTree>(
            CallTree::build(*snap, samples, { CallTreeDirection::TopDown, false }));
        FlameGraphView flame;
        flame.setTree(snap, tree);
        QCOMPARE(flame.label(user), QStringLiteral("update_nodes  models.py:174"));
        QCOMPARE(flame.label(lib), QStringLiteral("forward  modeling_gpt2.py:310"));
        QCOMPARE(app::frameDisplayLabel(*snap, user), QStringLiteral("models.py:174:update_nodes"));
    }

    // A trace recorded in anomaly mode (corpus/anomaly_forward_frames.pickle, real): backward allocations without a
    // stack of their own are filed under the forward pass their autograd node came from, not "<no stack recorded>",
    // and selecting one selects that path.
    void backwardAllocationsUnderTheirForwardPass()
    {
        auto s = test::loadSession(test::dataPath("corpus/anomaly_forward_frames.pickle"));
        QVERIFY(s);
        s->setCursor(s->replay().peakActive().index);
        CallTreeView view(s.get());
        view.rebuildNow();
        const model::Snapshot& snap = s->snapshot();
        int64_t forwardBytes = 0, stacklessBytes = 0;
        model::AllocationId backward = model::NoAllocation;
        for (const model::ReplayBlock& b : s->state().blocks) {
            if (b.state == model::BlockState::Inactive)
                continue;
            const model::StackId tree = s->treeStack(b.allocation);
            if (snap.stackSize(b.stack) == 0 && tree != b.stack) {
                forwardBytes += b.size;
                backward = b.allocation;
            } else if (snap.stackSize(b.stack) == 0) {
                stacklessBytes += b.size;
            }
        }
        QVERIFY(forwardBytes > 0); // the peak holds backward allocations with a forward pass
        // "<no stack recorded>" holds only what has neither.
        int64_t noStackRow = 0;
        for (int r = 0; r < view.proxy()->rowCount(); ++r) {
            const QModelIndex i = view.proxy()->index(r, 0);
            if (i.data().toString().contains(QLatin1String("no stack recorded")))
                noStackRow = i.data(CallTreeModel::BytesRole).toLongLong();
        }
        QCOMPARE(noStackRow, stacklessBytes);
        s->setSelection(backward);
        const CallNodeId expected = view.tree().find(snap, s->treeStack(backward));
        QVERIFY(expected != model::NoCallNode);
        QCOMPARE(view.model()->nodeOf(view.proxy()->mapToSource(view.treeView()->currentIndex())), expected);
    }

    void followsCursor_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("async");
        for (const char* f : { "mlp_train.pickle", "transformer_train.pickle", "multistream.pickle" }) {
            QTest::addRow("%s synchronous", f) << QString::fromLatin1(f) << false;
            QTest::addRow("%s on the thread pool", f) << QString::fromLatin1(f) << true;
        }
    }

    void followsCursor()
    {
        QFETCH(QString, file);
        QFETCH(bool, async);
        app::Session* s = session(file);
        QVERIFY(s);
        CallTreeView view(s);
        view.setAsyncThreshold(async ? 0 : CallTreeView::DefaultAsyncThreshold);
        view.resize(900, 500);
        QSignalSpy rebuilt(&view, &CallTreeView::treeRebuilt);
        view.show(); // the first tree is built once the view shows
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QTRY_COMPARE_WITH_TIMEOUT(rebuilt.count(), 1, 10000);
        const int64_t n = s->entryCount();
        for (int64_t cursor : { n / 4, n / 2, int64_t(0), s->replay().peakActive().index, n }) {
            if (cursor == s->cursor())
                continue;
            rebuilt.clear();
            s->setCursor(cursor);
            QVERIFY(rebuilt.wait(10000));
            QCOMPARE(view.tree().root().bytes, activeBytes(s->state()));
            // The top-level rows add up to the root (no root self cost with real stacks or the <no stack> node).
            qlonglong sum = 0;
            for (int r = 0; r < view.proxy()->rowCount(); ++r)
                sum += view.proxy()->index(r, 0).data(CallTreeModel::BytesRole).toLongLong();
            QCOMPARE(sum, qlonglong(activeBytes(s->state())));
        }
    }

    void staleJobsAreDropped()
    {
        app::Session* s = session(QStringLiteral("transformer_train.pickle"));
        QVERIFY(s);
        // Hidden, so that only the rebuilds started here run (a hidden view defers its own until shown).
        CallTreeView view(s);
        QSignalSpy rebuilt(&view, &CallTreeView::treeRebuilt);
        // Three background jobs started before any can finish: only the last one's tree may reach the screen.
        const int64_t cursors[] = { s->entryCount() / 5, s->entryCount() / 3, s->replay().peakActive().index };
        for (int64_t c : cursors) {
            s->setCursor(c);
            view.rebuildInBackground();
        }
        QVERIFY(rebuilt.isEmpty()); // nothing is applied before the event loop runs
        QTRY_COMPARE(rebuilt.count(), 1);
        QTest::qWait(200); // the stale jobs' results arrive too, and are dropped
        QCOMPARE(rebuilt.count(), 1);
        QCOMPARE(view.tree().root().bytes, activeBytes(s->state()));
    }

    void search_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<bool>("expectRows");
        QTest::newRow("file name") << QStringLiteral("linear.py") << true;
        QTest::newRow("function, other case") << QStringLiteral("FORWARD") << true;
        QTest::newRow("C++ function") << QStringLiteral("at::native::empty_cuda") << true;
        QTest::newRow("directory only in the full path") << QStringLiteral("torch/nn/modules/") << true;
        QTest::newRow("no such frame") << QStringLiteral("no_such_frame_xyz") << false;
        QTest::newRow("empty shows everything") << QString() << true;
    }

    void search()
    {
        QFETCH(QString, text);
        QFETCH(bool, expectRows);
        app::Session* s = session(QStringLiteral("mlp_train.pickle"));
        QVERIFY(s);
        s->setFrameFilter(false);
        CallTreeView view(s);
        view.rebuildNow();
        const CallTree& tree = view.tree();
        view.setSearchText(text);
        QCOMPARE(view.findChild<QLineEdit*>(QStringLiteral("searchEdit"))->text(), text);

        // Expected: the nodes with a match in their subtree (recursive filtering), found from the tree directly.
        const model::Snapshot& snap = s->snapshot();
        std::vector<uint8_t> keep(tree.size(), 0);
        for (uint32_t i = uint32_t(tree.size()); i-- > 1;) {
            const model::CallNode& n = tree.nodes()[i];
            if (app::frameFullText(snap, n.frame).contains(text, Qt::CaseInsensitive))
                keep[i] = 1;
            if (keep[i])
                keep[model::raw(n.parent)] = 1;
        }
        int expected = 0;
        for (uint32_t i = 1; i < tree.size(); ++i)
            expected += keep[i];
        int shown = 0;
        forEachRow(view.proxy(), {}, [&](const QModelIndex& i) {
            ++shown;
            QVERIFY(keep[model::raw(view.model()->nodeOf(view.proxy()->mapToSource(i)))]);
        });
        QCOMPARE(shown, expected);
        QCOMPARE(shown > 0, expectRows);
        if (!text.isEmpty() && expectRows) {
            // The matches are revealed: some expanded row's child matches.
            bool revealed = false;
            forEachRow(view.proxy(), {}, [&](const QModelIndex& i) {
                revealed = revealed
                    || (i.data(CallTreeModel::FilterRole).toString().contains(text, Qt::CaseInsensitive)
                        && (!i.parent().isValid() || view.treeView()->isExpanded(i.parent())));
            });
            QVERIFY(revealed);
        }
        s->setFrameFilter(true);
    }

    void frameFilterToggle()
    {
        app::Session* s = session(QStringLiteral("mlp_train.pickle"));
        QVERIFY(s);
        CallTreeView view(s);
        view.rebuildNow();
        auto* action = view.findChild<QAction*>(QStringLiteral("frameFilterAction"));
        QVERIFY(action);
        QVERIFY(action->isChecked());
        const size_t filteredNodes = view.tree().size();
        const uint32_t filteredDepth = view.tree().maxDepth();
        const int64_t bytes = view.tree().root().bytes;

        action->trigger(); // off
        QVERIFY(!s->frameFilter());
        view.rebuildNow();
        QVERIFY(!view.tree().options().frameFilter);
        QVERIFY(view.tree().size() > filteredNodes);
        QVERIFY(view.tree().maxDepth() > filteredDepth);
        QCOMPARE(view.tree().root().bytes, bytes);
        // The frames PyTorch hides are now rows.
        bool sawHidden = false;
        for (const model::CallNode& n : view.tree().nodes()) {
            if (model::isPseudoFrame(n.frame))
                continue;
            const model::Frame& f = s->snapshot().frame(n.frame);
            sawHidden = sawHidden || !model::keepFrame(s->snapshot().str(f.name), s->snapshot().str(f.filename));
        }
        QVERIFY(sawHidden);

        s->setFrameFilter(true); // from elsewhere: the action follows
        QVERIFY(action->isChecked());
        view.rebuildNow();
        QCOMPARE(view.tree().size(), filteredNodes);
    }

    void expandToLargest_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<CallTreeDirection>("direction");
        QTest::addColumn<int>("sortColumn");
        for (const char* f : { "mlp_train.pickle", "transformer_train.pickle", "diff_after.pickle" }) {
            QTest::addRow("%s top-down", f)
                << QString::fromLatin1(f) << CallTreeDirection::TopDown << int(CallTreeModel::BytesColumn);
            QTest::addRow("%s bottom-up", f)
                << QString::fromLatin1(f) << CallTreeDirection::BottomUp << int(CallTreeModel::BytesColumn);
            QTest::addRow("%s sorted by name", f)
                << QString::fromLatin1(f) << CallTreeDirection::TopDown << int(CallTreeModel::FunctionColumn);
        }
    }

    void expandToLargest()
    {
        QFETCH(QString, file);
        QFETCH(CallTreeDirection, direction);
        QFETCH(int, sortColumn);
        app::Session* s = session(file);
        QVERIFY(s);
        CallTreeView view(s);
        view.setDirection(direction);
        view.rebuildNow();
        view.treeView()->sortByColumn(sortColumn, Qt::AscendingOrder);
        view.treeView()->collapseAll();
        const CallTree& tree = view.tree();
        QCOMPARE(tree.options().direction, direction);

        // Expected: from the root, the child with the most bytes (the first of equals, in tree order) to a leaf.
        std::vector<CallNodeId> path;
        for (CallNodeId n = model::CallTreeRoot; tree.node(n).childCount > 0;) {
            n = tree.childId(n, 0);
            path.push_back(n);
        }
        QVERIFY(!path.empty());
        const model::AllocationId selectedBefore = s->selection();
        QCOMPARE(view.expandToLargest(), path.back());
        for (size_t k = 0; k + 1 < path.size(); ++k) {
            const QModelIndex i = view.proxy()->mapFromSource(view.model()->indexOf(path[k]));
            QVERIFY2(view.treeView()->isExpanded(i), qPrintable(QStringLiteral("level %1").arg(k)));
        }
        QCOMPARE(view.model()->nodeOf(view.proxy()->mapToSource(view.treeView()->currentIndex())), path.back());
        QCOMPARE(s->selection(), selectedBefore); // expanding never selects an allocation
    }

    void selectionLink()
    {
        app::Session* s = session(QStringLiteral("transformer_train.pickle"));
        QVERIFY(s);
        CallTreeView view(s);
        view.rebuildNow();
        // A row reached by one allocation selects it in the Session.
        const CallTree& tree = view.tree();
        CallNodeId single = model::NoCallNode;
        for (uint32_t i = 1; i < tree.size() && single == model::NoCallNode; ++i)
            if (tree.nodes()[i].samples == 1)
                single = CallNodeId { i };
        QVERIFY(single != model::NoCallNode);
        const QModelIndex row = view.proxy()->mapFromSource(view.model()->indexOf(single));
        view.treeView()->setCurrentIndex(row);
        QCOMPARE(s->selection(), model::AllocationId { tree.node(single).key });
        QCOMPARE(view.flameGraph()->highlighted(), single);

        // A selection made elsewhere selects the allocation's call path here.
        view.treeView()->setCurrentIndex({});
        const model::ReplayBlock* block = nullptr;
        for (const model::ReplayBlock& b : s->state().blocks)
            if (b.state == model::BlockState::ActiveAllocated && b.allocation != s->selection())
                block = &b;
        QVERIFY(block);
        s->setSelection(block->allocation);
        const CallNodeId expected = tree.find(s->snapshot(), block->stack);
        QCOMPARE(view.model()->nodeOf(view.proxy()->mapToSource(view.treeView()->currentIndex())), expected);
        QCOMPARE(s->selection(), block->allocation); // and it is not written back
    }

    void followsSelectionToAnotherCursor_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("async");
        QTest::addColumn<bool>("selectFirst");
        for (const char* f : { "mlp_train.pickle", "transformer_train.pickle" }) {
            for (bool async : { false, true }) {
                QTest::addRow("%s %s, cursor then selection", f, async ? "thread pool" : "synchronous")
                    << QString::fromLatin1(f) << async << false;
                QTest::addRow("%s %s, selection then cursor", f, async ? "thread pool" : "synchronous")
                    << QString::fromLatin1(f) << async << true;
            }
        }
    }

    // P, L and O move the cursor and select an allocation at once: the tree, built for the new cursor after the
    // selection came, shows the selection's call path, not the row that was current before.
    void followsSelectionToAnotherCursor()
    {
        QFETCH(QString, file);
        QFETCH(bool, async);
        QFETCH(bool, selectFirst);
        app::Session* s = session(file);
        QVERIFY(s);
        CallTreeView view(s);
        view.setAsyncThreshold(async ? 0 : CallTreeView::DefaultAsyncThreshold);
        view.resize(900, 500);
        QSignalSpy rebuilt(&view, &CallTreeView::treeRebuilt);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QTRY_COMPARE_WITH_TIMEOUT(rebuilt.count(), 1, 10000);
        const QModelIndex before = view.treeView()->currentIndex();
        QVERIFY(before.isValid()); // expanded to the largest path at the end
        // An allocation live at the peak, of another call path than the current row's.
        const int64_t peak = s->replay().peakActive().index;
        QVERIFY(peak != s->cursor());
        const model::ReplayState atPeak = s->replay().stateAt(peak);
        const std::vector<FrameId> beforePath
            = view.tree().framePath(view.model()->nodeOf(view.proxy()->mapToSource(before)));
        // A block live there whose call path the tree on screen (the end's) does not have, else the smallest one.
        model::AllocationId target = model::NoAllocation;
        int64_t smallest = INT64_MAX;
        bool absent = false;
        for (const model::ReplayBlock& b : atPeak.blocks) {
            if (b.state != model::BlockState::ActiveAllocated)
                continue;
            const bool here = view.tree().find(s->snapshot(), b.stack) != model::NoCallNode;
            if ((!here && !absent) || (here == !absent && b.size < smallest)) {
                absent = absent || !here;
                smallest = b.size;
                target = b.allocation;
            }
        }
        QVERIFY(target != model::NoAllocation);
        rebuilt.clear();
        if (selectFirst) {
            s->setSelection(target);
            s->setCursor(peak);
        } else {
            s->setCursor(peak);
            s->setSelection(target);
        }
        QTRY_VERIFY_WITH_TIMEOUT(rebuilt.count() >= 1 && !view.isRebuildPending(), 10000);
        QTest::qWait(50);
        const model::Allocation& a = s->replay().allocation(target);
        const CallNodeId expected = view.tree().find(s->snapshot(), a.stack);
        QVERIFY(expected != model::NoCallNode);
        QVERIFY(view.tree().framePath(expected) != beforePath); // the test means something
        QCOMPARE(view.model()->nodeOf(view.proxy()->mapToSource(view.treeView()->currentIndex())), expected);
        QCOMPARE(s->selection(), target); // not written back
    }

    void directionToggle()
    {
        app::Session* s = session(QStringLiteral("mlp_train.pickle"));
        QVERIFY(s);
        CallTreeView view(s);
        view.rebuildNow();
        const int64_t bytes = view.tree().root().bytes;
        view.findChild<QAction*>(QStringLiteral("bottomUpAction"))->trigger();
        QCOMPARE(view.direction(), CallTreeDirection::BottomUp);
        view.rebuildNow();
        QCOMPARE(view.tree().options().direction, CallTreeDirection::BottomUp);
        QCOMPARE(view.tree().root().bytes, bytes);
        // Bottom-up's top level: the frames that allocated (innermost), e.g. the caching allocator's entry points.
        QVERIFY(view.tree().root().childCount > 0);
    }

    void icicleGeometry_data()
    {
        QTest::addColumn<bool>("diff");
        QTest::addColumn<QString>("zoom"); // a path of frames "A;B", "" for the root
        QTest::addColumn<QPointF>("point");
        QTest::addColumn<QString>("expected"); // a path, "-" for none

        // width 1000, rows 10 px; the root holds 100 bytes: 10 px per byte.
        QTest::newRow("root row") << false << QString() << QPointF(5, 5) << QString();
        QTest::newRow("A, left edge") << false << QString() << QPointF(0, 15) << QStringLiteral("A");
        QTest::newRow("A, last pixel") << false << QString() << QPointF(599.5, 15) << QStringLiteral("A");
        QTest::newRow("D after A") << false << QString() << QPointF(600, 15) << QStringLiteral("D");
        QTest::newRow("root's self part") << false << QString() << QPointF(950, 15) << QStringLiteral("-");
        QTest::newRow("B under A") << false << QString() << QPointF(100, 25) << QStringLiteral("A;B");
        QTest::newRow("C under A") << false << QString() << QPointF(500, 25) << QStringLiteral("A;C");
        QTest::newRow("under D: D's self") << false << QString() << QPointF(700, 25) << QStringLiteral("-");
        QTest::newRow("below the deepest row") << false << QString() << QPointF(100, 35) << QStringLiteral("-");
        QTest::newRow("left of the widget") << false << QString() << QPointF(-1, 5) << QStringLiteral("-");
        QTest::newRow("right edge is outside") << false << QString() << QPointF(1000, 5) << QStringLiteral("-");
        QTest::newRow("zoom A: A fills the row")
            << false << QStringLiteral("A") << QPointF(990, 15) << QStringLiteral("A");
        QTest::newRow("zoom A: root above is the breadcrumb")
            << false << QStringLiteral("A") << QPointF(990, 5) << QString();
        QTest::newRow("zoom A: B takes 2/3")
            << false << QStringLiteral("A") << QPointF(666, 25) << QStringLiteral("A;B");
        QTest::newRow("zoom A: C takes the last 1/3")
            << false << QStringLiteral("A") << QPointF(667, 25) << QStringLiteral("A;C");
        QTest::newRow("zoom B: a leaf fills its row")
            << false << QStringLiteral("A;B") << QPointF(999, 25) << QStringLiteral("A;B");
        QTest::newRow("zoom B: its parent above")
            << false << QStringLiteral("A;B") << QPointF(0, 15) << QStringLiteral("A");
        QTest::newRow("diff: B clipped to A") << true << QString() << QPointF(999, 25) << QStringLiteral("A;B");
        QTest::newRow("diff: A holds the root's 50 bytes")
            << true << QString() << QPointF(999, 15) << QStringLiteral("A");
    }

    void icicleGeometry()
    {
        QFETCH(bool, diff);
        QFETCH(QString, zoom);
        QFETCH(QPointF, point);
        QFETCH(QString, expected);
        IcicleLayout layout;
        layout.setTree(geometryTree(diff));
        layout.setWidth(1000);
        layout.setRowHeight(10);
        const CallTree& t = *layout.tree();
        layout.setZoom(nodeOfPath(t, zoom));
        QCOMPARE(layout.zoom(), nodeOfPath(t, zoom));
        const CallNodeId want = nodeOfPath(t, expected);
        QCOMPARE(layout.nodeAt(point), want);
        // The node found contains the point; rect() and nodeAt() agree.
        if (want != model::NoCallNode)
            QVERIFY(layout.rect(want).contains(point));
        QCOMPARE(layout.contentHeight(), 30.0);
    }

    void icicleRects_data()
    {
        QTest::addColumn<QString>("zoom");
        QTest::addColumn<QString>("node");
        QTest::addColumn<QRectF>("expected");
        QTest::newRow("root") << QString() << QString() << QRectF(0, 0, 1000, 10);
        QTest::newRow("A") << QString() << QStringLiteral("A") << QRectF(0, 10, 600, 10);
        QTest::newRow("C") << QString() << QStringLiteral("A;C") << QRectF(400, 20, 200, 10);
        QTest::newRow("D") << QString() << QStringLiteral("D") << QRectF(600, 10, 300, 10);
        QTest::newRow("zoom A: root is full width") << QStringLiteral("A") << QString() << QRectF(0, 0, 1000, 10);
        QTest::newRow("zoom A: A is full width")
            << QStringLiteral("A") << QStringLiteral("A") << QRectF(0, 10, 1000, 10);
        QTest::newRow("zoom A: C") << QStringLiteral("A") << QStringLiteral("A;C")
                                   << QRectF(1000.0 * 40 / 60, 20, 1000.0 * 20 / 60, 10);
        QTest::newRow("zoom A: D is not shown") << QStringLiteral("A") << QStringLiteral("D") << QRectF();
    }

    void icicleRects()
    {
        QFETCH(QString, zoom);
        QFETCH(QString, node);
        QFETCH(QRectF, expected);
        IcicleLayout layout;
        layout.setTree(geometryTree(false));
        layout.setWidth(1000);
        layout.setRowHeight(10);
        layout.setZoom(nodeOfPath(*layout.tree(), zoom));
        const QRectF r = layout.rect(nodeOfPath(*layout.tree(), node));
        QCOMPARE(r.isNull(), expected.isNull());
        QVERIFY2(std::abs(r.x() - expected.x()) < 1e-9 && std::abs(r.width() - expected.width()) < 1e-9
                     && r.y() == expected.y() && r.height() == expected.height(),
                 qPrintable(QStringLiteral("got %1,%2 %3x%4").arg(r.x()).arg(r.y()).arg(r.width()).arg(r.height())));
    }

    void flameZoomAndKeys()
    {
        app::Session* s = session(QStringLiteral("mlp_train.pickle"));
        QVERIFY(s);
        CallTreeView view(s);
        view.resize(1000, 600);
        view.setFlameGraphShown(true);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.rebuildNow();
        FlameGraphView* flame = view.flameGraph();
        QCOMPARE(flame->zoom(), model::CallTreeRoot);
        // Click the middle of the first row under the root: zooms into the largest top-level node.
        const CallNodeId first = view.tree().childId(model::CallTreeRoot, 0);
        const QRectF r = flame->layout().rect(first);
        QTest::mouseClick(flame, Qt::LeftButton, {}, r.center().toPoint());
        QCOMPARE(flame->zoom(), first);
        // The tree view follows the click.
        QCOMPARE(view.model()->nodeOf(view.proxy()->mapToSource(view.treeView()->currentIndex())), first);
        // A cursor move keeps the zoom on the same call path if it still exists.
        const std::vector<FrameId> path = view.tree().framePath(first);
        s->setCursor(s->replay().peakActive().index);
        view.rebuildNow();
        const CallNodeId again = view.tree().findPath(path);
        QCOMPARE(flame->zoom(), again == model::NoCallNode ? model::CallTreeRoot : again);
        flame->setFocus();
        QTest::keyClick(flame, Qt::Key_Escape);
        QCOMPARE(flame->zoom(), model::CallTreeRoot);

        // Hovering shows the frame, its bytes and its share of the live bytes.
        const QPoint at = flame->layout().rect(first).center().toPoint();
        QHelpEvent help(QEvent::ToolTip, at, flame->mapToGlobal(at));
        QCoreApplication::sendEvent(flame, &help);
        QTRY_VERIFY(QToolTip::isVisible());
        const model::CallNode& n = view.tree().node(first);
        QVERIFY2(QToolTip::text().contains(app::Session::formatBytes(n.bytes)), qPrintable(QToolTip::text()));
        QVERIFY(QToolTip::text().contains(QStringLiteral("% of live")));
        QVERIFY(QToolTip::text().contains(app::frameFullText(s->snapshot(), n.frame).toHtmlEscaped()));
        QToolTip::hideText();

        // Double-click zooms out completely, wherever it lands.
        flame->setZoom(first);
        QTest::mouseDClick(flame, Qt::LeftButton, {}, QPoint(5, 5));
        QCOMPARE(flame->zoom(), model::CallTreeRoot);
    }

    void benchmarkRebuild_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("mlp_train") << QStringLiteral("mlp_train.pickle");
        QTest::newRow("transformer_train") << QStringLiteral("transformer_train.pickle");
        QTest::newRow("big_trace") << QStringLiteral("big_trace.pickle.xz");
    }

    void benchmarkRebuild()
    {
        // What a cursor move costs the GUI thread: the state, the samples, the build, the model reset and the
        // restored expansion (the state is cached by the Session, so alternate between two cursors).
        QFETCH(QString, file);
        app::Session* s = session(file);
        QVERIFY(s);
        CallTreeView view(s);
        view.rebuildNow();
        view.expandToLargest();
        const int64_t a = s->replay().peakActive().index, b = s->entryCount();
        bool flip = false;
        QBENCHMARK
        {
            s->setCursor((flip = !flip) ? a : b);
            view.rebuildNow();
        }
        QVERIFY(view.tree().size() > 1);
    }

    void screenshots_data()
    {
        QTest::addColumn<QString>("file");
        const QStringList files = snapshotFiles();
        QVERIFY(files.contains(QStringLiteral("big_trace.pickle.xz")));
        for (const QString& f : files)
            QTest::newRow(qPrintable(f)) << f;
    }

    void screenshots()
    {
        QFETCH(QString, file);
        app::Session* s = session(file);
        QVERIFY(s);
        const QString base = file.section(QLatin1Char('.'), 0, 0);
        CallTreeView view(s);
        view.resize(1200, 700);
        view.rebuildNow();
        QVERIFY(test::saveScreenshot(view, QStringLiteral("calltree_") + base));
        QImage tree = view.grab().toImage();
        QVERIFY2(distinctColors(tree) >= 4, "the tree view looks blank");

        // The peak, where there is most to see.
        s->setCursor(s->replay().peakActive().index);
        view.setFlameGraphShown(true);
        view.rebuildNow();
        QCoreApplication::processEvents(); // the scroll area lays out the flame graph's new height
        QVERIFY(test::saveScreenshot(view, QStringLiteral("flamegraph_") + base));
        const QImage flame = view.flameGraph()->grab().toImage();
        QVERIFY2(distinctColors(flame) >= 4, "the flame graph looks blank");
        if (view.tree().root().childCount > 0) {
            // The root row is drawn across the whole width.
            const QRgb background = view.flameGraph()->palette().color(QPalette::Base).rgb();
            QVERIFY(flame.pixel(5, 5) != background);
            QVERIFY(flame.pixel(flame.width() - 5, 5) != background);
        }
    }

    void screenshotVariants()
    {
        // Bottom-up, unfiltered, zoomed and dark: the cases most likely to look wrong.
        app::Session* s = session(QStringLiteral("mlp_train.pickle"));
        QVERIFY(s);
        {
            CallTreeView view(s);
            view.setDirection(CallTreeDirection::BottomUp);
            view.rebuildNow();
            QVERIFY(test::saveScreenshot(view, QStringLiteral("calltree_mlp_train_bottomup")));
        }
        {
            s->setFrameFilter(false);
            CallTreeView view(s);
            view.setFlameGraphShown(true);
            view.rebuildNow();
            QVERIFY(test::saveScreenshot(view, QStringLiteral("flamegraph_mlp_train_unfiltered")));
            s->setFrameFilter(true);
        }
        {
            CallTreeView view(s);
            view.setFlameGraphShown(true);
            view.resize(1200, 700);
            view.rebuildNow();
            // Zoom two levels below the largest top-level node.
            CallNodeId n = view.tree().childId(model::CallTreeRoot, 0);
            for (int k = 0; k < 3 && view.tree().node(n).childCount > 0; ++k)
                n = view.tree().childId(n, 0);
            view.flameGraph()->setZoom(n);
            view.setSearchText(QStringLiteral("linear"));
            QVERIFY(test::saveScreenshot(view, QStringLiteral("flamegraph_mlp_train_zoomed_search")));
        }
        {
            CallTreeView view(s);
            QPalette dark;
            dark.setColor(QPalette::Window, QColor(0x2b, 0x2b, 0x2b));
            dark.setColor(QPalette::Base, QColor(0x1e, 0x1e, 0x1e));
            dark.setColor(QPalette::AlternateBase, QColor(0x26, 0x26, 0x26));
            dark.setColor(QPalette::Text, QColor(0xe0, 0xe0, 0xe0));
            dark.setColor(QPalette::WindowText, QColor(0xe0, 0xe0, 0xe0));
            dark.setColor(QPalette::ButtonText, QColor(0xe0, 0xe0, 0xe0));
            dark.setColor(QPalette::Button, QColor(0x35, 0x35, 0x35));
            view.setPalette(dark);
            view.setFlameGraphShown(true);
            s->setCursor(s->replay().peakActive().index);
            view.rebuildNow();
            QVERIFY(test::saveScreenshot(view, QStringLiteral("flamegraph_mlp_train_dark")));
            const QImage img = view.flameGraph()->grab().toImage();
            QCOMPARE(img.pixel(img.width() - 2, img.height() - 2), QColor(0x1e, 0x1e, 0x1e).rgb());
        }
    }
};

QTEST_MAIN(TestCallTreeView)
#include "tst_calltreeview.moc"
