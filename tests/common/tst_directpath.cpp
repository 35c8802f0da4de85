// Tests of the direct path for trace entries (io/picklereader.h, io/snapshotbuilder.h): a pickle loaded with
// LoadOptions::directTraces gives the very snapshot the value-tree path gives (every table, id, segment, block, trace
// entry, warning and error), on every real snapshot, on our own writer's pickles of them, on every cut of a file
// and on thousands of corrupted copies (where the direct path must decline, or give what the tree path gives).
#include "io/snapshotio.h"
#include "model/snapshot.h"
#include "testutil.h"

#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace memscope;

namespace {

bool sameValue(const model::Value& a, const model::Value& b)
{
    if (a.kind != b.kind || a.boolean != b.boolean || a.integer != b.integer
        || a.unsignedInteger != b.unsignedInteger || std::memcmp(&a.real, &b.real, sizeof a.real) != 0
        || a.text != b.text || a.items.size() != b.items.size() || a.entries.size() != b.entries.size())
        return false;
    for (size_t i = 0; i < a.items.size(); ++i)
        if (!sameValue(a.items[i], b.items[i]))
            return false;
    for (size_t i = 0; i < a.entries.size(); ++i)
        if (a.entries[i].first != b.entries[i].first || !sameValue(a.entries[i].second, b.entries[i].second))
            return false;
    return true;
}

bool sameExtras(const model::Extras& a, const model::Extras& b)
{
    if (a.size() != b.size())
        return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i].first != b[i].first || !sameValue(a[i].second, b[i].second))
            return false;
    return true;
}

