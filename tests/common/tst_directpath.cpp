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

#include <algorithm>
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

// Writes pickle opcodes by hand (protocol 4, Lib/pickletools.py), counting the memo slots MEMOIZE takes.
struct PickleBytes {
    std::vector<uint8_t> bytes { 0x80, 4 };
    uint32_t slots = 0;

    PickleBytes& op(uint8_t code)
    {
        bytes.push_back(code);
        return *this;
    }
    PickleBytes& raw(uint64_t value, int width)
    {
        for (int i = 0; i < width; ++i)
            bytes.push_back(uint8_t(value >> (8 * i)));
        return *this;
    }
    uint32_t memoize()
    {
        op(0x94);
        return slots++;
    }
    PickleBytes& text(std::string_view t)
    {
        op('\x8c').raw(t.size(), 1);
        bytes.insert(bytes.end(), t.begin(), t.end());
        return *this;
    }
    uint32_t memoText(std::string_view t)
    {
        text(t);
        return memoize();
    }
    PickleBytes& get(uint32_t slot) { return slot < 256 ? op('h').raw(slot, 1) : op('j').raw(slot, 4); }
    PickleBytes& longGet(uint32_t slot) { return op('j').raw(slot, 4); }
    // The narrowest int opcode CPython's pickler picks (save_long).
    PickleBytes& integer(int64_t v)
    {
        if (v >= 0 && v < 256)
            return op('K').raw(uint64_t(v), 1);
        if (v >= 0 && v < 65536)
            return op('M').raw(uint64_t(v), 2);
        if (v >= INT32_MIN && v <= INT32_MAX)
            return op('J').raw(uint64_t(v), 4);
        int n = 1;
        while (n < 8 && !(v >= -(int64_t(1) << (8 * n - 1)) && v < (int64_t(1) << (8 * n - 1))))
            ++n;
        return op(0x8a).raw(uint64_t(n), 1).raw(uint64_t(v), n);
    }
    PickleBytes& frame(uint64_t size) { return op(0x95).raw(size, 8); }
};

// The keys of a trace entry after their first use: their memo slots.
struct EntryKeys {
    uint32_t action, addr, size, stream, timeUs, compileContext, frames;
};

// Snapshots whose trace entries take the direct path's shortcut for entries shaped like the one before (the same
// key references): each row changes one thing the shortcut must read as the tree does, or leave to it.
using Writer = void (*)(PickleBytes&, const EntryKeys&, uint32_t alloc, uint32_t frameA, uint32_t frameB);
const std::pair<const char*, Writer>* s_rows = nullptr; // sameSnapshotFromShapedEntries_data's table

// `middle`: where the entries under test lie.
std::vector<uint8_t> shapedSnapshot(Writer write, std::pair<size_t, size_t>& middle)
{
    PickleBytes p;
    p.op('}');
    p.memoize();
    p.op('(');
    p.memoText("segments");
    p.op(']');
    p.memoize();
    p.memoText("device_traces");
    p.op(']');
    p.memoize();
    p.op('(');
    p.op(']');
    p.memoize();
    p.op('(');
    // The first entry spells its keys, a frames list and its frame dicts.
    EntryKeys k {};
    p.op('}');
    p.memoize();
    p.op('(');
    k.action = p.memoText("action");
    const uint32_t alloc = p.memoText("alloc");
    k.addr = p.memoText("addr");
    p.integer(0x7f0000000000);
    k.size = p.memoText("size");
    p.integer(512);
    k.stream = p.memoText("stream");
    p.integer(0);
    k.timeUs = p.memoText("time_us");
    p.integer(1000);
    k.compileContext = p.memoText("compile_context");
    p.memoText("N/A");
    k.frames = p.memoText("frames");
    p.op(']');
    p.memoize();
    p.op('(');
    uint32_t frameSlots[2];
    for (int f = 0; f < 2; ++f) {
        p.op('}');
        frameSlots[f] = p.memoize();
        p.op('(');
        p.memoText("name");
        p.memoText(f == 0 ? "forward" : "backward");
        p.memoText("filename");
        p.memoText("model.py");
        p.memoText("line");
        p.integer(10 + f);
        p.op('u');
    }
    p.op('e');
    p.op('u');
    // The entries under test, then one more plain one.
    middle.first = p.bytes.size();
    write(p, k, alloc, frameSlots[0], frameSlots[1]);
    middle.second = p.bytes.size();
    p.op('}');
    p.memoize();
    p.op('(');
    p.get(k.action).get(alloc).get(k.addr).integer(0x7f0000100000).get(k.size).integer(4096);
    p.get(k.stream).integer(0).get(k.timeUs).integer(2000).get(k.compileContext).op('N').get(k.frames).op(']');
    p.memoize();
    p.op('u');
    p.op('e').op('e').op('u').op('.');
    return p.bytes;
}

