// Tests of LiveController (app/live/livecontroller.h) without widgets: a recorded delta stream (a real snapshot's
// trace handed over as the Recorder's deltas, through the receiver's own signal) must grow a document whose every
// state is the file's, announced to the views until the last entry; the bounded history's parts and the triggers'
// files must join up and hold every entry; saves run on the thread pool one after another, read back whole (every
// segment and block, free ones included, and every trace entry), and a save to an unwritable path names the path
// and the reason and loses nothing; a real demo job recorded to its end equals its exit dump. GUI thread (writes
// and reads on the thread pool), no widgets.
#include "live/livecontroller.h"
#include "loadsnapshot.h"
#include "model/replayextender.h"
#include "runprogram.h"
#include "statelines.h"
#include "testutil.h"

#include "io/snapshotio.h"
#include "viewer/recorder.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QScopeGuard>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

using namespace memscope;
using namespace memscope::app;

namespace {

std::shared_ptr<const model::Snapshot> load(const std::string& path) { return test::loadSnapshotOrWarn(path); }

// A recorded stream: a file's device 0 as a live job would have handed it over. The join state is the state
// before the file's first entry; then deltas of the Recorder's own entries (stacks under agent ids: file id + 1,
// defined in the first delta), `chunk` entries each.
struct RecordedStream {
    std::shared_ptr<const model::Snapshot> file;
    model::Replay ref;
    int64_t begin = 0, end = -1; // the entries handed over (-1: to the end)
    std::optional<model::Value> settings; // the allocator's, handed over in the first delta when set

    int64_t last() const { return end < 0 ? ref.entryCount() : end; }
    std::shared_ptr<const model::Snapshot> initial() const
    {
        return std::make_shared<const model::Snapshot>(model::snapshotOfState(ref.stateAt(begin), 0));
    }