// The first difference between two snapshots, or an empty string: every field of every table, by id.
std::string difference(const model::Snapshot& a, const model::Snapshot& b)
{
    using namespace model;
    if (a.strings.size() != b.strings.size())
        return "string count " + std::to_string(a.strings.size()) + " vs " + std::to_string(b.strings.size());
    for (uint32_t k = 0; k < a.strings.size(); ++k)
        if (a.strings.get(StringId { k }) != b.strings.get(StringId { k }))
            return "string " + std::to_string(k);
    if (a.layouts.size() != b.layouts.size())
        return "layout count";
    for (size_t k = 0; k < a.layouts.size(); ++k)
        if (a.layouts.get(LayoutId { uint16_t(k) }) != b.layouts.get(LayoutId { uint16_t(k) }))
            return "layout " + std::to_string(k);
    if (a.frames.size() != b.frames.size())
        return "frame count";
    for (size_t k = 0; k < a.frames.size(); ++k)
        if (a.frames[k].name != b.frames[k].name || a.frames[k].filename != b.frames[k].filename
            || a.frames[k].line != b.frames[k].line)
            return "frame " + std::to_string(k);
    if (a.stackOffsets != b.stackOffsets || a.stackFrames != b.stackFrames)
        return "stacks";
    if (a.segments.size() != b.segments.size())
        return "segment count";
    for (size_t k = 0; k < a.segments.size(); ++k) {
        const Segment &x = a.segments[k], &y = b.segments[k];
        if (x.device != y.device || x.address != y.address || x.totalSize != y.totalSize
            || x.allocatedSize != y.allocatedSize || x.activeSize != y.activeSize || x.requestedSize != y.requestedSize
            || x.stream != y.stream || x.segmentType != y.segmentType || x.poolId != y.poolId
            || x.isExpandable != y.isExpandable || x.stack != y.stack || x.hasFrames != y.hasFrames
            || x.version != y.version || x.blockBegin != y.blockBegin || x.blockCount != y.blockCount
            || x.layout != y.layout || x.extraIndex != y.extraIndex)
            return "segment " + std::to_string(k);
    }
    if (a.blocks.size() != b.blocks.size())
        return "block count";
    for (size_t k = 0; k < a.blocks.size(); ++k) {
        const Block &x = a.blocks[k], &y = b.blocks[k];
        if (x.address != y.address || x.size != y.size || x.requestedSize != y.requestedSize || x.state != y.state
            || x.stateName != y.stateName || x.stack != y.stack || x.hasFrames != y.hasFrames
            || x.hasRequestedSize != y.hasRequestedSize || x.hasAddress != y.hasAddress || x.version != y.version
            || x.historyBegin != y.historyBegin || x.historyCount != y.historyCount || x.hasHistory != y.hasHistory
            || x.layout != y.layout || x.extraIndex != y.extraIndex)
            return "block " + std::to_string(k);
    }
    if (a.history.size() != b.history.size())
        return "history count";
    for (size_t k = 0; k < a.history.size(); ++k)
        if (a.history[k].addr != b.history[k].addr || a.history[k].realSize != b.history[k].realSize
            || a.history[k].stack != b.history[k].stack || a.history[k].hasFrames != b.history[k].hasFrames)
            return "history " + std::to_string(k);
    if (a.entryForms.size() != b.entryForms.size())
        return "entry form count";
    for (uint32_t k = 0; k < a.entryForms.size(); ++k)
        if (!(a.entryForms.get(FormId { k }) == b.entryForms.get(FormId { k })))
            return "entry form " + std::to_string(k);
    if (a.deviceTraces.size() != b.deviceTraces.size())
        return "device count";
    for (size_t d = 0; d < a.deviceTraces.size(); ++d) {
        if (a.deviceTraces[d].size() != b.deviceTraces[d].size())
            return "trace length of device " + std::to_string(d);
        for (size_t k = 0; k < a.deviceTraces[d].size(); ++k) {
            const TraceEntry &x = a.deviceTraces[d][k], &y = b.deviceTraces[d][k];
            // Forms compare by id: the tables are equal (above).
            if (x.action != y.action || x.hasFrames != y.hasFrames || x.form != y.form || x.addr != y.addr
                || x.size != y.size || x.timeUs != y.timeUs || x.stack != y.stack || x.version != y.version)
                return "device " + std::to_string(d) + ", trace entry " + std::to_string(k);
        }
    }
    if (a.annotations.size() != b.annotations.size())
        return "annotation count";
    for (size_t k = 0; k < a.annotations.size(); ++k) {
        const Annotation &x = a.annotations[k], &y = b.annotations[k];
        if (x.stage != y.stage || x.stageName != y.stageName || x.name != y.name || x.device != y.device
            || x.timeUs != y.timeUs)
            return "annotation " + std::to_string(k);
    }
    if (a.allocatorSettings.has_value() != b.allocatorSettings.has_value()
        || (a.allocatorSettings && !sameValue(*a.allocatorSettings, *b.allocatorSettings)))
        return "allocator settings";
    if (a.extras.size() != b.extras.size())
        return "extras count";
    for (size_t k = 0; k < a.extras.size(); ++k)
        if (!sameExtras(a.extras[k], b.extras[k]))
            return "extras " + std::to_string(k);
    if (!sameExtras(a.topLevelExtras, b.topLevelExtras))
        return "top-level extras";
    if (a.legacyTopLevelList != b.legacyTopLevelList || a.hasDeviceTraces != b.hasDeviceTraces
        || a.hasAnnotationsKey != b.hasAnnotationsKey || a.topLevelLayout != b.topLevelLayout)
        return "top-level flags";
    if (a.warnings.size() != b.warnings.size())
        return "warning count";
    for (size_t k = 0; k < a.warnings.size(); ++k)
        if (a.warnings[k].kind != b.warnings[k].kind || a.warnings[k].count != b.warnings[k].count
            || a.warnings[k].message != b.warnings[k].message)
            return "warning " + std::to_string(k);
    if (a.streams != b.streams)
        return "streams";
    return {};
}

// Loads `bytes` both ways; the empty string when both give the same snapshot or the same error.
std::string compareLoads(std::span<const uint8_t> bytes, const std::string& name)
{
    io::LoadOptions tree;
    tree.directTraces = false;
    const io::LoadResult expected = io::loadSnapshotFromMemory(bytes, name, tree);
    const io::LoadResult actual = io::loadSnapshotFromMemory(bytes, name);
    if (expected.ok() != actual.ok())
        return "one path failed: " + (expected.ok() ? actual.error.toString() : expected.error.toString());
    if (!expected.ok()) {
        if (expected.error.code != actual.error.code || expected.error.toString() != actual.error.toString())
            return "errors differ: " + expected.error.toString() + " | " + actual.error.toString();
        return {};
    }
    return difference(*expected.snapshot, *actual.snapshot);
}

