// Tests of the snapshot writers (common/io/picklewriter.cpp, jsonwriter.cpp, snapshotwriter.cpp): every real
// snapshot and a table of synthetic edge cases survive load -> encode -> load unchanged (compared field by field);
// Python's pickle reads our pickle as a dict equal to the original and would write the very same bytes for it; our
// JSON is what Python's json.dumps prints; opcode, float and escape details; saveSnapshot's atomic replace and its
// errors. The Python checks run only when python3 is installed. Test thread only.
#include "io/snapshotio.h"
#include "model/snapshot.h"
#include "testutil.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <cstring>
#include <csignal>
#include <limits>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace memscope;
using model::Snapshot;
using model::Value;

namespace {

std::span<const uint8_t> bytesOf(const std::string& s)
{
    return { reinterpret_cast<const uint8_t*>(s.data()), s.size() };
}
std::span<const uint8_t> bytesOf(const QByteArray& a)
{
    return { reinterpret_cast<const uint8_t*>(a.constData()), static_cast<size_t>(a.size()) };
}

// Every real snapshot, as a path: ../shared/snapshots (big_trace is .pickle.xz, left out) and the wider corpus in
// tests/data/corpus (torch.compile's files among them, with frame lines of 2^64 - 1).
QStringList realSnapshots()
{
    QStringList out;
    for (const std::string& folder : { test::snapshotPath(""), test::dataPath("corpus") }) {
        const QDir dir(QString::fromStdString(folder));
        for (const QString& f : dir.entryList({ QStringLiteral("*.pickle") }, QDir::Files, QDir::Name))
            out << dir.filePath(f);
    }
    return out;
}

// "corpus/compile_default.pickle", "mlp_train.pickle": a row name for a real snapshot's path.
QByteArray rowName(const QString& path)
{
    const QFileInfo info(path);
    const QString folder = info.dir().dirName() == QLatin1String("corpus") ? QStringLiteral("corpus/") : QString();
    return (folder + info.fileName()).toUtf8();
}

// --- Field-by-field comparison of two models (ids differ between snapshots; content must not) ---------------------

bool sameValue(const Value& a, const Value& b)
{
    if (a.kind != b.kind)
        return false;
    switch (a.kind) {
    case Value::Kind::None: return true;
    case Value::Kind::Bool: return a.boolean == b.boolean;
    case Value::Kind::Int: return a.integer == b.integer;
    case Value::Kind::UInt: return a.unsignedInteger == b.unsignedInteger;
    case Value::Kind::Float: return a.real == b.real || (std::isnan(a.real) && std::isnan(b.real));
    case Value::Kind::String: return a.text == b.text;
    case Value::Kind::List:
    case Value::Kind::Tuple:
        if (a.items.size() != b.items.size())
            return false;
        for (size_t i = 0; i < a.items.size(); ++i) {
            if (!sameValue(a.items[i], b.items[i]))
                return false;
        }
        return true;
    case Value::Kind::Dict:
        if (a.entries.size() != b.entries.size())
            return false;
        for (size_t i = 0; i < a.entries.size(); ++i) {
            if (a.entries[i].first != b.entries[i].first || !sameValue(a.entries[i].second, b.entries[i].second))
                return false;
        }
        return true;
    }
    return false;
}

bool sameExtras(const Snapshot& sa, uint32_t ia, const Snapshot& sb, uint32_t ib)
{
    const model::Extras empty;
    const model::Extras& a = ia == UINT32_MAX ? empty : sa.extras[ia];
    const model::Extras& b = ib == UINT32_MAX ? empty : sb.extras[ib];
    if (a.size() != b.size())
        return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].first != b[i].first || !sameValue(a[i].second, b[i].second))
            return false;
    }
    return true;
}

std::vector<std::string> stackText(const Snapshot& s, model::StackId id)
{
    std::vector<std::string> out;
    for (const model::FrameId* f = s.stackBegin(id); f != s.stackEnd(id); ++f) {
        const model::Frame& fr = s.frame(*f);
        out.push_back(std::string(s.str(fr.name)) + '|' + std::string(s.str(fr.filename)) + '|' + fr.line.toString());
    }
    return out;
}

std::vector<std::string> layoutText(const Snapshot& s, model::LayoutId id)
{
    std::vector<std::string> out;
    for (model::StringId k : s.layouts.get(id))
        out.emplace_back(s.str(k));
    return out;
}

