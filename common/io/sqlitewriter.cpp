// writeSqliteDatabase(): the snapshot as SQLite tables, in the layout of PyTorch's proposed
// torch.cuda.memory._dump_snapshot_sqlite() (pytorch/pytorch PR #178670: tables device_traces, blocks and segments;
// blocks.segment_id joins blocks to segments, an address joins device_traces to blocks) with the stacks normalised
// (frames stored once, stacks as rows of a join table). docs/sqlite.md is the layout, column by column.
//
// One transaction and one prepared statement per table (the trace's rows inserted many per statement), the journal
// off (the file is a temporary one that is discarded on failure, atomicfile.h). The indexes may be left out and
// added later by addSqliteIndexes() (a part of a recording, written while the recording reads on). Reentrant: one
// connection per call, opened without SQLite's mutexes (SQLITE_OPEN_NOMUTEX) because no other thread ever sees it.
#include "io/sqlitewriter.h"

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace memscope::io {

using namespace memscope::model;

namespace {

constexpr const char* Schema = R"sql(
CREATE TABLE metadata (
    key TEXT PRIMARY KEY,
    value
);
CREATE TABLE frames (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    filename TEXT NOT NULL,
    line INTEGER NOT NULL
);
CREATE TABLE stacks (
    id INTEGER PRIMARY KEY,
    depth INTEGER NOT NULL
);
CREATE TABLE stack_frames (
    stack_id INTEGER NOT NULL REFERENCES stacks(id),
    position INTEGER NOT NULL,
    frame_id INTEGER NOT NULL REFERENCES frames(id),
    PRIMARY KEY (stack_id, position)
) WITHOUT ROWID;
CREATE TABLE segments (
    id INTEGER PRIMARY KEY,
    device INTEGER NOT NULL,
    address INTEGER NOT NULL,
    total_size INTEGER NOT NULL,
    allocated_size INTEGER NOT NULL,
    active_size INTEGER NOT NULL,
    requested_size INTEGER NOT NULL,
    stream INTEGER NOT NULL,
    segment_type TEXT NOT NULL,
    segment_pool_id_0 INTEGER NOT NULL,
    segment_pool_id_1 INTEGER NOT NULL,
    is_expandable INTEGER NOT NULL,
    stack_id INTEGER REFERENCES stacks(id)
);
CREATE TABLE blocks (
    id INTEGER PRIMARY KEY,
    segment_id INTEGER NOT NULL REFERENCES segments(id),
    device INTEGER NOT NULL,
    address INTEGER NOT NULL,
    size INTEGER NOT NULL,
    requested_size INTEGER NOT NULL,
    state TEXT NOT NULL,
    stack_id INTEGER REFERENCES stacks(id)
);
CREATE TABLE device_traces (
    id INTEGER PRIMARY KEY,
    device INTEGER NOT NULL,
    trace_index INTEGER NOT NULL,
    action TEXT NOT NULL,
    addr INTEGER,
    device_free INTEGER,
    size INTEGER NOT NULL,
    stream INTEGER NOT NULL,
    time_us INTEGER NOT NULL,
    compile_context TEXT NOT NULL,
    user_metadata TEXT NOT NULL,
    stack_id INTEGER REFERENCES stacks(id)
);
CREATE TABLE annotations (
    id INTEGER PRIMARY KEY,
    device INTEGER NOT NULL,
    stage TEXT NOT NULL,
    name TEXT NOT NULL,
    time_us INTEGER NOT NULL
);
)sql";

// Made after the rows are in: one sort per index instead of a B-tree update per row. IF NOT EXISTS: adding them to
// a file that has them already changes nothing (addSqliteIndexes).
constexpr const char* Indexes = R"sql(
CREATE INDEX IF NOT EXISTS device_traces_by_device_time ON device_traces (device, time_us);
CREATE INDEX IF NOT EXISTS device_traces_by_addr ON device_traces (addr);
CREATE INDEX IF NOT EXISTS blocks_by_segment ON blocks (segment_id);
CREATE INDEX IF NOT EXISTS blocks_by_address ON blocks (address);
CREATE INDEX IF NOT EXISTS stack_frames_by_frame ON stack_frames (frame_id);
)sql";