    std::vector<std::shared_ptr<const viewer::Recorder::Delta>> deltas(int64_t chunk) const
    {
        std::vector<std::shared_ptr<const viewer::Recorder::Delta>> out;
        const auto& trace = file->deviceTraces[0];
        auto delta = std::make_shared<viewer::Recorder::Delta>();
        for (uint32_t k = 1; k < file->stackCount(); ++k) {
            std::vector<viewer::Recorder::StackFrame> frames;
            for (const model::FrameId* f = file->stackBegin(model::StackId { k });
                 f != file->stackEnd(model::StackId { k }); ++f) {
                const model::Frame& fr = file->frame(*f);
                frames.push_back(
                    { std::string(file->str(fr.name)), std::string(file->str(fr.filename)), int32_t(fr.line.bits()) });
            }
            delta->stacks.emplace_back(k + 1, std::move(frames));
        }
        delta->settings = settings;
        for (int64_t i = begin; i < last(); ++i) {
            const model::TraceEntry& e = trace[size_t(ref.firstEntry() + i)];
            viewer::Recorder::Entry l {};
            l.action = e.action;
            l.device = 0;
            l.addr = uint64_t(e.addr);
            l.size = uint64_t(e.size);
            l.stream = uint64_t(file->stream(e));
            l.timeUs = uint64_t(e.timeUs);
            l.stack = model::raw(e.stack) == 0 ? 0 : model::raw(e.stack) + 1;
            if (e.action == model::Action::Alloc && ref.allocationOfEntry(i) != model::NoAllocation)
                l.blockSize = uint64_t(ref.allocation(ref.allocationOfEntry(i)).size);
            for (const model::SegmentPiece& p : ref.segmentPieces())
                if (p.beginIndex == i && p.address >= e.addr && p.address < e.addr + e.size) {
                    l.poolFirst = int32_t(p.poolId.first);
                    l.poolSecond = int32_t(p.poolId.second);
                }
            delta->entries.push_back(l);
            if (int64_t(delta->entries.size()) == chunk) {
                out.push_back(std::move(delta));
                delta = std::make_shared<viewer::Recorder::Delta>();
            }
        }
        if (!delta->entries.empty() || !delta->stacks.empty() || delta->settings)
            out.push_back(std::move(delta));
        return out;
    }
};

// Hands `stream` to `controller` as its receiver would (the join state, then the deltas, in updates of their own)
// and waits until the views were told of the last entry (`paced`: of each delta's, before the next is handed over,
// as a live job's arrive about every 30 ms). `told`: the entry counts the views were told of, in order.
void feed(LiveController& controller, const RecordedStream& stream, int64_t chunk,
          std::vector<int64_t>* toldOut = nullptr, bool paced = false)
{
    std::vector<int64_t> told;
    bool toldAll = false; // since the last hand-over
    const QMetaObject::Connection listening
        = QObject::connect(&controller, &LiveController::growthReady, &controller, [&] {
              told.push_back(controller.document()->replays[0].entryCount());
              // (The controller applies before it tells: nothing left to apply means the views hear of it all.)
              toldAll = controller.backlog() == 0 && !controller.liveDocument()->hasPending();
          });
    const auto stopListening = qScopeGuard([&] { QObject::disconnect(listening); });
    LiveUpdate first;
    first.state = LiveState::Live;
    first.initial = stream.initial();
    first.deviceCount = 1;
    Q_EMIT controller.receiver()->updated(first);
    for (auto& delta : stream.deltas(chunk)) {
        LiveUpdate u;
        u.state = LiveState::Live;
        u.delta = std::move(delta);
        u.deviceCount = 1;
        toldAll = false;
        Q_EMIT controller.receiver()->updated(u);
        QCoreApplication::processEvents(); // the event loop turns between hand-overs, as it does live
        if (paced)
            QTRY_VERIFY_WITH_TIMEOUT(toldAll, 30000);
    }
    // Everything applied, and the views told of it (the controller paces that on a timer).
    QTRY_VERIFY_WITH_TIMEOUT(toldAll, 30000);
    if (toldOut)
        *toldOut = std::move(told);
}

// Saves through the controller and waits: the error line, or "".
QString saveAndWait(LiveController& controller, const QString& path,
                    LiveController::SaveFormat format = LiveController::SaveFormat::Recording)
{
    QSignalSpy saved(&controller, &LiveController::saved);
    controller.save(path, format);
    if (!saved.wait(60000))
        return QStringLiteral("no answer");
    return saved.front().at(1).toString();
}

// Every trace entry of two snapshots' device 0, field by field, stacks by their frames' content.
void compareTraces(const model::Snapshot& a, const model::Snapshot& b)
{
    QCOMPARE(a.deviceTraces.size(), b.deviceTraces.size());
    const auto& ta = a.deviceTraces[0];
    const auto& tb = b.deviceTraces[0];
    QCOMPARE(ta.size(), tb.size());
    auto frames = [](const model::Snapshot& s, model::StackId id) {
        QStringList out;
        for (const model::FrameId* f = s.stackBegin(id); f != s.stackEnd(id); ++f)
            out << QString::fromUtf8(s.str(s.frame(*f).name).data(), qsizetype(s.str(s.frame(*f).name).size()));
        return out;
    };
    for (size_t i = 0; i < ta.size(); ++i) {
        const model::TraceEntry& x = ta[i];
        const model::TraceEntry& y = tb[i];
        QCOMPARE(x.action, y.action);
        QCOMPARE(x.addr, y.addr);
        QCOMPARE(x.size, y.size);
        QCOMPARE(a.stream(x), b.stream(y));
        QCOMPARE(x.timeUs, y.timeUs);
        QCOMPARE(x.version, y.version);
        QCOMPARE(frames(a, x.stack), frames(b, y.stack));
    }
}

QString binary(const char* name) { return memscope::test::programPath(QLatin1String(name)); }

} // namespace

class TestLiveController : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void growsFromRecordedDeltas_data();
    void growsFromRecordedDeltas();
    void savesInTheBackgroundAndReadsBackWhole();
    void saveToUnwritablePathLosesNothing();
    void savesRunOneAfterAnother();
    void boundedHistoryAndTriggers();
    void earlierHistoryErrors();
    void earlierHistoryPrepended();
    void recordsDemoJob();
};

void TestLiveController::initTestCase()
{
    // Defaults from QSettings must not bound these recordings.
    QCoreApplication::setOrganizationName(QStringLiteral("memscope-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_livecontroller"));
}