// One entry with the keys of the first, in its order, values written by `value(i)` for the i-th key.
template <typename Value> void shapedEntry(PickleBytes& p, const EntryKeys& k, Value value)
{
    p.op('}');
    p.memoize();
    p.op('(');
    const uint32_t keys[] = { k.action, k.addr, k.size, k.stream, k.timeUs, k.compileContext, k.frames };
    for (int i = 0; i < 7; ++i) {
        p.get(keys[i]);
        value(i);
    }
    p.op('u');
}

// The value of key `i` of a plain entry: the alloc action, `number` (addr, size, stream, time_us; a size at least 1),
// None (compile_context, frames).
void plainValue(PickleBytes& p, int i, uint32_t alloc, int64_t number)
{
    if (i == 0)
        p.get(alloc);
    else if (i < 5)
        p.integer(i == 2 ? std::max<int64_t>(number, 1) : number);
    else
        p.op('N');
}

// A plain entry whose value of key i `special(i)` writes instead where it returns true.
template <typename Special = bool (*)(int)>
void plainEntry(PickleBytes& p, const EntryKeys& k, uint32_t alloc, int64_t number,
                Special special = [](int) { return false; })
{
    shapedEntry(p, k, [&](int i) {
        if (!special(i))
            plainValue(p, i, alloc, number);
    });
}

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
    void sameSnapshotFromShapedEntries_data();
    void sameSnapshotFromShapedEntries();
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

