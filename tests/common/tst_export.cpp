// Tests of the exports (common/io/sqlitewriter.cpp, perfettowriter.cpp, routed by saveSnapshot and `memscope-cli
// convert`): on real snapshots, the SQLite database read back with sqlite3 has the model's rows, counts and sums
// (entries per device, segments, blocks, annotations) and every stack joined back from frames equals the original;
// Python's sqlite3 module reads it too (skipped without python3); the Perfetto JSON parses, its counters peak at the
// replay's peaks and every allocation is one begun-and-ended async slice; the CLI picks the format by suffix or
// --format; an output that cannot be written gives exit status 1, one line naming it, and no file. Test thread only.
#include "io/snapshotio.h"
#include "io/sqlitewriter.h"
#include "model/replay.h"
#include "model/snapshot.h"
#include "runprogram.h"
#include "testutil.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHash>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <sqlite3.h>

#include <csignal>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <sys/resource.h>

using namespace memscope;
using model::Snapshot;

namespace {

// Real snapshots of every shape: one and two devices, several streams, expandable segments, OOMs, CUDA graphs,
// torch.compile (frame lines of 2^64 - 1), and big_trace's 111,496 entries.
QStringList fixtures()
{
    return {
        QString::fromStdString(test::dataPath("oom.pickle")),
        QString::fromStdString(test::dataPath("cudagraph.pickle")),
        QString::fromStdString(test::snapshotPath("two_device.pickle")),
        QString::fromStdString(test::snapshotPath("multistream.pickle")),
        QString::fromStdString(test::snapshotPath("expandable_segments.pickle")),
        QString::fromStdString(test::snapshotPath("transformer_train.pickle")),
        QString::fromStdString(test::dataPath("corpus/compile_default.pickle")),
        QString::fromStdString(test::snapshotPath("big_trace.pickle.xz")),
    };
}

void addFixtureRows()
{
    QTest::addColumn<QString>("path");
    for (const QString& path : fixtures())
        QTest::newRow(QFileInfo(path).fileName().toUtf8().constData()) << path;
}

std::shared_ptr<const Snapshot> loadOrSkip(const QString& path, bool& ok)
{
    ok = false;
    if (!QFileInfo::exists(path))
        return nullptr;
    io::LoadResult r = io::loadSnapshot(path.toStdString());
    if (!r.ok())
        return nullptr;
    ok = true;
    return r.snapshot;
}

// A read-only connection and one-value queries on it.
class Db {
public:
    explicit Db(const QString& path)
    {
        m_rc = sqlite3_open_v2(path.toUtf8().constData(), &m_db, SQLITE_OPEN_READONLY, nullptr);
    }
    ~Db() { sqlite3_close_v2(m_db); }
    bool ok() const { return m_rc == SQLITE_OK; }
    sqlite3* handle() const { return m_db; }

    int64_t integer(const char* sql, int64_t bind = INT64_MIN) const
    {
        sqlite3_stmt* st = nullptr;
        if (sqlite3_prepare_v2(m_db, sql, -1, &st, nullptr) != SQLITE_OK)
            return INT64_MIN;
        if (bind != INT64_MIN)
            sqlite3_bind_int64(st, 1, bind);
        const int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : INT64_MIN;
        sqlite3_finalize(st);
        return v;
    }
    std::string text(const char* sql) const
    {
        sqlite3_stmt* st = nullptr;
        std::string v;
        if (sqlite3_prepare_v2(m_db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
            v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        return v;
    }

private:
    sqlite3* m_db = nullptr;
    int m_rc = SQLITE_ERROR;
};

// A frame as text, from the model or from a row.
std::string frameText(const std::string& name, const std::string& filename, int64_t line)
{
    return filename + ":" + std::to_string(line) + ":" + name;
}
std::vector<std::string> modelStack(const Snapshot& s, bool present, model::StackId id)
{
    std::vector<std::string> out;
    if (!present)
        return out;
    for (const model::FrameId* f = s.stackBegin(id); f != s.stackEnd(id); ++f) {
        const model::Frame& fr = s.frame(*f);
        out.push_back(frameText(std::string(s.str(fr.name)), std::string(s.str(fr.filename)), fr.line.bits()));
    }
    return out;
}

// Every row's stack, joined back from stack_frames and frames: row id -> frames, innermost first (rows without a
// stack are absent).
std::map<int64_t, std::vector<std::string>> joinedStacks(const Db& db, const char* table)
{
    const std::string sql = std::string("SELECT t.id, f.name, f.filename, f.line FROM ") + table
        + " t JOIN stack_frames sf ON sf.stack_id = t.stack_id JOIN frames f ON f.id = sf.frame_id "
          "ORDER BY t.id, sf.position";
    std::map<int64_t, std::vector<std::string>> out;
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
        return out;
    while (sqlite3_step(st) == SQLITE_ROW) {
        auto col = [&](int i) { return std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, i))); };
        out[sqlite3_column_int64(st, 0)].push_back(frameText(col(1), col(2), sqlite3_column_int64(st, 3)));
    }
    sqlite3_finalize(st);
    return out;
}