void TestLiveController::growsFromRecordedDeltas_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("chunk");
    QTest::newRow("mlp_train in deltas of 97") << "mlp_train.pickle" << 97;
    QTest::newRow("transformer_train in deltas of 5000") << "transformer_train.pickle" << 5000;
    QTest::newRow("expandable_segments in deltas of 301") << "expandable_segments.pickle" << 301;
    QTest::newRow("multistream in one delta") << "multistream.pickle" << 1000000;
}

// The document grows to the file's trace: every state along the way is the file's (stale requests aside, which a
// forward replay knows differently: model/replayextender.h), the final one whole, and the views hear of every
// entry, never more than once per growth and never going back.
void TestLiveController::growsFromRecordedDeltas()
{
    QFETCH(QString, file);
    QFETCH(int, chunk);
    RecordedStream stream;
    stream.file = load(test::snapshotPath(file.toStdString()));
    QVERIFY(stream.file);
    stream.ref = model::Replay::build(*stream.file, 0);
    QVERIFY(stream.ref.entryCount() > 100);

    LiveController controller(QStringLiteral("ipc:///nonexistent/recorded"));
    controller.setHistoryLimit(0, QString());
    QSignalSpy documents(&controller, &LiveController::documentChanged);
    std::vector<int64_t> told;
    feed(controller, stream, chunk, &told);
    if (QTest::currentTestFailed())
        return;
    QCOMPARE(documents.count(), 1); // one document, grown in place
    QVERIFY(std::is_sorted(told.begin(), told.end()));
    QVERIFY(std::adjacent_find(told.begin(), told.end()) == told.end());

    const Document& doc = *controller.document();
    const model::Replay& r = doc.replays[0];
    QCOMPARE(r.warnings(), 0u);
    QCOMPARE(r.entryCount(), stream.ref.entryCount());
    for (int64_t i = 0; i <= r.entryCount(); ++i) {
        QCOMPARE(r.series().active[size_t(i)], stream.ref.series().active[size_t(i)]);
        QCOMPARE(r.series().reserved[size_t(i)], stream.ref.series().reserved[size_t(i)]);
    }
    for (int64_t i : { int64_t(0), r.entryCount() / 3, r.entryCount() / 2, r.entryCount() - 1 })
        QCOMPARE(test::stateLines(r.stateAt(i), test::StaleRequests::Ignore),
                 test::stateLines(stream.ref.stateAt(i), test::StaleRequests::Ignore));
    QCOMPARE(test::stateLines(r.stateAt(r.entryCount()), test::StaleRequests::Ignore),
             test::stateLines(*stream.file, test::StaleRequests::Ignore));
    QCOMPARE(uint64_t(doc.snapshot->deviceTraces[0].size()), uint64_t(stream.ref.entryCount()));
}