// Trace rows per INSERT statement: one step (one run of SQLite's program) for many rows. Within SQLite's default
// limit of 32,766 bound parameters (SQLITE_MAX_VARIABLE_NUMBER, sqlite.org/limits.html) at 12 columns a row.
constexpr int TraceRowsPerInsert = 32;
constexpr int TraceColumns = 12;
static_assert(TraceRowsPerInsert * TraceColumns <= 32766);

class Database {
public:
    ~Database()
    {
        if (m_db)
            sqlite3_close_v2(m_db);
    }
    sqlite3* m_db = nullptr;
};

class Statement {
public:
    Statement(sqlite3* db, const char* sql)
    {
        m_rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &m_stmt, nullptr);
    }
    ~Statement() { sqlite3_finalize(m_stmt); }
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    bool ok() const { return m_rc == SQLITE_OK; }
    void integer(int column, int64_t v) { sqlite3_bind_int64(m_stmt, column, v); }
    void null(int column) { sqlite3_bind_null(m_stmt, column); }
    // The text must outlive the step (every string here lives in the snapshot or is a literal).
    void text(int column, std::string_view v)
    {
        sqlite3_bind_text(m_stmt, column, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
    }
    void stack(int column, bool present, StackId id)
    {
        if (present)
            integer(column, raw(id));
        else
            null(column);
    }
    // Runs the insert and resets the statement for the next row.
    bool step()
    {
        const int rc = sqlite3_step(m_stmt);
        sqlite3_reset(m_stmt);
        return rc == SQLITE_DONE;
    }

private:
    sqlite3_stmt* m_stmt = nullptr;
    int m_rc = SQLITE_ERROR;
};

class Writer {
public:
    Writer(const Snapshot& s, sqlite3* db, bool indexes)
        : m_s(s)
        , m_db(db)
        , m_indexes(indexes)
    {
    }

    // Returns "" or what failed.
    std::string write()
    {
        // The file is a temporary one, discarded on any failure and flushed by the caller before the rename, so
        // SQLite's own journal and syncs would only cost time.
        if (!exec("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE;"
                  "PRAGMA temp_store = MEMORY; PRAGMA cache_size = -65536;"))
            return failure("cannot set up the database");
        if (!exec("BEGIN"))
            return failure("cannot begin a transaction");
        if (!exec(Schema))
            return failure("cannot create the tables");
        if (!exec(("PRAGMA user_version = " + std::to_string(SqliteSchemaVersion)).c_str()))
            return failure("cannot set the schema version");
        if (!metadata() || !frames() || !stacks() || !segmentsAndBlocks() || !traces() || !annotations())
            return failure("cannot insert the rows of " + m_table);
        if (m_indexes && !exec(Indexes))
            return failure("cannot create the indexes");
        if (!exec("COMMIT"))
            return failure("cannot commit");
        return {};
    }

private:
    bool exec(const char* sql) { return sqlite3_exec(m_db, sql, nullptr, nullptr, nullptr) == SQLITE_OK; }
    std::string failure(const std::string& what) const { return what + ": " + sqlite3_errmsg(m_db); }

    bool metadata()
    {
        m_table = "metadata";
        Statement st(m_db, "INSERT INTO metadata (key, value) VALUES (?1, ?2)");
        if (!st.ok())
            return false;
        auto row = [&](std::string_view key, auto value) {
            st.text(1, key);
            if constexpr (std::is_integral_v<decltype(value)>)
                st.integer(2, value);
            else
                st.text(2, value);
            return st.step();
        };
        return row("schema_version", int64_t(SqliteSchemaVersion)) && row("writer", std::string_view("memscope"))
            && row("source_format", std::string_view("pytorch memory snapshot"))
            && row("devices", int64_t(m_s.deviceCount()));
    }

    bool frames()
    {
        m_table = "frames";
        Statement st(m_db, "INSERT INTO frames (id, name, filename, line) VALUES (?1, ?2, ?3, ?4)");
        if (!st.ok())
            return false;
        for (size_t i = 0; i < m_s.frames.size(); ++i) {
            const Frame& f = m_s.frames[i];
            st.integer(1, int64_t(i));
            st.text(2, m_s.str(f.name));
            st.text(3, m_s.str(f.filename));
            // SQLite integers are 64-bit signed: a line at or above 2^63 (torch.compile's 2^64 - 1 for "no line",
            // model::LineNumber) is stored as its two's complement, -1, as PyTorch's C++ writer writes the same
            // line (torch/csrc/cuda/memory_snapshot.cpp: int64_t(lineno)).
            st.integer(4, f.line.bits());
            if (!st.step())
                return false;
        }
        return true;
    }