// The first difference between two models, or "" when they hold the same snapshot. With `layouts` false, key
// orders, the "key was present" flags and names `a` leaves empty are not compared (a model made in code records
// no layouts and may leave names to the writers).
std::string firstDifference(const Snapshot& a, const Snapshot& b, bool layouts = true)
{
#define MS_SAME(what, x, y)                                                                                           \
    do {                                                                                                               \
        if (!((x) == (y)))                                                                                             \
            return std::string(what);                                                                                  \
    } while (false)
    MS_SAME("legacyTopLevelList", a.legacyTopLevelList, b.legacyTopLevelList);
    if (layouts) {
        MS_SAME("top-level key order", layoutText(a, a.topLevelLayout), layoutText(b, b.topLevelLayout));
        MS_SAME("hasDeviceTraces", a.hasDeviceTraces, b.hasDeviceTraces);
        MS_SAME("hasAnnotationsKey", a.hasAnnotationsKey, b.hasAnnotationsKey);
    }
    MS_SAME("allocator settings present", a.allocatorSettings.has_value(), b.allocatorSettings.has_value());
    if (a.allocatorSettings && !sameValue(*a.allocatorSettings, *b.allocatorSettings))
        return "allocator settings";
    MS_SAME("top-level extras count", a.topLevelExtras.size(), b.topLevelExtras.size());
    for (size_t i = 0; i < a.topLevelExtras.size(); ++i) {
        if (a.topLevelExtras[i].first != b.topLevelExtras[i].first
            || !sameValue(a.topLevelExtras[i].second, b.topLevelExtras[i].second))
            return "top-level extra " + a.topLevelExtras[i].first;
    }
    MS_SAME("segment count", a.segments.size(), b.segments.size());
    for (size_t i = 0; i < a.segments.size(); ++i) {
        const model::Segment& x = a.segments[i];
        const model::Segment& y = b.segments[i];
        const std::string at = "segment " + std::to_string(i) + ": ";
        MS_SAME(at + "device", x.device, y.device);
        MS_SAME(at + "address", x.address, y.address);
        MS_SAME(at + "total_size", x.totalSize, y.totalSize);
        MS_SAME(at + "allocated_size", x.allocatedSize, y.allocatedSize);
        MS_SAME(at + "active_size", x.activeSize, y.activeSize);
        MS_SAME(at + "requested_size", x.requestedSize, y.requestedSize);
        MS_SAME(at + "stream", x.stream, y.stream);
        MS_SAME(at + "segment_type", a.str(x.segmentType), b.str(y.segmentType));
        MS_SAME(at + "segment_pool_id", x.poolId, y.poolId);
        MS_SAME(at + "is_expandable", x.isExpandable, y.isExpandable);
        MS_SAME(at + "frames", stackText(a, x.stack), stackText(b, y.stack));
        MS_SAME(at + "block count", x.blockCount, y.blockCount);
        if (layouts) {
            MS_SAME(at + "key order", layoutText(a, x.layout), layoutText(b, y.layout));
            MS_SAME(at + "has frames", x.hasFrames, y.hasFrames);
        }
        if (!sameExtras(a, x.extraIndex, b, y.extraIndex))
            return at + "unknown keys";
        for (uint32_t k = 0; k < x.blockCount; ++k) {
            const model::Block& p = a.blocks[x.blockBegin + k];
            const model::Block& q = b.blocks[y.blockBegin + k];
            const std::string bat = at + "block " + std::to_string(k) + ": ";
            MS_SAME(bat + "address", p.address, q.address);
            MS_SAME(bat + "size", p.size, q.size);
            MS_SAME(bat + "requested_size", p.requestedSize, q.requestedSize);
            MS_SAME(bat + "state", p.state, q.state);
            if (layouts || p.stateName != model::EmptyString)
                MS_SAME(bat + "state name", a.str(p.stateName), b.str(q.stateName));
            MS_SAME(bat + "frames", stackText(a, p.stack), stackText(b, q.stack));
            MS_SAME(bat + "version", p.version, q.version);
            MS_SAME(bat + "history count", p.historyCount, q.historyCount);
            for (uint32_t h = 0; h < p.historyCount; ++h) {
                const model::HistoryItem& hp = a.history[p.historyBegin + h];
                const model::HistoryItem& hq = b.history[q.historyBegin + h];
                MS_SAME(bat + "history addr", hp.addr, hq.addr);
                MS_SAME(bat + "history real_size", hp.realSize, hq.realSize);
                MS_SAME(bat + "history has frames", hp.hasFrames, hq.hasFrames);
                MS_SAME(bat + "history frames", stackText(a, hp.stack), stackText(b, hq.stack));
            }
            if (layouts) {
                MS_SAME(bat + "key order", layoutText(a, p.layout), layoutText(b, q.layout));
                MS_SAME(bat + "has frames", p.hasFrames, q.hasFrames);
                MS_SAME(bat + "has address", p.hasAddress, q.hasAddress);
                MS_SAME(bat + "has requested_size", p.hasRequestedSize, q.hasRequestedSize);
                MS_SAME(bat + "has history", p.hasHistory, q.hasHistory);
            }
            if (!sameExtras(a, p.extraIndex, b, q.extraIndex))
                return bat + "unknown keys";
        }
    }
    MS_SAME("device count", a.deviceTraces.size(), b.deviceTraces.size());
    for (size_t d = 0; d < a.deviceTraces.size(); ++d) {
        MS_SAME("device " + std::to_string(d) + " entry count", a.deviceTraces[d].size(), b.deviceTraces[d].size());
        for (size_t i = 0; i < a.deviceTraces[d].size(); ++i) {
            const model::TraceEntry& x = a.deviceTraces[d][i];
            const model::TraceEntry& y = b.deviceTraces[d][i];
            const model::EntryForm &xf = a.form(x), &yf = b.form(y);
            const std::string at = "device " + std::to_string(d) + " entry " + std::to_string(i) + ": ";
            MS_SAME(at + "action", x.action, y.action);
            if (layouts || xf.actionName != model::EmptyString)
                MS_SAME(at + "action name", a.str(xf.actionName), b.str(yf.actionName));
            MS_SAME(at + "addr", x.addr, y.addr);
            MS_SAME(at + "size", x.size, y.size);
            MS_SAME(at + "stream", xf.stream, yf.stream);
            MS_SAME(at + "time_us", x.timeUs, y.timeUs);
            MS_SAME(at + "compile_context", a.str(xf.compileContext), b.str(yf.compileContext));
            MS_SAME(at + "user_metadata", a.str(xf.userMetadata), b.str(yf.userMetadata));
            MS_SAME(at + "has frames", x.hasFrames, y.hasFrames);
            MS_SAME(at + "frames", stackText(a, x.stack), stackText(b, y.stack));
            MS_SAME(at + "version", x.version, y.version);
            if (layouts)
                MS_SAME(at + "key order", layoutText(a, xf.layout), layoutText(b, yf.layout));
            if (!sameExtras(a, xf.extraIndex, b, yf.extraIndex))
                return at + "unknown keys";
        }
    }
    MS_SAME("annotation count", a.annotations.size(), b.annotations.size());
    for (size_t i = 0; i < a.annotations.size(); ++i) {
        const model::Annotation& x = a.annotations[i];
        const model::Annotation& y = b.annotations[i];
        const std::string at = "annotation " + std::to_string(i) + ": ";
        MS_SAME(at + "stage", x.stage, y.stage);
        if (layouts || x.stageName != model::EmptyString)
            MS_SAME(at + "stage name", a.str(x.stageName), b.str(y.stageName));
        MS_SAME(at + "name", a.str(x.name), b.str(y.name));
        MS_SAME(at + "device", x.device, y.device);
        MS_SAME(at + "time_us", x.timeUs, y.timeUs);
    }
    MS_SAME("streams", a.streams, b.streams);
#undef MS_SAME
    return {};
}