// Save writes a copy of the document on the thread pool; the file holds every entry and the final state, every
// segment and block (free ones with their requests), and the recording's own key.
void TestLiveController::savesInTheBackgroundAndReadsBackWhole()
{
    RecordedStream stream;
    stream.file = load(test::snapshotPath("transformer_train.pickle"));
    QVERIFY(stream.file);
    stream.ref = model::Replay::build(*stream.file, 0);
    // The allocator's settings as the Recorder hands them over (PyTorch's allocator_settings keys).
    model::Value settings, expandable, conf;
    settings.kind = model::Value::Kind::Dict;
    expandable.kind = model::Value::Kind::Bool;
    expandable.boolean = true;
    conf.kind = model::Value::Kind::String;
    conf.text = "expandable_segments:True";
    settings.entries.emplace_back("expandable_segments", expandable);
    settings.entries.emplace_back("PYTORCH_CUDA_ALLOC_CONF", conf);
    stream.settings = settings;
    LiveController controller(QStringLiteral("ipc:///nonexistent/saved"));
    controller.setHistoryLimit(0, QString());
    feed(controller, stream, 1000);
    if (QTest::currentTestFailed())
        return;
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("saved.pickle"));
    QCOMPARE(saveAndWait(controller, path), QString());

    const std::shared_ptr<const model::Snapshot> reread = load(path.toStdString());
    QVERIFY(reread);
    const Document& doc = *controller.document();
    const model::Replay& r = doc.replays[0];
    // The final state, whole: as the document's replay ends, and as the file the stream came from ends.
    QCOMPARE(test::stateLines(*reread), test::stateLines(r.stateAt(r.entryCount())));
    QCOMPARE(test::stateLines(*reread, test::StaleRequests::Ignore),
             test::stateLines(*stream.file, test::StaleRequests::Ignore));
    compareTraces(*reread, *doc.snapshot);
    // Every state along the way: the saved file replays as the document does.
    const model::Replay again = model::Replay::build(*reread, 0);
    QCOMPARE(again.warnings(), 0u);
    QCOMPARE(again.entryCount(), r.entryCount());
    for (int64_t i = 0; i <= r.entryCount(); ++i) {
        QCOMPARE(again.series().active[size_t(i)], r.series().active[size_t(i)]);
        QCOMPARE(again.series().reserved[size_t(i)], r.series().reserved[size_t(i)]);
    }
    QCOMPARE(test::stateLines(again.stateAt(0), test::StaleRequests::Ignore),
             test::stateLines(r.stateAt(0), test::StaleRequests::Ignore));
    const std::optional<viewer::RecordingInfo> info = viewer::recordingInfoOf(*reread);
    QVERIFY(info);
    QCOMPARE(QString::fromStdString(info->endpoint), controller.endpoint());
    // The job's allocator settings, as `memscope-cli record` (the Recorder's snapshot()) writes them.
    QVERIFY(reread->allocatorSettings);
    const model::Value* savedExpandable = reread->allocatorSettings->find("expandable_segments");
    const model::Value* savedConf = reread->allocatorSettings->find("PYTORCH_CUDA_ALLOC_CONF");
    QVERIFY(savedExpandable && savedConf);
    QCOMPARE(savedExpandable->kind, model::Value::Kind::Bool);
    QVERIFY(savedExpandable->boolean);
    QCOMPARE(savedConf->text, std::string("expandable_segments:True"));
}

// A save that cannot be written says which file and why; the document is untouched and the next save holds
// everything.
void TestLiveController::saveToUnwritablePathLosesNothing()
{
    RecordedStream stream;
    stream.file = load(test::snapshotPath("mlp_train.pickle"));
    QVERIFY(stream.file);
    stream.ref = model::Replay::build(*stream.file, 0);
    LiveController controller(QStringLiteral("ipc:///nonexistent/unwritable"));
    controller.setHistoryLimit(0, QString());
    feed(controller, stream, 500);
    if (QTest::currentTestFailed())
        return;
    const int64_t entries = controller.document()->replays[0].entryCount();
    const QStringList state = test::stateLines(controller.document()->replays[0].stateAt(entries));

    QTemporaryDir dir;
    // A path under a regular file cannot be created, whoever runs the test (root included).
    const QString notAFolder = dir.filePath(QStringLiteral("file"));
    {
        QFile f(notAFolder);
        QVERIFY(f.open(QIODevice::WriteOnly));
    }
    const QString bad = notAFolder + QStringLiteral("/saved.pickle");
    const QString error = saveAndWait(controller, bad);
    QVERIFY2(error.contains(bad), qPrintable(error));
    QVERIFY2(error.contains(QString::fromUtf8(std::strerror(ENOTDIR))), qPrintable(error));
    QVERIFY(!QFile::exists(bad));

    QCOMPARE(controller.document()->replays[0].entryCount(), entries);
    QCOMPARE(test::stateLines(controller.document()->replays[0].stateAt(entries)), state);
    const QString good = dir.filePath(QStringLiteral("saved.json"));
    QCOMPARE(saveAndWait(controller, good, LiveController::SaveFormat::PyTorch), QString());
    const std::shared_ptr<const model::Snapshot> reread = load(good.toStdString());
    QVERIFY(reread);
    QVERIFY(reread->topLevelExtras.empty()); // PyTorch's format: no recording key
    QCOMPARE(test::stateLines(*reread), state);
    compareTraces(*reread, *controller.document()->snapshot);
}