void TestDirectPath::sameSnapshotFromShapedEntries_data()
{
    QTest::addColumn<int>("row");
    // Each row: entries after the first, in a snapshot that the tree path reads without a word unless said.
    static const std::pair<const char*, Writer> Rows[] = {
        { "ints of every width, signed",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              for (int64_t v : { int64_t(0), int64_t(255), int64_t(256), int64_t(65535), int64_t(65536), int64_t(-1),
                                 int64_t(INT32_MIN), int64_t(INT32_MAX), int64_t(1) << 40, -(int64_t(1) << 40),
                                 int64_t(INT64_MAX), int64_t(INT64_MIN), int64_t(0x7fffffffffff) })
                  plainEntry(p, k, alloc, v);
          } },
        { "a LONG1 of no bytes, and of 8 bytes where fewer hold it",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              plainEntry(p, k, alloc, 0, [&](int i) {
                  if (i == 1)
                      p.op(0x8a).raw(0, 1);
                  else if (i >= 2 && i < 5)
                      p.op(0x8a).raw(8, 1).raw(uint64_t(-7 + i), 8);
                  return i >= 1 && i < 5;
              });
          } },
        { "new text with a memo slot, then a reference to it",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              uint32_t context = 0;
              for (int e = 0; e < 3; ++e)
                  plainEntry(p, k, alloc, 4096 * (e + 1), [&](int i) {
                      if (i == 5 && e == 0)
                          context = p.memoText("torch.compile graph 0");
                      else if (i == 5)
                          p.get(context);
                      return i == 5;
                  });
          } },
        { "a new action name (the key's value is text)",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              plainEntry(p, k, alloc, 512, [&](int i) {
                  if (i == 0)
                      p.memoText("free_requested");
                  return i == 0;
              });
          } },
        { "frames lists: a batch, one frame, none, two batches",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t a, uint32_t b) {
              for (int e = 0; e < 4; ++e)
                  plainEntry(p, k, alloc, 512 * (e + 1), [&](int i) {
                      if (i != 6)
                          return false;
                      p.op(']');
                      p.memoize();
                      if (e == 0)
                          p.op('(').get(b).get(a).op('e');
                      else if (e == 1)
                          p.get(a).op('a');
                      else if (e == 3)
                          p.op('(').get(a).op('e').op('(').get(b).get(a).op('e');
                      return true;
                  });
          } },
        { "a frames list met before, by reference",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t a, uint32_t) {
              uint32_t list = 0;
              for (int e = 0; e < 3; ++e)
                  plainEntry(p, k, alloc, 64, [&](int i) {
                      if (i == 6 && e == 0) {
                          p.op(']');
                          list = p.memoize();
                          p.get(a).op('a');
                      } else if (i == 6) {
                          p.get(list);
                      }
                      return i == 6;
                  });
          } },
        { "a frame that is no dict (the tree path refuses it)",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              plainEntry(p, k, alloc, 64, [&](int i) {
                  if (i == 6)
                      p.op(']').op('(').get(alloc).op('e');
                  return i == 6;
              });
          } },
        { "a FRAME opcode between a key and its value, and between two items",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              for (int e = 0; e < 2; ++e)
                  shapedEntry(p, k, [&](int i) {
                      if (e == 0 && i == 2)
                          p.frame(0);
                      plainValue(p, i, alloc, 64);
                      if (e == 1 && i == 3)
                          p.frame(0);
                  });
          } },
        { "the keys by LONG_BINGET where BINGET was (other bytes, the same keys)",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              p.op('}');
              p.memoize();
              p.op('(');
              p.longGet(k.action).get(alloc).longGet(k.addr).integer(8).longGet(k.size).integer(8);
              p.longGet(k.stream).integer(0).longGet(k.timeUs).integer(9).longGet(k.compileContext).op('N');
              p.longGet(k.frames).op('N').op('u');
          } },
        { "a value's BINPUT rewrites a key's memo slot",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              plainEntry(p, k, alloc, 64, [&](int i) {
                  if (i == 5)
                      p.text("user_metadata").op('q').raw(k.compileContext, 1);
                  return i == 5;
              });
              plainEntry(p, k, alloc, 128);
          } },
        { "a value that names a slot of its own entry",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              const uint32_t entrySlot = p.slots;
              plainEntry(p, k, alloc, 77, [&](int i) {
                  if (i == 2) {
                      p.integer(4096);
                      p.memoize();
                  } else if (i == 3 || i == 4) {
                      p.get(entrySlot + 1); // the size's slot
                  } else if (i == 5) {
                      p.get(entrySlot); // the entry itself
                  }
                  return i >= 2 && i <= 5;
              });
          } },
        { "a reference past the memo",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              plainEntry(p, k, alloc, 64, [&](int i) {
                  if (i >= 5)
                      p.longGet(1u << 20);
                  return i >= 5;
              });
          } },
        { "ints and None with memo slots, referred to later",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              uint32_t sizeSlot = 0, noneSlot = 0;
              for (int e = 0; e < 2; ++e)
                  plainEntry(p, k, alloc, 5, [&](int i) {
                      if (i == 2 && e == 0) {
                          p.integer(1 << 20);
                          sizeSlot = p.memoize();
                      } else if (i == 2) {
                          p.get(sizeSlot);
                      } else if (i == 5 && e == 0) {
                          p.op('N');
                          noneSlot = p.memoize();
                      } else if (i == 5) {
                          p.get(noneSlot);
                      }
                      return i == 2 || i == 5;
                  });
          } },
        { "an entry with an extra key after shaped ones",
          [](PickleBytes& p, const EntryKeys& k, uint32_t alloc, uint32_t, uint32_t) {
              plainEntry(p, k, alloc, 64);
              p.bytes.pop_back(); // its SETITEMS: one more key first
              p.memoText("user_metadata");
              p.memoText("step 3");
              p.op('u');
          } },
    };
    for (size_t r = 0; r < std::size(Rows); ++r)
        QTest::newRow(Rows[r].first) << int(r);
    s_rows = Rows;
}

void TestDirectPath::sameSnapshotFromShapedEntries()
{
    QFETCH(int, row);
    std::pair<size_t, size_t> middle;
    const std::vector<uint8_t> bytes = shapedSnapshot(s_rows[row].second, middle);
    const std::string diff = compareLoads(bytes, "shaped");
    QVERIFY2(diff.empty(), diff.c_str());
    // Cut off at each byte of the entries under test, and each byte changed: the same on both paths.
    for (size_t cut = middle.first; cut < middle.second; ++cut) {
        const std::string cutDiff = compareLoads({ bytes.data(), cut }, "cut");
        QVERIFY2(cutDiff.empty(), ("cut at " + std::to_string(cut) + ": " + cutDiff).c_str());
    }
    static constexpr uint8_t Likely[] = { 0x94, 'h', 'j', 'q', 'M', 0x8a, 'N', ']', '(', 'u', 'a', 0x95, 1, 0xff };
    for (size_t at = middle.first; at < middle.second; ++at)
        for (uint8_t b : Likely) {
            std::vector<uint8_t> changed = bytes;
            changed[at] = b;
            const std::string changedDiff = compareLoads(changed, "changed");
            QVERIFY2(changedDiff.empty(),
                     ("byte " + std::to_string(at) + " set to " + std::to_string(b) + ": " + changedDiff).c_str());
        }
}

QTEST_GUILESS_MAIN(TestDirectPath)
#include "tst_directpath.moc"