std::vector<uint8_t> fileBytes(const std::string& path)
{
    std::vector<uint8_t> bytes;
    if (io::Error e = io::readFile(path, bytes))
        qFatal("%s", e.toString().c_str());
    return bytes;
}

// Every pickle memscope has from PyTorch: the shared snapshots, the corpus, the test data.
std::vector<std::string> realPickles()
{
    std::vector<std::string> paths;
    const auto add = [&](const std::string& dir, const QStringList& patterns) {
        for (const QString& f : QDir(QString::fromStdString(dir)).entryList(patterns, QDir::Files, QDir::Name))
            paths.push_back(dir + "/" + f.toStdString());
    };
    add(test::sharedDir() + "/snapshots", { QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") });
    add(test::dataPath("corpus"), { QStringLiteral("*.pickle") });
    add(test::dataPath(""), { QStringLiteral("*.pickle") });
    return paths;
}

// A small deterministic generator (xorshift64), so that a failing corruption can be found again.
struct Random {
    uint64_t state;
    uint64_t next()
    {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        return state;
    }
};

} // namespace

class TestDirectPath : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void sameSnapshot_data();
    void sameSnapshot();
    void sameSnapshotFromOurWriter_data() { sameSnapshot_data(); }
    void sameSnapshotFromOurWriter();
    void sameSnapshotFromLargeFile();
    void sameErrorOnEveryCut();
    void sameResultWhenCorrupted_data();
    void sameResultWhenCorrupted();
};

void TestDirectPath::sameSnapshot_data()
{
    QTest::addColumn<QString>("path");
    const std::vector<std::string> paths = realPickles();
    QVERIFY(paths.size() >= 10);
    for (const std::string& p : paths)
        QTest::newRow(p.substr(p.rfind('/') + 1).c_str()) << QString::fromStdString(p);
}

void TestDirectPath::sameSnapshot()
{
    QFETCH(QString, path);
    const std::vector<uint8_t> bytes = fileBytes(path.toStdString());
    const std::string diff = compareLoads(bytes, path.toStdString());
    QVERIFY2(diff.empty(), diff.c_str());
    // And from the file, mapped, with its pages dropped as they are consumed.
    io::LoadOptions tree;
    tree.directTraces = false;
    const io::LoadResult fromFile = io::loadSnapshot(path.toStdString());
    const io::LoadResult expected = io::loadSnapshotFromMemory(bytes, path.toStdString(), tree);
    QCOMPARE(fromFile.ok(), expected.ok());
    if (!expected.ok()) {
        QCOMPARE(QString::fromStdString(fromFile.error.toString()), QString::fromStdString(expected.error.toString()));
        return;
    }
    const std::string fileDiff = difference(*expected.snapshot, *fromFile.snapshot);
    QVERIFY2(fileDiff.empty(), fileDiff.c_str());
}

// Our writer shares more through the memo than PyTorch's pickler (every string once, every frame and stack once).
void TestDirectPath::sameSnapshotFromOurWriter()
{
    QFETCH(QString, path);
    const io::LoadResult loaded = io::loadSnapshot(path.toStdString());
    if (!loaded.ok())
        QSKIP("not a loadable snapshot (a test of bad input)");
    const std::string pickle = io::encodePickle(*loaded.snapshot);
    const std::string diff
        = compareLoads({ reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size() }, path.toStdString());
    QVERIFY2(diff.empty(), diff.c_str());
}