// Saves asked for one after another are written in that order, one at a time: the last one asked for is what the
// file holds, and each is reported in turn.
void TestLiveController::savesRunOneAfterAnother()
{
    RecordedStream stream;
    stream.file = load(test::snapshotPath("transformer_train.pickle"));
    QVERIFY(stream.file);
    stream.ref = model::Replay::build(*stream.file, 0);
    LiveController controller(QStringLiteral("ipc:///nonexistent/order"));
    controller.setHistoryLimit(0, QString());
    feed(controller, stream, 5000);
    if (QTest::currentTestFailed())
        return;
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("twice.pickle"));
    const QString other = dir.filePath(QStringLiteral("other.pickle"));
    QSignalSpy saved(&controller, &LiveController::saved);
    controller.save(path, LiveController::SaveFormat::Recording);
    controller.save(other, LiveController::SaveFormat::Recording);
    controller.save(path, LiveController::SaveFormat::PyTorch);
    QTRY_COMPARE_WITH_TIMEOUT(saved.count(), 3, 60000);
    QCOMPARE(saved.at(0).at(0).toString(), path);
    QCOMPARE(saved.at(1).at(0).toString(), other);
    QCOMPARE(saved.at(2).at(0).toString(), path);
    for (const QList<QVariant>& s : saved)
        QCOMPARE(s.at(1).toString(), QString());
    const std::shared_ptr<const model::Snapshot> last = load(path.toStdString());
    QVERIFY(last);
    QVERIFY(last->topLevelExtras.empty()); // the PyTorch save came last
    const std::shared_ptr<const model::Snapshot> recording = load(other.toStdString());
    QVERIFY(recording);
    QVERIFY(viewer::recordingInfoOf(*recording));
    compareTraces(*last, *recording);
}

// The bounded history: each part written is a recording that says which part it is and starts where the one
// before ended; the parts and the document shown hold every entry once. A reserved-memory trigger fires and writes
// a file that reads back.
void TestLiveController::boundedHistoryAndTriggers()
{
    RecordedStream stream;
    stream.file = load(test::snapshotPath("transformer_train.pickle"));
    QVERIFY(stream.file);
    stream.ref = model::Replay::build(*stream.file, 0);
    const model::ByteCount peak
        = *std::max_element(stream.ref.series().reserved.begin(), stream.ref.series().reserved.end());
    QVERIFY(peak > 0);
    QTemporaryDir dir;
    const QString folder = dir.filePath(QStringLiteral("history"));
    LiveController controller(QStringLiteral("ipc:///nonexistent/bounded"));
    controller.setHistoryLimit(size_t(256) << 10, folder);
    LiveTrigger trigger;
    trigger.reservedAbove = peak - 1;
    trigger.folder = dir.path();
    controller.setTrigger(trigger);
    QSignalSpy documents(&controller, &LiveController::documentChanged);
    QSignalSpy spilled(&controller, &LiveController::spilled);
    QSignalSpy triggered(&controller, &LiveController::triggered);
    feed(controller, stream, 2000, nullptr, true);
    if (QTest::currentTestFailed())
        return;
    const int rotations = int(documents.count()) - 1;
    QVERIFY2(rotations >= 2, qPrintable(QString::number(rotations)));
    QTRY_COMPARE_WITH_TIMEOUT(int(spilled.count()), rotations, 60000);
    QTRY_VERIFY_WITH_TIMEOUT(triggered.count() >= 1, 60000);
    QCOMPARE(controller.spilledFiles().size(), rotations);
    QVERIFY(controller.statusText().contains(QStringLiteral("earlier history")));

    int64_t total = 0;
    QStringList previousEnd;
    int64_t number = 0;
    for (const QString& part : controller.spilledFiles()) {
        QVERIFY(part.startsWith(folder));
        const std::shared_ptr<const model::Snapshot> s = load(part.toStdString());
        QVERIFY(s);
        const std::optional<viewer::RecordingInfo> info = viewer::recordingInfoOf(*s);
        QVERIFY(info);
        QCOMPARE(info->part, ++number);
        const model::Replay r = model::Replay::build(*s, 0);
        QCOMPARE(r.warnings(), 0u);
        QCOMPARE(test::stateLines(r.stateAt(0), test::StaleRequests::Ignore),
                 test::stateLines(stream.ref.stateAt(total), test::StaleRequests::Ignore));
        if (!previousEnd.isEmpty())
            QCOMPARE(test::stateLines(r.stateAt(0), test::StaleRequests::Ignore), previousEnd);
        total += r.entryCount();
        previousEnd = test::stateLines(*s, test::StaleRequests::Ignore);
        QCOMPARE(previousEnd, test::stateLines(stream.ref.stateAt(total), test::StaleRequests::Ignore));
    }
    const model::Replay& shown = controller.document()->replays[0];
    QCOMPARE(test::stateLines(shown.stateAt(0), test::StaleRequests::Ignore), previousEnd);
    total += shown.entryCount();
    QCOMPARE(total, stream.ref.entryCount()); // every entry once, across the parts and the document shown
    QCOMPARE(test::stateLines(shown.stateAt(shown.entryCount()), test::StaleRequests::Ignore),
             test::stateLines(*stream.file, test::StaleRequests::Ignore));

    QCOMPARE(triggered.front().at(1).toString(), QString());
    const QString fired = triggered.front().at(0).toString();
    QVERIFY2(fired.contains(QStringLiteral("-reserved-1.pickle")), qPrintable(fired));
    QCOMPARE(controller.triggeredFiles().front(), fired);
    const std::shared_ptr<const model::Snapshot> firedFile = load(fired.toStdString());
    QVERIFY(firedFile);
    QVERIFY(viewer::recordingInfoOf(*firedFile));
}

