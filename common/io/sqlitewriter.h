// writeSqliteDatabase(): a snapshot as an SQLite database (the layout is docs/sqlite.md). Internal to common/io:
// saveSnapshot() calls it on a temporary file and renames that into place. Reentrant; blocks on disk I/O.
#pragma once

#include "io/error.h"
#include "model/snapshot.h"

#include <string>

namespace memscope::io {

// The version of the table layout, stored in the database's `metadata` table (key `schema_version`) and as its
// `PRAGMA user_version`. Bump it when a table or column changes meaning.
constexpr int SqliteSchemaVersion = 1;

// Writes `snapshot` into the existing, empty file `path` (an empty file is an empty SQLite database). Returns an
// Error whose message names what failed and SQLite's reason; the caller discards the file then.
Error writeSqliteDatabase(const model::Snapshot& snapshot, const std::string& path);

} // namespace memscope::io
