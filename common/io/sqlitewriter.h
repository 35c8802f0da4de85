// writeSqliteDatabase(): a snapshot as an SQLite database (the layout is docs/sqlite.md). saveSnapshot() calls it
// on a temporary file and renames that into place; addSqliteIndexes() completes a database written without its
// indexes. Reentrant; blocks on disk I/O.
#pragma once

#include "io/error.h"
#include "model/snapshot.h"

#include <string>

namespace memscope::io {

// The version of the table layout, stored in the database's `metadata` table (key `schema_version`) and as its
// `PRAGMA user_version`. Bump it when a table or column changes meaning.
constexpr int SqliteSchemaVersion = 1;

// Writes `snapshot` into the existing, empty file `path` (an empty file is an empty SQLite database). Returns an
// Error whose message names what failed and SQLite's reason; the caller discards the file then. `indexes` false:
// every table and row, none of the indexes docs/sqlite.md lists (building them costs about as much as the rows of
// the trace); the database answers every query, the indexed ones by a scan, until addSqliteIndexes().
Error writeSqliteDatabase(const model::Snapshot& snapshot, const std::string& path, bool indexes = true);

// Adds the indexes docs/sqlite.md lists to the database at `path` (one that writeSqliteDatabase wrote with or
// without them), in place and in one transaction of SQLite's: after a failure or a crash the file is as it was.
Error addSqliteIndexes(const std::string& path);

} // namespace memscope::io