// A recording's first third, saved by one controller, prepended (read on the thread pool) to another that joined
// at half way: the new document holds the file's entries, a bridge to the join state (marked as a gap) and the live
// entries, and every state along the way is the file's own.
void TestLiveController::earlierHistoryPrepended()
{
    RecordedStream early;
    early.file = load(test::snapshotPath("expandable_segments.pickle"));
    QVERIFY(early.file);
    early.ref = model::Replay::build(*early.file, 0);
    const int64_t n = early.ref.entryCount();
    early.end = n / 3;
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("early.pickle"));
    {
        LiveController first(QStringLiteral("ipc:///nonexistent/first"));
        first.setHistoryLimit(0, QString());
        feed(first, early, 700);
        if (QTest::currentTestFailed())
            return;
        QCOMPARE(saveAndWait(first, path), QString());
    }
    RecordedStream later = early;
    later.begin = n / 2;
    later.end = -1;
    LiveController controller(QStringLiteral("ipc:///nonexistent/later"));
    controller.setHistoryLimit(0, QString());
    feed(controller, later, 700);
    if (QTest::currentTestFailed())
        return;
    const model::Replay& live = controller.document()->replays[0];
    const int64_t liveEntries = live.entryCount();
    QCOMPARE(liveEntries, n - n / 2);
    const QStringList joinState = test::stateLines(live.stateAt(0));
    const QStringList endState = test::stateLines(live.stateAt(liveEntries));

    QSignalSpy documents(&controller, &LiveController::documentChanged);
    QSignalSpy loaded(&controller, &LiveController::earlierHistoryLoaded);
    controller.loadEarlierHistory(path);
    QVERIFY(loaded.wait(30000));
    QCOMPARE(loaded.front().at(0).toString(), path);
    QCOMPARE(loaded.front().at(1).toString(), QString());
    QCOMPARE(documents.count(), 1);
    const Document& doc = *controller.document();
    const model::Replay& r = doc.replays[0];
    QCOMPARE(r.warnings(), 0u);
    const int64_t fileEntries = n / 3;
    const int64_t bridge = r.entryCount() - fileEntries - liveEntries;
    QVERIFY2(bridge > 0, qPrintable(QString::number(bridge)));
    for (const int64_t i : { int64_t(0), fileEntries / 2, fileEntries })
        QCOMPARE(test::stateLines(r.stateAt(i), test::StaleRequests::Ignore),
                 test::stateLines(early.ref.stateAt(i), test::StaleRequests::Ignore));
    QCOMPARE(test::stateLines(r.stateAt(fileEntries + bridge)), joinState);
    QCOMPARE(test::stateLines(r.stateAt(r.entryCount())), endState);
    QVERIFY(std::any_of(
        doc.snapshot->annotations.begin(), doc.snapshot->annotations.end(), [&](const model::Annotation& a) {
            return doc.snapshot->str(a.name).find("no record between early.pickle") != std::string_view::npos;
        }));
    // The live document goes on growing after it.
    QVERIFY(controller.liveDocument());
    QCOMPARE(controller.backlog(), size_t(0));
}