using test::Run;

Run runCli(const QStringList& args) { return test::runProgram(QStringLiteral("memscope-cli"), args); }

QByteArray head(const QString& path, int n)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.read(n) : QByteArray();
}

} // namespace

class TestExport : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void sqliteMatchesModel_data() { addFixtureRows(); }
    void sqliteMatchesModel()
    {
        QFETCH(QString, path);
        bool ok = false;
        const auto s = loadOrSkip(path, ok);
        if (!ok)
            QSKIP("fixture missing or unreadable (MEMSCOPE_SHARED_DIR, tests/data)");
        QTemporaryDir dir;
        const QString out = dir.filePath(QStringLiteral("out.sqlite"));
        const io::Error e = io::saveSnapshot(*s, out.toStdString());
        QVERIFY2(!e, e.toString().c_str());
        QCOMPARE(head(out, 16), QByteArray("SQLite format 3\0", 16));

        Db db(out);
        QVERIFY(db.ok());
        QCOMPARE(db.text("PRAGMA integrity_check"), std::string("ok"));
        QCOMPARE(db.integer("PRAGMA user_version"), int64_t(1));
        QCOMPARE(db.integer("SELECT value FROM metadata WHERE key = 'schema_version'"), int64_t(1));

        // Trace entries: count and byte sums per device, actions as the file names them.
        int64_t allEntries = 0;
        for (size_t d = 0; d < s->deviceTraces.size(); ++d) {
            const model::Trace& t = s->deviceTraces[d];
            int64_t sizes = 0, allocs = 0, times = 0;
            for (size_t i = 0; i < t.size(); ++i) {
                sizes += t[i].size;
                times += t[i].timeUs % 1000003;
                allocs += t[i].action == model::Action::Alloc;
            }
            allEntries += int64_t(t.size());
            QCOMPARE(db.integer("SELECT count(*) FROM device_traces WHERE device = ?1", int64_t(d)), int64_t(t.size()));
            QCOMPARE(db.integer("SELECT coalesce(sum(size), 0) FROM device_traces WHERE device = ?1", int64_t(d)),
                     sizes);
            QCOMPARE(
                db.integer("SELECT count(*) FROM device_traces WHERE device = ?1 AND action = 'alloc'", int64_t(d)),
                allocs);
            QCOMPARE(db.integer("SELECT coalesce(sum(time_us % 1000003), 0) FROM device_traces WHERE device = ?1",
                                int64_t(d)),
                     times);
        }
        QCOMPARE(db.integer("SELECT count(*) FROM device_traces"), allEntries);
        QCOMPARE(db.integer("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"),
                 int64_t(5)); // docs/sqlite.md's five

        // Segments and blocks: counts, byte sums, and the segment each block belongs to.
        int64_t total = 0, allocated = 0, requested = 0, blockBytes = 0, blockRequested = 0, activeBlocks = 0;
        for (const model::Segment& seg : s->segments) {
            total += seg.totalSize;
            allocated += seg.allocatedSize;
            requested += seg.requestedSize;
            for (uint32_t i = 0; i < seg.blockCount; ++i) {
                const model::Block& b = s->blocks[seg.blockBegin + i];
                blockBytes += b.size;
                blockRequested += b.requestedSize;
                activeBlocks += b.state == model::BlockState::ActiveAllocated;
            }
        }
        QCOMPARE(db.integer("SELECT count(*) FROM segments"), int64_t(s->segments.size()));
        QCOMPARE(db.integer("SELECT coalesce(sum(total_size), 0) FROM segments"), total);
        QCOMPARE(db.integer("SELECT coalesce(sum(allocated_size), 0) FROM segments"), allocated);
        QCOMPARE(db.integer("SELECT coalesce(sum(requested_size), 0) FROM segments"), requested);
        QCOMPARE(db.integer("SELECT count(*) FROM blocks"), int64_t(s->blocks.size()));
        QCOMPARE(db.integer("SELECT coalesce(sum(size), 0) FROM blocks"), blockBytes);
        QCOMPARE(db.integer("SELECT coalesce(sum(requested_size), 0) FROM blocks"), blockRequested);
        QCOMPARE(db.integer("SELECT count(*) FROM blocks WHERE state = 'active_allocated'"), activeBlocks);
        // Blocks tile their segment: the join on segment_id gives each segment its total size back.
        QCOMPARE(db.integer("SELECT count(*) FROM (SELECT s.id FROM segments s JOIN blocks b ON b.segment_id = s.id "
                            "GROUP BY s.id HAVING sum(b.size) != s.total_size)"),
                 int64_t(0));
        QCOMPARE(db.integer("SELECT count(*) FROM annotations"), int64_t(s->annotations.size()));
        QCOMPARE(db.integer("SELECT count(*) FROM frames"), int64_t(s->frames.size()));

        // Every stack joined back from frames equals the original, entry by entry and block by block.
        const auto entryStacks = joinedStacks(db, "device_traces");
        int64_t id = 0;
        for (const model::Trace& t : s->deviceTraces) {
            for (size_t i = 0; i < t.size(); ++i, ++id) {
                const auto expected = modelStack(*s, true, t[i].stack);
                const auto it = entryStacks.find(id);
                const std::vector<std::string> got = it == entryStacks.end() ? std::vector<std::string>() : it->second;
                if (got != expected)
                    QFAIL(qPrintable(QStringLiteral("trace row %1: the joined stack differs").arg(id)));
            }
        }
        const auto blockStacks = joinedStacks(db, "blocks");
        for (size_t i = 0; i < s->blocks.size(); ++i) {
            const auto it = blockStacks.find(int64_t(i));
            const std::vector<std::string> got = it == blockStacks.end() ? std::vector<std::string>() : it->second;
            if (got != modelStack(*s, true, s->blocks[i].stack))
                QFAIL(qPrintable(QStringLiteral("block row %1: the joined stack differs").arg(i)));
        }
    }

    // A recording's parts are written without their indexes while the recording reads on (io::SaveOptions,
    // memscope-cli record --max-memory) and get them at its end: the rows are the same either way, and indexing
    // twice changes nothing.
    void sqliteIndexesAddedLater_data() { addFixtureRows(); }
    void sqliteIndexesAddedLater()
    {
        QFETCH(QString, path);
        bool ok = false;
        const auto s = loadOrSkip(path, ok);
        if (!ok)
            QSKIP("fixture missing or unreadable (MEMSCOPE_SHARED_DIR, tests/data)");
        QTemporaryDir dir;
        const QString out = dir.filePath(QStringLiteral("part.sqlite"));
        io::SaveOptions options;
        options.sqliteIndexes = false;
        const io::Error e = io::saveSnapshot(*s, out.toStdString(), options);
        QVERIFY2(!e, e.toString().c_str());
        const char* indexes = "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL";
        const char* traceSums = "SELECT coalesce(sum(id * 3 + trace_index + device), 0) FROM device_traces";
        int64_t entries = 0;
        for (const model::Trace& t : s->deviceTraces)
            entries += int64_t(t.size());
        int64_t before = 0;
        {
            Db db(out);
            QVERIFY(db.ok());
            QCOMPARE(db.integer(indexes), int64_t(0));
            QCOMPARE(db.integer("SELECT count(*) FROM device_traces"), entries);
            before = db.integer(traceSums);
        }
        for (int twice = 0; twice < 2; ++twice) {
            const io::Error indexed = io::addSqliteIndexes(out.toStdString());
            QVERIFY2(!indexed, indexed.toString().c_str());
            Db db(out);
            QVERIFY(db.ok());
            QCOMPARE(db.text("PRAGMA integrity_check"), std::string("ok"));
            QCOMPARE(db.integer(indexes), int64_t(5));
            QCOMPARE(db.integer("SELECT count(*) FROM device_traces"), entries);
            QCOMPARE(db.integer(traceSums), before);
        }
        QVERIFY(!QFileInfo::exists(out + QStringLiteral("-journal")));
        // A file that is not a database is refused with its name.
        const QString bad = dir.filePath(QStringLiteral("bad.sqlite"));
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(4096, 'x'));
        f.close();
        const io::Error refused = io::addSqliteIndexes(bad.toStdString());
        QVERIFY(refused);
        QVERIFY2(refused.toString().find(bad.toStdString()) != std::string::npos, refused.toString().c_str());
    }

    void pythonReadsSqlite_data() { addFixtureRows(); }
    void pythonReadsSqlite()
    {
        QFETCH(QString, path);
        const QString python = QStandardPaths::findExecutable(QStringLiteral("python3"));
        if (python.isEmpty())
            QSKIP("python3 is not installed: Python's view of the database is not checked");
        QProcess probe;
        probe.start(python, { QStringLiteral("-c"), QStringLiteral("import sqlite3") });
        if (!probe.waitForFinished(60000) || probe.exitCode() != 0)
            QSKIP("python3 has no sqlite3 module: Python's view of the database is not checked");
        bool ok = false;
        const auto s = loadOrSkip(path, ok);
        if (!ok)
            QSKIP("fixture missing or unreadable (MEMSCOPE_SHARED_DIR, tests/data)");
        QTemporaryDir dir;
        const QString out = dir.filePath(QStringLiteral("out.db"));
        const io::Error e = io::saveSnapshot(*s, out.toStdString());
        QVERIFY2(!e, e.toString().c_str());

        // Python's counts, and the first alloc's stack rebuilt with the join, as a user would query it.
        static const char* Script = R"py(
import sqlite3, sys
db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)
q = lambda sql, *a: db.execute(sql, a).fetchone()[0]
print(q('SELECT count(*) FROM device_traces'), q('SELECT count(*) FROM segments'), q('SELECT count(*) FROM blocks'),
      q('SELECT coalesce(sum(size), 0) FROM blocks'))
)py";
        QProcess p;
        p.start(python, { QStringLiteral("-c"), QString::fromUtf8(Script), out });
        QVERIFY(p.waitForFinished(120000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        int64_t blockBytes = 0;
        for (const model::Block& b : s->blocks)
            blockBytes += b.size;
        const QByteArray expected = QByteArray::number(qint64(s->entryCount())) + ' '
            + QByteArray::number(qint64(s->segments.size())) + ' ' + QByteArray::number(qint64(s->blocks.size())) + ' '
            + QByteArray::number(qint64(blockBytes));
        QCOMPARE(p.readAllStandardOutput().trimmed(), expected);
    }

    void perfettoMatchesReplay_data() { addFixtureRows(); }
    void perfettoMatchesReplay()
    {
        QFETCH(QString, path);
        bool ok = false;
        const auto s = loadOrSkip(path, ok);
        if (!ok)
            QSKIP("fixture missing or unreadable (MEMSCOPE_SHARED_DIR, tests/data)");
        QTemporaryDir dir;
        const QString out = dir.filePath(QStringLiteral("out.trace.json"));
        const io::Error e = io::saveSnapshot(*s, out.toStdString());
        QVERIFY2(!e, e.toString().c_str());

        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QJsonParseError perr;
        const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &perr);
        QVERIFY2(perr.error == QJsonParseError::NoError, qPrintable(perr.errorString()));
        const QJsonArray events = doc.object().value(QLatin1String("traceEvents")).toArray();
        QVERIFY(!events.isEmpty());

        const int devices = s->deviceCount();
        std::vector<double> maxAllocated(size_t(devices), -1), maxReserved(size_t(devices), -1);
        std::vector<int64_t> begins(size_t(devices), 0);
        QHash<QString, double> open; // allocation id -> begin ts
        int64_t ends = 0;
        for (const QJsonValue& v : events) {
            const QJsonObject ev = v.toObject();
            const QString ph = ev.value(QLatin1String("ph")).toString();
            const int pid = ev.value(QLatin1String("pid")).toInt(-1);
            QVERIFY(pid >= 0 && pid < devices);
            QVERIFY(ev.contains(QLatin1String("ts")));
            const QString name = ev.value(QLatin1String("name")).toString();
            if (ph == QLatin1String("C")) {
                const double bytes
                    = ev.value(QLatin1String("args")).toObject().value(QLatin1String("bytes")).toDouble();
                auto& m = name == QLatin1String("allocated") ? maxAllocated : maxReserved;
                m[size_t(pid)] = std::max(m[size_t(pid)], bytes);
            } else if (ev.value(QLatin1String("cat")).toString() == QLatin1String("allocation")) {
                const QString id = ev.value(QLatin1String("id")).toString();
                const double ts = ev.value(QLatin1String("ts")).toDouble();
                if (ph == QLatin1String("b")) {
                    QVERIFY2(!open.contains(id), qPrintable(id));
                    open.insert(id, ts);
                    ++begins[size_t(pid)];
                    const QJsonObject args = ev.value(QLatin1String("args")).toObject();
                    QVERIFY(args.contains(QLatin1String("address")) && args.contains(QLatin1String("size"))
                            && args.contains(QLatin1String("stream")) && args.value(QLatin1String("stack")).isArray());
                } else {
                    QCOMPARE(ph, QStringLiteral("e"));
                    QVERIFY2(open.contains(id), qPrintable(id));
                    QVERIFY(ts >= open.take(id));
                    ++ends;
                }
            }
        }
        QVERIFY(open.isEmpty());
        int64_t allocations = 0;
        for (int d = 0; d < devices; ++d) {
            const model::Replay replay = model::Replay::build(*s, d);
            QCOMPARE(maxAllocated[size_t(d)], double(replay.peakAllocated().bytes));
            QCOMPARE(maxReserved[size_t(d)], double(replay.peakReserved().bytes));
            QCOMPARE(begins[size_t(d)], int64_t(replay.allocations().size()));
            allocations += int64_t(replay.allocations().size());
        }
        QCOMPARE(ends, allocations);
    }

    // The command line picks the format by suffix, or as --format says.
    void cliFormats_data()
    {
        QTest::addColumn<QString>("output");
        QTest::addColumn<QString>("format");
        QTest::addColumn<QByteArray>("start");
        const QByteArray sqlite("SQLite format 3\0", 16);
        const QByteArray trace("{\"displayTimeUnit\"");
        QTest::newRow("*.sqlite") << "x.sqlite" << QString() << sqlite;
        QTest::newRow("*.db") << "x.db" << QString() << sqlite;
        QTest::newRow("--format sqlite") << "x.out"
                                         << "sqlite" << sqlite;
        QTest::newRow("*.trace.json") << "x.trace.json" << QString() << trace;
        QTest::newRow("--format perfetto") << "x.json"
                                           << "perfetto" << trace;
        QTest::newRow("*.json stays a snapshot") << "x.json" << QString() << QByteArray("{\"segments\"");
    }
    void cliFormats()
    {
        QFETCH(QString, output);
        QFETCH(QString, format);
        QFETCH(QByteArray, start);
        QTemporaryDir dir;
        const QString out = dir.filePath(output);
        QStringList args { QStringLiteral("convert"), QString::fromStdString(test::dataPath("oom.pickle")), out };
        if (!format.isEmpty())
            args << QStringLiteral("--format") << format;
        const Run r = runCli(args);
        QVERIFY2(r.status == 0, r.err.constData());
        QVERIFY2(r.err.isEmpty(), r.err.constData());
        QCOMPARE(head(out, int(start.size())), start);
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files), QStringList { output });
    }

    // An output that cannot be written: exit status 1, one line naming it and the reason, nothing left behind.
    void cliBadOutput_data()
    {
        QTest::addColumn<QString>("output");
        QTest::addColumn<QString>("format");
        QTest::newRow("sqlite, no such folder") << "missing/x.sqlite" << QString();
        QTest::newRow("perfetto, no such folder") << "missing/x.trace.json" << QString();
        QTest::newRow("sqlite, a folder") << "folder"
                                          << "sqlite";
        QTest::newRow("perfetto, a folder") << "folder"
                                            << "perfetto";
    }
    void cliBadOutput()
    {
        QFETCH(QString, output);
        QFETCH(QString, format);
        QTemporaryDir dir;
        QVERIFY(QDir(dir.path()).mkdir(QStringLiteral("folder")));
        const QString out = dir.filePath(output);
        QStringList args { QStringLiteral("convert"), QString::fromStdString(test::dataPath("oom.pickle")), out };
        if (!format.isEmpty())
            args << QStringLiteral("--format") << format;
        const Run r = runCli(args);
        QCOMPARE(r.status, 1);
        QVERIFY(r.out.isEmpty());
        QCOMPARE(r.err.count('\n'), 1);
        const QString prefix = QStringLiteral("memscope-cli: ") + out + QStringLiteral(": ");
        QVERIFY2(r.err.startsWith(prefix.toUtf8()), r.err.constData());
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Dirs | QDir::NoDotAndDotDot),
                 QStringList { QStringLiteral("folder") });
        QVERIFY(QDir(dir.filePath(QStringLiteral("folder"))).isEmpty());
    }

    // A database that fails half-way (the file size limit, as a full disk) leaves the old target and no temporary
    // file, and the error names the target and SQLite's reason.
    void sqliteFailureKeepsTarget()
    {
        bool ok = false;
        const auto s = loadOrSkip(QString::fromStdString(test::snapshotPath("transformer_train.pickle")), ok);
        if (!ok)
            QSKIP("fixture missing or unreadable (MEMSCOPE_SHARED_DIR)");
        QTemporaryDir dir;
        const QString target = dir.filePath(QStringLiteral("kept.sqlite"));
        {
            QFile f(target);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("old content");
        }
        struct rlimit saved { };
        QCOMPARE(::getrlimit(RLIMIT_FSIZE, &saved), 0);
        struct rlimit small = saved;
        small.rlim_cur = 64 * 1024;
        const auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
        QCOMPARE(::setrlimit(RLIMIT_FSIZE, &small), 0);
        const io::Error err = io::saveSnapshot(*s, target.toStdString());
        ::setrlimit(RLIMIT_FSIZE, &saved);
        std::signal(SIGXFSZ, oldHandler);

        QCOMPARE(err.code, io::ErrorCode::Io);
        QCOMPARE(err.path, target.toStdString());
        QVERIFY2(err.message.find("SQLite") != std::string::npos, err.toString().c_str());
        QCOMPARE(head(target, 100), QByteArray("old content"));
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files), QStringList { QStringLiteral("kept.sqlite") });
    }
};

QTEST_GUILESS_MAIN(TestExport)
#include "tst_export.moc"