// A file large enough that the load drops the mapped pages it has consumed (every 8 MB): what the tree nodes still
// point into is read back from the file.
void TestDirectPath::sameSnapshotFromLargeFile()
{
    const std::vector<uint8_t> bytes = fileBytes(test::snapshotPath("big_trace.pickle.xz"));
    QVERIFY(bytes.size() > (uint64_t(16) << 20));
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = dir.filePath(QStringLiteral("big_trace.pickle")).toStdString();
    FILE* f = std::fopen(path.c_str(), "wb");
    QVERIFY(f);
    QCOMPARE(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    QCOMPARE(std::fclose(f), 0);
    io::LoadOptions tree;
    tree.directTraces = false;
    const io::LoadResult expected = io::loadSnapshotFromMemory(bytes, path, tree);
    const io::LoadResult actual = io::loadSnapshot(path);
    QVERIFY(expected.ok() && actual.ok());
    const std::string diff = difference(*expected.snapshot, *actual.snapshot);
    QVERIFY2(diff.empty(), diff.c_str());
}

// A file cut anywhere (inside entries, frames lists, frame dicts, memo opcodes) fails the same way on both paths.
void TestDirectPath::sameErrorOnEveryCut()
{
    const std::vector<uint8_t> bytes = fileBytes(test::snapshotPath("multistream.pickle"));
    for (size_t cut = 1; cut < bytes.size(); ++cut) {
        const std::string diff = compareLoads({ bytes.data(), cut }, "cut");
        QVERIFY2(diff.empty(), ("cut at " + std::to_string(cut) + ": " + diff).c_str());
    }
}

void TestDirectPath::sameResultWhenCorrupted_data()
{
    QTest::addColumn<QString>("path");
    QTest::addColumn<bool>("ourWriter"); // the file as our writer writes it (more shared through the memo)
    QTest::newRow("oom") << QString::fromStdString(test::snapshotPath("oom.pickle")) << false;
    QTest::newRow("multistream") << QString::fromStdString(test::snapshotPath("multistream.pickle")) << false;
    QTest::newRow("two_device") << QString::fromStdString(test::snapshotPath("two_device.pickle")) << false;
    QTest::newRow("mlp_train") << QString::fromStdString(test::snapshotPath("mlp_train.pickle")) << false;
    QTest::newRow("wide-integers") << QString::fromStdString(test::dataPath("wide-integers.pickle")) << false;
    QTest::newRow("multistream, our writer") << QString::fromStdString(test::snapshotPath("multistream.pickle"))
                                             << true;
    QTest::newRow("two_device, our writer") << QString::fromStdString(test::snapshotPath("two_device.pickle")) << true;
}

// Bytes changed at random in the trace (opcodes, lengths, memo indices): whatever the tree path makes of the
// result, the direct path makes the same.
void TestDirectPath::sameResultWhenCorrupted()
{
    QFETCH(QString, path);
    QFETCH(bool, ourWriter);
    std::vector<uint8_t> original = fileBytes(path.toStdString());
    if (ourWriter) {
        const io::LoadResult loaded = io::loadSnapshotFromMemory(original, path.toStdString());
        QVERIFY(loaded.ok());
        const std::string pickle = io::encodePickle(*loaded.snapshot);
        original.assign(pickle.begin(), pickle.end());
    }
    Random random { 0x9E3779B97F4A7C15ull };
    for (int round = 0; round < 3000; ++round) {
        std::vector<uint8_t> bytes = original;
        const int changes = 1 + int(random.next() % 3);
        for (int c = 0; c < changes; ++c) {
            const size_t at = size_t(random.next() % bytes.size());
            const uint64_t r = random.next();
            // Mostly opcodes and small numbers a pickle holds, sometimes any byte.
            static constexpr uint8_t Likely[] = { 0x94, 'h', 'j', 'q', 'r', 'K', 'M', 'J', 0x8a, 0x8c, 'X', 'N',
                                                  ']', '}', '(', 'u', 'e', 'a', 's', 0x88, 0x95, '.', 0, 1, 0xff };
            bytes[at] = r % 4 == 0 ? uint8_t(r >> 8) : Likely[(r >> 8) % sizeof Likely];
        }
        const std::string diff = compareLoads(bytes, "corrupted");
        QVERIFY2(diff.empty(), ("round " + std::to_string(round) + ": " + diff).c_str());
    }
}

QTEST_GUILESS_MAIN(TestDirectPath)
#include "tst_directpath.moc"