// Prepending needs a document, and a file that reads: both refusals name the file and the reason, later.
void TestLiveController::earlierHistoryErrors()
{
    LiveController controller(QStringLiteral("ipc:///nonexistent/earlier"));
    QSignalSpy loaded(&controller, &LiveController::earlierHistoryLoaded);
    const QString path = QStringLiteral("/nonexistent/early.pickle");
    controller.loadEarlierHistory(path);
    QCOMPARE(loaded.count(), 0); // never from the call itself
    QVERIFY(loaded.wait(10000));
    QVERIFY(loaded.front().at(1).toString().contains(QStringLiteral("nothing recorded yet")));

    RecordedStream stream;
    stream.file = load(test::snapshotPath("mlp_train.pickle"));
    QVERIFY(stream.file);
    stream.ref = model::Replay::build(*stream.file, 0);
    controller.setHistoryLimit(0, QString());
    feed(controller, stream, 1000);
    if (QTest::currentTestFailed())
        return;
    const std::shared_ptr<const Document> before = controller.document();
    loaded.clear();
    controller.loadEarlierHistory(path);
    QVERIFY(loaded.wait(10000));
    const QString error = loaded.front().at(1).toString();
    QVERIFY2(error.startsWith(path + QStringLiteral(": ")) && error.size() > path.size() + 2, qPrintable(error));
    QCOMPARE(controller.document(), before); // nothing changed
}

// A real job (`memscope-cli demo`) recorded to its goodbye: the document shown ends in the job's own final state
// (its exit dump: every segment and block, free ones and their stale requests included), holds every event, and
// the views were told it stopped growing.
void TestLiveController::recordsDemoJob()
{
    QTemporaryDir dir;
    const QString dump = dir.filePath(QStringLiteral("exit.pickle"));
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("MEMSCOPE_DUMP_ON"), QStringLiteral("exit"));
    env.insert(QStringLiteral("MEMSCOPE_DUMP_PATH"), dump);
    QProcess demo;
    demo.setProcessEnvironment(env);
    const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job");
    demo.start(binary("memscope-cli"),
               { QStringLiteral("demo"), QStringLiteral("--endpoint"), endpoint, QStringLiteral("--events"),
                 QStringLiteral("30000"), QStringLiteral("--delay"), QStringLiteral("300") });
    QVERIFY(demo.waitForStarted(10000));
    while (!demo.canReadLine())
        QVERIFY(demo.waitForReadyRead(10000));
    QCOMPARE(QString::fromUtf8(demo.readLine()).trimmed(), endpoint);

    LiveController controller(endpoint);
    controller.setHistoryLimit(0, QString());
    QSignalSpy settled(&controller, &LiveController::settled);
    QSignalSpy documents(&controller, &LiveController::documentChanged);
    QSignalSpy growing(&controller, &LiveController::growingChanged);
    controller.start();
    QVERIFY(settled.wait(60000));
    QVERIFY(demo.state() == QProcess::NotRunning || demo.waitForFinished(20000));
    QCOMPARE(demo.exitCode(), 0);
    QVERIFY(controller.isSettled());
    const LiveUpdate& last = controller.receiver()->latest();
    QCOMPARE(last.state, LiveState::Exited);
    QCOMPARE(last.stats.lost, uint64_t(0));
    QCOMPARE(documents.count(), 1);
    QCOMPARE(controller.backlog(), size_t(0));
    QVERIFY(!growing.isEmpty());
    QCOMPARE(growing.back().at(0).toBool(), false);
    const Document& doc = *controller.document();
    const model::Replay& r = doc.replays[0];
    QCOMPARE(r.warnings(), 0u);
    QCOMPARE(uint64_t(r.entryCount()), last.stats.applied);
    const std::shared_ptr<const model::Snapshot> exitDump = load(dump.toStdString());
    QVERIFY(exitDump);
    const QStringList shown = test::stateLines(r.stateAt(r.entryCount()));
    QVERIFY(shown.size() > 10);
    QCOMPARE(shown, test::stateLines(*exitDump));
    QCOMPARE(shown, test::stateLines(*last.snapshot));
    QVERIFY(controller.statusText().contains(QStringLiteral("the job exited")));
}

QTEST_GUILESS_MAIN(TestLiveController)
#include "tst_livecontroller.moc"