std::shared_ptr<const Snapshot> reload(const std::string& bytes, const std::string& name)
{
    const io::LoadResult r = io::loadSnapshotFromMemory(bytesOf(bytes), name);
    if (!r.ok())
        qWarning("%s", r.error.toString().c_str());
    return r.snapshot;
}

// A snapshot made in code, as a live capture would: no layouts recorded, so writers use PyTorch's key order.
Snapshot makeSnapshot()
{
    Snapshot s;
    model::StackInterner interner(s);
    const model::FrameId f1 = interner.frame(s.strings.intern("forward"), s.strings.intern("model.py"), 12);
    const model::FrameId f2 = interner.frame(s.strings.intern("main"), s.strings.intern("train.py"), 40);
    const model::StackId deep = interner.stack({ f1, f2 });
    const model::StackId shallow = interner.stack({ f2 });

    model::Segment seg;
    seg.device = 0;
    seg.address = 0x7f0000000000;
    seg.totalSize = 2 << 20;
    seg.allocatedSize = 1 << 20;
    seg.activeSize = 1 << 20;
    seg.requestedSize = (1 << 20) - 3;
    seg.stream = 0;
    seg.segmentType = s.strings.intern("large");
    seg.stack = shallow;
    seg.blockBegin = 0;
    seg.blockCount = 2;
    model::Block used;
    used.address = seg.address;
    used.size = 1 << 20;
    used.requestedSize = (1 << 20) - 3;
    used.state = model::BlockState::ActiveAllocated;
    used.stack = deep;
    model::Block free;
    free.address = seg.address + (1 << 20);
    free.size = 1 << 20;
    free.state = model::BlockState::Inactive;
    s.blocks = { used, free };
    s.segments = { seg };

    auto entry = [&](model::Action action, int64_t addr, int64_t size, int64_t time, model::StackId stack) {
        model::TraceEntry e;
        e.action = action;
        e.addr = addr;
        e.size = size;
        e.timeUs = time;
        e.stack = stack;
        e.hasFrames = action != model::Action::Snapshot && action != model::Action::Oom;
        e.form = s.entryForms.intern({ .compileContext = s.strings.intern("N/A") });
        return e;
    };
    s.deviceTraces = { {
        entry(model::Action::SegmentAlloc, seg.address, 2 << 20, 100, shallow),
        entry(model::Action::Alloc, seg.address, (1 << 20) - 3, 101, deep),
        entry(model::Action::Oom, 12345, 1 << 30, 102, model::EmptyStack),
        entry(model::Action::Snapshot, 0, 1 << 20, 103, model::EmptyStack),
    } };
    s.hasDeviceTraces = true;
    s.hasAnnotationsKey = true;
    model::Annotation start;
    start.stage = model::Annotation::Stage::Start;
    start.name = s.strings.intern("step_0");
    start.timeUs = 99;
    s.annotations = { start };
    Value settings;
    settings.kind = Value::Kind::Dict;
    Value threshold;
    threshold.kind = Value::Kind::Float;
    threshold.real = 0.5;
    settings.entries.emplace_back("garbage_collection_threshold", threshold);
    s.allocatorSettings = settings;
    s.streams = { 0 };
    return s;
}

QString python()
{
    return QStandardPaths::findExecutable(QStringLiteral("python3"));
}

// Runs an inline Python script with arguments; returns "" on success, else what went wrong.
QString runPython(const QString& exe, const char* script, const QStringList& args)
{
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(exe, QStringList { QStringLiteral("-c"), QString::fromUtf8(script) } + args);
    if (!p.waitForFinished(300000))
        return QStringLiteral("python3 did not finish: ") + p.errorString();
    if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0)
        return QString::fromUtf8(p.readAll());
    return {};
}

bool writeFile(const QString& path, const std::string& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.write(bytes.data(), qint64(bytes.size())) == qint64(bytes.size());
}

QByteArray readFile(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

QStringList tempLeftovers(const QString& folder)
{
    return QDir(folder).entryList({ QStringLiteral("*.tmp-*") }, QDir::Files | QDir::Hidden);
}

// Synthetic documents for edge cases no real snapshot has. JSON is the easiest way to write them down; the
// tables write its double quotes as single quotes (no document here has an apostrophe in a string).
QByteArray json(const char* text)
{
    QByteArray doc(text);
    doc.replace('\'', '"');
    return doc;
}

QByteArray manyKeysSettings()
{
    QByteArray d = "{\"exactly_1000_keys\":{";
    for (int i = 0; i < 1000; ++i)
        d += (i ? "," : "") + QByteArray("\"k") + QByteArray::number(i) + "\":" + QByteArray::number(i);
    d += "},\"list_of_1001\":[";
    for (int i = 0; i < 1001; ++i)
        d += (i ? "," : "") + QByteArray::number(i * 1000003LL);
    d += "],\"list_of_1\":[7],\"dict_of_1\":{\"a\":null},\"empty_list\":[],\"empty_dict\":{}}";
    return d;
}

} // namespace