    bool stacks()
    {
        m_table = "stacks";
        Statement stack(m_db, "INSERT INTO stacks (id, depth) VALUES (?1, ?2)");
        Statement frame(m_db, "INSERT INTO stack_frames (stack_id, position, frame_id) VALUES (?1, ?2, ?3)");
        if (!stack.ok() || !frame.ok())
            return false;
        for (size_t k = 0; k < m_s.stackCount(); ++k) {
            const StackId id { static_cast<uint32_t>(k) };
            const uint32_t depth = m_s.stackSize(id);
            stack.integer(1, int64_t(k));
            stack.integer(2, depth);
            if (!stack.step())
                return false;
            const FrameId* frames = m_s.stackBegin(id);
            for (uint32_t p = 0; p < depth; ++p) {
                frame.integer(1, int64_t(k));
                frame.integer(2, p);
                frame.integer(3, raw(frames[p]));
                if (!frame.step())
                    return false;
            }
        }
        return true;
    }

    bool segmentsAndBlocks()
    {
        m_table = "segments";
        Statement seg(m_db,
                      "INSERT INTO segments (id, device, address, total_size, allocated_size, active_size, "
                      "requested_size, stream, segment_type, segment_pool_id_0, segment_pool_id_1, is_expandable, "
                      "stack_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
        Statement block(m_db,
                        "INSERT INTO blocks (id, segment_id, device, address, size, requested_size, state, stack_id) "
                        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
        if (!seg.ok() || !block.ok())
            return false;
        for (size_t i = 0; i < m_s.segments.size(); ++i) {
            const Segment& s = m_s.segments[i];
            seg.integer(1, int64_t(i));
            seg.integer(2, s.device);
            seg.integer(3, s.address);
            seg.integer(4, s.totalSize);
            seg.integer(5, s.allocatedSize);
            seg.integer(6, s.activeSize);
            seg.integer(7, s.requestedSize);
            seg.integer(8, s.stream);
            seg.text(9, m_s.str(s.segmentType));
            seg.integer(10, s.poolId.first);
            seg.integer(11, s.poolId.second);
            seg.integer(12, s.isExpandable ? 1 : 0);
            seg.stack(13, s.hasFrames || s.stack != EmptyStack, s.stack);
            if (!seg.step())
                return false;
            for (uint32_t j = 0; j < s.blockCount; ++j) {
                const uint32_t index = s.blockBegin + j;
                const Block& b = m_s.blocks[index];
                block.integer(1, index);
                block.integer(2, int64_t(i));
                block.integer(3, s.device);
                block.integer(4, b.address);
                block.integer(5, b.size);
                block.integer(6, b.requestedSize);
                block.text(7, b.stateName != EmptyString ? m_s.str(b.stateName) : blockStateName(b.state));
                block.stack(8, b.hasFrames || b.stack != EmptyStack, b.stack);
                if (!block.step())
                    return false;
            }
        }
        return true;
    }

    bool traces()
    {
        m_table = "device_traces";
        auto sql = [](int rows) {
            std::string q = "INSERT INTO device_traces (id, device, trace_index, action, addr, device_free, size, "
                            "stream, time_us, compile_context, user_metadata, stack_id) VALUES ";
            for (int r = 0; r < rows; ++r) {
                q += r == 0 ? "(" : ",(";
                for (int c = 1; c <= TraceColumns; ++c)
                    q += "?" + std::to_string(r * TraceColumns + c) + (c < TraceColumns ? "," : ")");
            }
            return q;
        };
        Statement many(m_db, sql(TraceRowsPerInsert).c_str()), one(m_db, sql(1).c_str());
        if (!many.ok() || !one.ok())
            return false;
        size_t total = 0;
        for (const Trace& trace : m_s.deviceTraces)
            total += trace.size();
        // Rows go TraceRowsPerInsert at a time through `many`, the last total % TraceRowsPerInsert one by one.
        const size_t batched = total - total % TraceRowsPerInsert;
        int64_t id = 0;
        int pending = 0;
        for (size_t d = 0; d < m_s.deviceTraces.size(); ++d) {
            const Trace& trace = m_s.deviceTraces[d];
            for (size_t i = 0; i < trace.size(); ++i) {
                const bool batch = size_t(id) < batched;
                Statement& st = batch ? many : one;
                const int c = batch ? pending * TraceColumns : 0; // the row's first parameter, less one
                const TraceEntry& e = trace[i];
                const EntryForm& form = m_s.form(e);
                st.integer(c + 1, id++);
                st.integer(c + 2, int64_t(d));
                st.integer(c + 3, int64_t(i));
                st.text(c + 4, form.actionName != EmptyString ? m_s.str(form.actionName) : actionName(e.action));
                // PyTorch's oom entries carry device_free where the others carry addr (torch/csrc/cuda/Module.cpp).
                if (e.action == Action::Oom) {
                    st.null(c + 5);
                    st.integer(c + 6, e.addr);
                } else {
                    st.integer(c + 5, e.addr);
                    st.null(c + 6);
                }
                st.integer(c + 7, e.size);
                st.integer(c + 8, form.stream);
                st.integer(c + 9, e.timeUs);
                st.text(c + 10, m_s.str(form.compileContext));
                st.text(c + 11, m_s.str(form.userMetadata));
                st.stack(c + 12, e.hasFrames || e.stack != EmptyStack, e.stack);
                if (batch && ++pending < TraceRowsPerInsert)
                    continue;
                pending = 0;
                if (!st.step())
                    return false;
            }
        }
        return true;
    }

    bool annotations()
    {
        m_table = "annotations";
        Statement st(m_db, "INSERT INTO annotations (id, device, stage, name, time_us) VALUES (?1, ?2, ?3, ?4, ?5)");
        if (!st.ok())
            return false;
        for (size_t i = 0; i < m_s.annotations.size(); ++i) {
            const Annotation& a = m_s.annotations[i];
            st.integer(1, int64_t(i));
            st.integer(2, a.device);
            st.text(3,
                    a.stageName != EmptyString                ? m_s.str(a.stageName)
                        : a.stage == Annotation::Stage::Start ? std::string_view("START")
                        : a.stage == Annotation::Stage::End   ? std::string_view("END")
                                                              : std::string_view());
            st.text(4, m_s.str(a.name));
            st.integer(5, a.timeUs);
            if (!st.step())
                return false;
        }
        return true;
    }

    const Snapshot& m_s;
    sqlite3* m_db;
    bool m_indexes;
    std::string m_table;
};

} // namespace

Error writeSqliteDatabase(const Snapshot& snapshot, const std::string& path, bool indexes)
{
    auto error = [&](std::string message) {
        Error e;
        e.code = ErrorCode::Io;
        e.message = "cannot write the SQLite database: " + std::move(message);
        e.path = path;
        return e;
    };
    Database db;
    if (sqlite3_open_v2(path.c_str(), &db.m_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK)
        return error(std::string("cannot open: ") + (db.m_db ? sqlite3_errmsg(db.m_db) : "out of memory"));
    Writer writer(snapshot, db.m_db, indexes);
    if (std::string why = writer.write(); !why.empty())
        return error(why);
    const int closed = sqlite3_close_v2(db.m_db);
    db.m_db = nullptr;
    if (closed != SQLITE_OK)
        return error(std::string("cannot close: ") + sqlite3_errstr(closed));
    return {};
}

Error addSqliteIndexes(const std::string& path)
{
    auto error = [&](std::string message) {
        Error e;
        e.code = ErrorCode::Io;
        e.message = "cannot index the SQLite database: " + std::move(message);
        e.path = path;
        return e;
    };
    Database db;
    if (sqlite3_open_v2(path.c_str(), &db.m_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK)
        return error(std::string("cannot open: ") + (db.m_db ? sqlite3_errmsg(db.m_db) : "out of memory"));
    // SQLite's own rollback journal this time (the file is in place, readable): the indexes come whole or not at all.
    const std::string sql
        = std::string("PRAGMA cache_size = -65536; PRAGMA temp_store = MEMORY; BEGIN;") + Indexes + "COMMIT;";
    if (sqlite3_exec(db.m_db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
        return error(sqlite3_errmsg(db.m_db));
    const int closed = sqlite3_close_v2(db.m_db);
    db.m_db = nullptr;
    if (closed != SQLITE_OK)
        return error(std::string("cannot close: ") + sqlite3_errstr(closed));
    return {};
}

} // namespace memscope::io