class TestWriters : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // --- Real snapshots ---------------------------------------------------------------------------------------------

    void roundTripsRealSnapshots_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("json");
        const QStringList files = realSnapshots();
        if (files.isEmpty())
            QSKIP("no snapshots in ../shared/snapshots (MEMSCOPE_SHARED_DIR)");
        for (const QString& f : files) {
            QTest::addRow("%s through pickle", rowName(f).constData()) << f << false;
            QTest::addRow("%s through JSON", rowName(f).constData()) << f << true;
        }
    }
    void roundTripsRealSnapshots()
    {
        QFETCH(QString, file);
        QFETCH(bool, json);
        const io::LoadResult original = io::loadSnapshot(file.toStdString());
        QVERIFY2(original.ok(), original.error.toString().c_str());
        const std::string bytes = json ? io::encodeJson(*original.snapshot) : io::encodePickle(*original.snapshot);
        const auto again = reload(bytes, file.toStdString());
        QVERIFY(again);
        const std::string diff = firstDifference(*original.snapshot, *again);
        QVERIFY2(diff.empty(), diff.c_str());
        // Encoding is a function of the model's content: the reloaded model encodes to the same bytes.
        QVERIFY(bytes == (json ? io::encodeJson(*again) : io::encodePickle(*again)));
    }

    void pythonReadsRealSnapshots_data()
    {
        QTest::addColumn<QString>("file");
        const QStringList files = realSnapshots();
        if (files.isEmpty())
            QSKIP("no snapshots in ../shared/snapshots (MEMSCOPE_SHARED_DIR)");
        for (const QString& f : files)
            QTest::newRow(rowName(f).constData()) << f;
    }
    void pythonReadsRealSnapshots()
    {
        QFETCH(QString, file);
        const QString exe = python();
        if (exe.isEmpty())
            QSKIP("python3 is not installed: cannot check our pickle against Python's pickle module");
        const QString originalPath = file;
        const io::LoadResult original = io::loadSnapshot(originalPath.toStdString());
        QVERIFY2(original.ok(), original.error.toString().c_str());
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString ourPickle = dir.filePath(QStringLiteral("ours.pickle"));
        const QString ourJson = dir.filePath(QStringLiteral("ours.json"));
        QVERIFY(writeFile(ourPickle, io::encodePickle(*original.snapshot)));
        QVERIFY(writeFile(ourJson, io::encodeJson(*original.snapshot)));
        static const char script[] = R"(
import json, pickle, sys
original, ours, ours_json = sys.argv[1:4]
a = pickle.load(open(original, 'rb'))
data = open(ours, 'rb').read()
b = pickle.loads(data)
assert a == b, 'Python reads our pickle as a different dict'
assert pickle.dumps(b, protocol=4) == data, 'CPython would write other bytes for the object graph we wrote'
text = open(ours_json, 'rb').read().decode('utf-8')
assert text == json.dumps(a, separators=(',', ':'), ensure_ascii=False), 'our JSON is not what json.dumps prints'
)";
        const QString failure = runPython(exe, script, { originalPath, ourPickle, ourJson });
        QVERIFY2(failure.isEmpty(), qPrintable(failure));
    }

    // --- Synthetic edge cases -----------------------------------------------------------------------------------

    void roundTripsSyntheticSnapshots_data()
    {
        QTest::addColumn<QByteArray>("doc");
        QTest::addColumn<bool>("wellFormed"); // false: strings change (U+FFFD) on the first write, then stay
        const QByteArray segment
            = json("{'device':0,'address':4096,'total_size':1024,'allocated_size':512,'active_size':512,"
                   "'requested_size':500,'stream':0,'segment_type':'small','segment_pool_id':[0,1],"
                   "'is_expandable':false,'frames':[],'blocks':[{'address':4096,'size':512,'requested_size':500,"
                   "'state':'active_allocated','frames':[{'name':'f','filename':'a.py','line':1}]},"
                   "{'address':4608,'size':512,'requested_size':0,'state':'inactive','frames':[]}]}");

        QTest::newRow("empty snapshot") << json("{'segments':[],'device_traces':[]}") << true;
        QTest::newRow("unknown keys at every level")
            << json("{'rank':3,'segments':[{'device':0,'address':4096,'total_size':512,"
                    "'x_seg':{'k':[1,2.5,null,true,'s']},'blocks':[{'address':4096,'size':512,'state':'weird',"
                    "'x_blk':'v','frames':[]}]}],'device_traces':[[{'time_us':1,'action':'teleport','addr':4096,"
                    "'x_ent':[],'size':1,'stream':0}]],'meta':{'host':'h'}}")
            << true;
        QTest::newRow("settings: a dict of exactly 1000 keys and lists of 1, 1001 items")
            << json("{'segments':[],'device_traces':[],'allocator_settings':") + manyKeysSettings() + "}" << true;
        QTest::newRow("a string of 70000 bytes is written outside frames")
            << json("{'segments':[],'device_traces':[[{'action':'alloc','addr':1,'size':2,'stream':0,'time_us':3,"
                    "'compile_context':'N/A','user_metadata':'")
                + QByteArray(70000, 'x') + json("','frames':[]}]]}")
            << true;
        QTest::newRow("a string of 300 bytes")
            << json("{'segments':[],'device_traces':[],'allocator_settings':{'PYTORCH_CUDA_ALLOC_CONF':'")
                + QByteArray(300, 'y') + json("'}}")
            << true;
        QTest::newRow("legacy: a bare list of segments with history blocks")
            << json("[{'device':0,'address':8192,'total_size':1024,'allocated_size':512,'active_size':512,"
                    "'stream':0,'segment_type':'small','blocks':[{'size':512,'state':'active_allocated',"
                    "'history':[{'addr':8192,'real_size':500,'frames':[{'name':'g','filename':'b.py','line':2}]},"
                    "{'addr':8192,'real_size':400}]},{'size':512,'state':'inactive'}]}]")
            << true;
        QTest::newRow("oom, snapshot and segment_map entries, two devices")
            << json("{'segments':[") + segment
                + json("],'device_traces':[[{'action':'oom','device_free':1073741824,'size':4294967296,'stream':0,"
                       "'time_us':10,'compile_context':'N/A','user_metadata':'','frames':[]},"
                       "{'action':'snapshot','addr':0,'size':512,'stream':0,'time_us':11,'compile_context':'N/A',"
                       "'user_metadata':''}],[{'action':'segment_map','addr':140323521036288,'size':2097152,"
                       "'stream':94827349,'time_us':12,'compile_context':'Torch-Compiled Region: 0/0',"
                       "'user_metadata':'m'}]],"
                       "'external_annotations':[{'stage':'START','name':'step','device':0,'time_us':9}]}")
            << true;
        QTest::newRow("strings that need escapes, non-ASCII and a lone surrogate")
            << json("{'segments':[],'device_traces':[[{'action':'alloc','addr':1,'size':2,'stream':0,'time_us':3,"
                    "'compile_context':'q\\\"b\\\\s/\\n\\t\\u0001\\u001f\\u007f',"
                    "'user_metadata':'\\u00e9\\u4e2d\\ud83d\\ude00 \\ud800 \\udfff',"
                    "'frames':[{'name':'<lambda>','filename':'C:\\\\x\\\\y.py','line':-1}]}]]}")
            << true;
        QTest::newRow("ill-formed UTF-8 is replaced by U+FFFD")
            << json("{'segments':[],'device_traces':[],'bad':'a\xFF"
                    "b\xC3'}")
            << false;
        QTest::newRow("integers at opcode boundaries and floats")
            << json("{'segments':[],'device_traces':[],'allocator_settings':{'ints':[0,255,256,65535,65536,-1,"
                    "-256,2147483647,-2147483648,2147483648,-2147483649,549755813888,-549755813888,"
                    "9223372036854775807,-9223372036854775808],'floats':[0.0,-0.0,1.5,1e300,5e-324,0.1,-2.5e-3],"
                    "'bools':[true,false]}}")
            << true;
        // PyTorch writes size_t and uint64_t values as unsigned Python ints: frame lines of 2^64 - 1 from
        // torch.compile (and -1 for the same line from its C++ writer), any of them in settings or unknown keys.
        QTest::newRow("unsigned 64-bit integers: frame lines and settings") << json(
            "{'segments':[],'device_traces':[[{'action':'alloc','addr':4096,'size':8,'stream':0,"
            "'frames':[{'name':'f','filename':'a.py','line':18446744073709551615},"
            "{'name':'g','filename':'a.py','line':-1},{'name':'h','filename':'a.py','line':9223372036854775808},"
            "{'name':'i','filename':'a.py','line':9223372036854775807}]}]],"
            "'allocator_settings':{'u':[18446744073709551615,9223372036854775808,-9223372036854775808]},"
            "'x_top':18446744073709551615}") << true;
        QTest::newRow("keys in an unusual order")
            << json("{'device_traces':[[{'size':2,'addr':1,'action':'alloc','stream':0,'time_us':3}]],"
                    "'segments':[{'blocks':[],'device':1,'address':0,'total_size':0,'frames':[],"
                    "'segment_pool_id':[0,0]}]}")
            << true;
        QTest::newRow("duplicate frames and stacks are shared")
            << json("{'segments':[],'device_traces':[[")
                + json("{'action':'alloc','addr':1,'size':2,'stream':0,'time_us':3,'compile_context':'N/A',"
                       "'user_metadata':'','frames':[{'name':'f','filename':'a.py','line':1},"
                       "{'name':'f','filename':'a.py','line':1}]},")
                      .repeated(300)
                + json("{'action':'free_requested','addr':1,'size':2,'stream':0,'time_us':4}]]}")
            << true;
        // Each entry's stream, action spelling, compile_context, user_metadata, key order and unknown keys are its
        // form (model::EntryForm), stored once per distinct combination: 600 entries cycling through more forms than
        // the interning cache holds, streams at the ends of int64, some with unknown keys (a form of their own).
        {
            static const char* const actions[] = { "alloc", "free_requested", "free_completed", "free", "teleport" };
            static const char* const streams[] = { "0", "-1", "-9223372036854775808", "9223372036854775807", "7" };
            QByteArray entries;
            for (int i = 0; i < 600; ++i) {
                entries += (i ? "," : "") + json("{'action':'") + actions[i % 5] + json("','addr':")
                    + QByteArray::number(4096 + 512 * (i % 13)) + json(",'size':512,'stream':")
                    + (i % 7 < 5 ? QByteArray(streams[i % 7]) : QByteArray::number(1000 + i % 97))
                    + json(",'time_us':") + QByteArray::number(i) + json(",'compile_context':'c")
                    + QByteArray::number(i % 11) + json("','user_metadata':'m") + QByteArray::number(i % 3)
                    + (i % 50 == 0 ? json("','x_entry':") + QByteArray::number(i) + "}" : json("'}"));
            }
            QTest::newRow("entries of many forms")
                << json("{'segments':[],'device_traces':[[") + entries + json("]]}") << true;
        }
    }
    void roundTripsSyntheticSnapshots()
    {
        QFETCH(QByteArray, doc);
        QFETCH(bool, wellFormed);
        const io::LoadResult original = io::loadSnapshotFromMemory(bytesOf(doc), "synthetic.json");
        QVERIFY2(original.ok(), original.error.toString().c_str());
        for (const bool json : { false, true }) {
            const std::string bytes = json ? io::encodeJson(*original.snapshot) : io::encodePickle(*original.snapshot);
            const auto again = reload(bytes, json ? "again.json" : "again.pickle");
            QVERIFY(again);
            if (wellFormed) {
                const std::string diff = firstDifference(*original.snapshot, *again);
                QVERIFY2(diff.empty(), (std::string(json ? "JSON: " : "pickle: ") + diff).c_str());
            }
            QVERIFY(bytes == (json ? io::encodeJson(*again) : io::encodePickle(*again)));
        }

        const QString exe = python();
        if (exe.isEmpty())
            QSKIP("python3 is not installed: the model round trip passed, Python's view is not checked");
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString docPath = dir.filePath(QStringLiteral("doc.json"));
        const QString ourPickle = dir.filePath(QStringLiteral("ours.pickle"));
        const QString ourJson = dir.filePath(QStringLiteral("ours.json"));
        QVERIFY(writeFile(docPath, doc.toStdString()));
        QVERIFY(writeFile(ourPickle, io::encodePickle(*original.snapshot)));
        QVERIFY(writeFile(ourJson, io::encodeJson(*original.snapshot)));
        static const char script[] = R"(
import json, pickle, sys
doc, ours, ours_json = sys.argv[1:4]
source = open(doc, 'rb').read().decode('utf-8', 'replace')
expected = json.loads(source)
segments = expected if isinstance(expected, list) else expected['segments']
for s in segments:
    if 'segment_pool_id' in s:
        s['segment_pool_id'] = tuple(s['segment_pool_id'])
data = open(ours, 'rb').read()
b = pickle.loads(data)
assert b == expected, 'Python reads our pickle as %r' % (b,)
assert pickle.dumps(b, protocol=4) == data, 'CPython would write other bytes for the object graph we wrote'
assert json.loads(open(ours_json, 'rb').read().decode('utf-8')) == json.loads(source), 'our JSON differs'
)";
        const QString failure = runPython(exe, script, { docPath, ourPickle, ourJson });
        QVERIFY2(failure.isEmpty(), qPrintable(failure));
    }

    void snapshotMadeInCodeUsesPyTorchKeyOrder()
    {
        const Snapshot made = makeSnapshot();
        for (const bool json : { false, true }) {
            const std::string bytes = json ? io::encodeJson(made) : io::encodePickle(made);
            const auto again = reload(bytes, json ? "made.json" : "made.pickle");
            QVERIFY(again);
            const std::string diff = firstDifference(made, *again, false);
            QVERIFY2(diff.empty(), diff.c_str());
            using Keys = std::vector<std::string>;
            QCOMPARE(layoutText(*again, again->topLevelLayout),
                     (Keys { "segments", "device_traces", "allocator_settings", "external_annotations" }));
            QCOMPARE(layoutText(*again, again->segments[0].layout),
                     (Keys { "device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                             "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks" }));
            QCOMPARE(layoutText(*again, again->blocks[0].layout),
                     (Keys { "address", "size", "requested_size", "state", "frames" }));
            const auto& trace = again->deviceTraces[0];
            QCOMPARE(layoutText(*again, again->form(trace[1]).layout),
                     (Keys { "action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata",
                             "frames" }));
            QCOMPARE(layoutText(*again, again->form(trace[2]).layout),
                     (Keys { "action", "device_free", "size", "stream", "time_us", "compile_context",
                             "user_metadata" }));
            QCOMPARE(again->str(again->blocks[1].stateName), std::string_view("inactive"));
            QCOMPARE(again->str(again->form(trace[3]).actionName), std::string_view("snapshot"));
            QCOMPARE(again->str(again->annotations[0].stageName), std::string_view("START"));
        }
    }

    // --- Pickle details -------------------------------------------------------------------------------------------

    void pickleIntegerOpcodes_data()
    {
        QTest::addColumn<qint64>("value");
        QTest::addColumn<QByteArray>("opcode");
        // What CPython's save_long writes (checked against pickle.dumps(v, protocol=4)).
        QTest::newRow("0: BININT1") << qint64(0) << QByteArray("K\x00", 2);
        QTest::newRow("255: BININT1") << qint64(255) << QByteArray("K\xFF");
        QTest::newRow("256: BININT2") << qint64(256) << QByteArray("M\x00\x01", 3);
        QTest::newRow("65535: BININT2") << qint64(65535) << QByteArray("M\xFF\xFF");
        QTest::newRow("65536: BININT") << qint64(65536) << QByteArray("J\x00\x00\x01\x00", 5);
        QTest::newRow("-1: BININT") << qint64(-1) << QByteArray("J\xFF\xFF\xFF\xFF");
        QTest::newRow("INT32_MAX: BININT") << qint64(INT32_MAX) << QByteArray("J\xFF\xFF\xFF\x7F");
        QTest::newRow("INT32_MIN: BININT") << qint64(INT32_MIN) << QByteArray("J\x00\x00\x00\x80", 5);
        QTest::newRow("2^31: LONG1 of 5 bytes") << (qint64(1) << 31) << QByteArray("\x8a\x05\x00\x00\x00\x80\x00", 7);
        QTest::newRow("-2^31-1: LONG1 of 5 bytes")
            << qint64(INT32_MIN) - 1 << QByteArray("\x8a\x05\xFF\xFF\xFF\x7F\xFF");
        QTest::newRow("2^39: LONG1 of 6 bytes (sign byte)")
            << (qint64(1) << 39) << QByteArray("\x8a\x06\x00\x00\x00\x00\x80\x00", 8);
        QTest::newRow("-2^39: LONG1 of 5 bytes") << -(qint64(1) << 39) << QByteArray("\x8a\x05\x00\x00\x00\x00\x80", 7);
        QTest::newRow("a 47-bit device address: LONG1 of 6 bytes")
            << qint64(140323521036288) << QByteArray("\x8a\x06\x00\x00\xa0\x9d\x9f\x7f", 8);
        QTest::newRow("INT64_MAX: LONG1 of 8 bytes")
            << std::numeric_limits<qint64>::max() << QByteArray("\x8a\x08\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x7F");
        QTest::newRow("INT64_MIN: LONG1 of 8 bytes")
            << std::numeric_limits<qint64>::min() << QByteArray("\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80", 10);
    }
    void pickleIntegerOpcodes()
    {
        QFETCH(qint64, value);
        QFETCH(QByteArray, opcode);
        Snapshot s;
        Value v;
        v.kind = Value::Kind::Int;
        v.integer = value;
        s.allocatorSettings = v;
        const std::string bytes = io::encodePickle(s);
        const std::string key = "\x8c\x12" "allocator_settings\x94";
        const size_t at = bytes.find(key);
        QVERIFY(at != std::string::npos);
        QCOMPARE(QByteArray::fromStdString(bytes.substr(at + key.size(), size_t(opcode.size()))), opcode);
    }

    void pickleFramesAreAtLeast64KiB()
    {
        // 3000 entries with distinct sizes: several frames.
        Snapshot s;
        s.hasDeviceTraces = true;
        s.deviceTraces.emplace_back();
        for (int i = 0; i < 3000; ++i) {
            model::TraceEntry e;
            e.action = model::Action::Alloc;
            e.addr = 0x7f0000000000 + int64_t(i) * 512;
            e.size = 1000 + i;
            e.timeUs = 1700000000000000 + i;
            s.deviceTraces[0].push_back(e);
        }
        const std::string bytes = io::encodePickle(s);
        QCOMPARE(QByteArray::fromStdString(bytes.substr(0, 3)), QByteArray("\x80\x04\x95"));
        // Walk the FRAME headers: every frame but the last is 64 KiB or a little more (Modules/_pickle.c closes a
        // frame at the first object boundary past FRAME_SIZE_TARGET); the last one ends with STOP.
        size_t pos = 2;
        int frames = 0;
        while (pos < bytes.size()) {
            QCOMPARE(uint8_t(bytes[pos]), uint8_t(0x95));
            uint64_t length = 0;
            std::memcpy(&length, bytes.data() + pos + 1, 8);
            pos += 9 + length;
            ++frames;
            if (pos < bytes.size()) {
                QVERIFY(length >= 64 * 1024);
                QVERIFY(length < 64 * 1024 + 64);
            }
        }
        QCOMPARE(pos, bytes.size());
        QVERIFY(frames >= 2);
        QCOMPARE(bytes.back(), '.');
    }

    // --- JSON details ---------------------------------------------------------------------------------------------

    void jsonFloatsAsPythonPrintsThem_data()
    {
        QTest::addColumn<double>("value");
        QTest::addColumn<QByteArray>("text");
        // repr(float) in Python 3: shortest round-trip digits, positional for exponents -4..15.
        QTest::newRow("zero") << 0.0 << QByteArray("0.0");
        QTest::newRow("negative zero") << -0.0 << QByteArray("-0.0");
        QTest::newRow("one and a half") << 1.5 << QByteArray("1.5");
        QTest::newRow("a tenth") << 0.1 << QByteArray("0.1");
        QTest::newRow("a third") << 1.0 / 3 << QByteArray("0.3333333333333333");
        QTest::newRow("0.1 + 0.2") << 0.1 + 0.2 << QByteArray("0.30000000000000004");
        QTest::newRow("1e15 is still positional") << 1e15 << QByteArray("1000000000000000.0");
        QTest::newRow("1e16 switches to an exponent") << 1e16 << QByteArray("1e+16");
        QTest::newRow("0.0001 is positional") << 0.0001 << QByteArray("0.0001");
        QTest::newRow("1e-5 switches to an exponent") << 1e-5 << QByteArray("1e-05");
        QTest::newRow("negative small") << -2.5e-3 << QByteArray("-0.0025");
        QTest::newRow("fraction of eighths") << 123456789.125 << QByteArray("123456789.125");
        QTest::newRow("largest double") << 1.7976931348623157e308 << QByteArray("1.7976931348623157e+308");
        QTest::newRow("smallest subnormal") << 5e-324 << QByteArray("5e-324");
        QTest::newRow("NaN becomes null") << std::nan("") << QByteArray("null");
        QTest::newRow("infinity becomes null") << std::numeric_limits<double>::infinity() << QByteArray("null");
        QTest::newRow("negative infinity becomes null") << -std::numeric_limits<double>::infinity()
                                                        << QByteArray("null");
    }
    void jsonFloatsAsPythonPrintsThem()
    {
        QFETCH(double, value);
        QFETCH(QByteArray, text);
        Snapshot s;
        Value v;
        v.kind = Value::Kind::Float;
        v.real = value;
        s.allocatorSettings = v;
        const std::string json = io::encodeJson(s);
        const std::string key = "\"allocator_settings\":";
        const size_t at = json.find(key);
        QVERIFY(at != std::string::npos);
        const size_t end = json.find(',', at);
        QCOMPARE(QByteArray::fromStdString(json.substr(at + key.size(), end - at - key.size())), text);
    }

    void jsonStringEscapes_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<QByteArray>("json");
        QTest::newRow("plain ASCII") << QByteArray("forward") << QByteArray("\"forward\"");
        QTest::newRow("quote and backslash") << QByteArray("a\"b\\c") << QByteArray("\"a\\\"b\\\\c\"");
        QTest::newRow("named control escapes") << QByteArray("\b\f\n\r\t") << QByteArray("\"\\b\\f\\n\\r\\t\"");
        QTest::newRow("other controls as \\u00XX") << QByteArray("\x01\x1f", 2) << QByteArray("\"\\u0001\\u001f\"");
        QTest::newRow("NUL") << QByteArray("a\0b", 3) << QByteArray("\"a\\u0000b\"");
        QTest::newRow("slash and DEL are not escaped") << QByteArray("/\x7f") << QByteArray("\"/\x7f\"");
        QTest::newRow("valid UTF-8 is copied") << QByteArray("\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80")
                                               << QByteArray("\"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\"");
        QTest::newRow("an ill-formed byte becomes U+FFFD") << QByteArray("a\xFF" "b")
                                                            << QByteArray("\"a\xEF\xBF\xBD" "b\"");
        QTest::newRow("a truncated sequence at the end becomes U+FFFD") << QByteArray("a\xE4\xB8")
                                                                        << QByteArray("\"a\xEF\xBF\xBD\xEF\xBF\xBD\"");
        QTest::newRow("an overlong encoding becomes U+FFFD") << QByteArray("\xC0\xAF")
                                                             << QByteArray("\"\xEF\xBF\xBD\xEF\xBF\xBD\"");
        QTest::newRow("an encoded lone surrogate becomes an escape") << QByteArray("x\xED\xB2\x80y")
                                                                     << QByteArray("\"x\\udc80y\"");
    }
    void jsonStringEscapes()
    {
        QFETCH(QByteArray, text);
        QFETCH(QByteArray, json);
        Snapshot s;
        Value v;
        v.kind = Value::Kind::String;
        v.text = text.toStdString();
        s.allocatorSettings = v;
        const std::string out = io::encodeJson(s);
        const std::string key = "\"allocator_settings\":";
        const size_t at = out.find(key);
        QVERIFY(at != std::string::npos);
        const size_t end = out.find(",\"external_annotations\"", at);
        QVERIFY(end != std::string::npos);
        QCOMPARE(QByteArray::fromStdString(out.substr(at + key.size(), end - at - key.size())), json);
        // And the reader takes it back (ill-formed bytes stay replaced).
        const auto again = reload(out, "escapes.json");
        QVERIFY(again && again->allocatorSettings);
        if (!json.contains("\xEF\xBF\xBD") && !json.contains("\\ud"))
            QCOMPARE(QByteArray::fromStdString(again->allocatorSettings->text), text);
    }

    // --- saveSnapshot ---------------------------------------------------------------------------------------------

    void saveSnapshotReplacesAtomically()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const Snapshot made = makeSnapshot();

        const QString pickle = dir.filePath(QStringLiteral("new.pickle"));
        io::Error err = io::saveSnapshot(made, pickle.toStdString());
        QVERIFY2(!err, err.toString().c_str());
        QCOMPARE(readFile(pickle), QByteArray::fromStdString(io::encodePickle(made)));
        const mode_t mask = ::umask(022);
        ::umask(mask);
        struct stat st {};
        QCOMPARE(::stat(pickle.toLocal8Bit().constData(), &st), 0);
        QCOMPARE(st.st_mode & 0777, 0666 & ~mask);

        // An existing file is replaced, keeping its permissions.
        QVERIFY(writeFile(pickle, "old"));
        QCOMPARE(::chmod(pickle.toLocal8Bit().constData(), 0640), 0);
        err = io::saveSnapshot(made, pickle.toStdString());
        QVERIFY2(!err, err.toString().c_str());
        const io::LoadResult back = io::loadSnapshot(pickle.toStdString());
        QVERIFY2(back.ok(), back.error.toString().c_str());
        QVERIFY(firstDifference(made, *back.snapshot, false).empty());
        QCOMPARE(::stat(pickle.toLocal8Bit().constData(), &st), 0);
        QCOMPARE(st.st_mode & 0777, mode_t(0640));

        // Format::Auto: a .json suffix writes JSON; an explicit format wins over the suffix.
        const QString json = dir.filePath(QStringLiteral("new.json"));
        QVERIFY(!io::saveSnapshot(made, json.toStdString()));
        QVERIFY(readFile(json).startsWith("{\"segments\":"));
        QVERIFY(!io::saveSnapshot(made, json.toStdString(), io::Format::Pickle));
        QVERIFY(readFile(json).startsWith("\x80\x04"));
        QVERIFY(tempLeftovers(dir.path()).isEmpty());
    }

    void saveSnapshotFailures_data()
    {
        QTest::addColumn<QString>("failure");
        QTest::newRow("the folder does not exist") << QStringLiteral("missing-folder");
        QTest::newRow("the target is a folder") << QStringLiteral("target-is-folder");
        QTest::newRow("the disk fills up (file size limit)") << QStringLiteral("file-size-limit");
        QTest::newRow("the folder is read-only") << QStringLiteral("read-only");
    }
    void saveSnapshotFailures()
    {
        QFETCH(QString, failure);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const Snapshot made = makeSnapshot();
        const QByteArray oldContent("the previous file, which must survive");
        QString target = dir.filePath(QStringLiteral("snap.pickle"));
        QString folder = dir.path();
        io::Error err;

        if (failure == QLatin1String("missing-folder")) {
            folder = dir.filePath(QStringLiteral("no/such/folder"));
            target = folder + QStringLiteral("/snap.pickle");
            err = io::saveSnapshot(made, target.toStdString());
            QVERIFY(!QFileInfo::exists(target));
        } else if (failure == QLatin1String("target-is-folder")) {
            QVERIFY(QDir(dir.path()).mkdir(QStringLiteral("snap.pickle")));
            QVERIFY(writeFile(target + QStringLiteral("/inside"), oldContent.toStdString()));
            err = io::saveSnapshot(made, target.toStdString());
            QVERIFY(QFileInfo(target).isDir());
            QCOMPARE(readFile(target + QStringLiteral("/inside")), oldContent);
        } else if (failure == QLatin1String("file-size-limit")) {
            // RLIMIT_FSIZE makes write() fail with EFBIG past the limit, as a full disk fails with ENOSPC; it binds
            // root too. SIGXFSZ would kill the process: ignore it for the duration.
            QVERIFY(writeFile(target, oldContent.toStdString()));
            struct rlimit saved {};
            QCOMPARE(::getrlimit(RLIMIT_FSIZE, &saved), 0);
            struct rlimit small = saved;
            small.rlim_cur = 100;
            const auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
            QCOMPARE(::setrlimit(RLIMIT_FSIZE, &small), 0);
            err = io::saveSnapshot(made, target.toStdString());
            ::setrlimit(RLIMIT_FSIZE, &saved);
            std::signal(SIGXFSZ, oldHandler);
            QVERIFY(io::encodePickle(made).size() > 100);
            QCOMPARE(readFile(target), oldContent);
        } else if (failure == QLatin1String("read-only")) {
            if (::geteuid() == 0)
                QSKIP("running as root, which may write into a read-only folder (the file size limit row covers "
                      "failed writes)");
            QVERIFY(writeFile(target, oldContent.toStdString()));
            QVERIFY(QFile::setPermissions(dir.path(), QFile::ReadOwner | QFile::ExeOwner));
            err = io::saveSnapshot(made, target.toStdString());
            QFile::setPermissions(dir.path(), QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
            QCOMPARE(readFile(target), oldContent);
        }

        QCOMPARE(err.code, io::ErrorCode::Io);
        QCOMPARE(err.path, target.toStdString());
        QVERIFY(!err.message.empty());
        QVERIFY2(err.toString().find(target.toStdString()) != std::string::npos, err.toString().c_str());
        QVERIFY(tempLeftovers(folder).isEmpty());
    }
};

QTEST_GUILESS_MAIN(TestWriters)
#include "tst_writers.moc"
