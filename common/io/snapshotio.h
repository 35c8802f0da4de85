// Loading and saving snapshot files: the entry points every front end (CLI, app, tests) uses.
//
// Readers never throw for bad input: they return an Error naming the file, the reason and the byte offset.
// All functions are reentrant and may be called from any thread; they share nothing.
#pragma once

#include "io/error.h"
#include "model/snapshot.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace memscope::io {

// Readers take Auto, Pickle or Json; Sqlite and Perfetto are exports (written, never read back).
enum class Format : uint8_t { Auto, Pickle, Json, Sqlite, Perfetto };

struct LoadOptions {
    Format format = Format::Auto;
    // Called now and then with (bytes done, bytes total); return false to cancel. May be empty.
    std::function<bool(uint64_t, uint64_t)> progress;
    // Build a pickle's trace entries straight from the pickle machine (io/snapshotbuilder.h). Off: through the
    // value tree, the reference the tests compare the direct path with. The same snapshot either way.
    bool directTraces = true;
    // A large file is read ahead of the parse into huge pages by a thread of its own (io/filebytes.h). Off: the
    // parse reads the file's mapping only.
    bool readAhead = true;
};

struct LoadResult {
    std::shared_ptr<const model::Snapshot> snapshot;
    Error error;
    bool ok() const { return snapshot != nullptr; }
};

// Reads a snapshot file: a pickle (protocols 0-5) or JSON, optionally xz-compressed (`.xz`). What is wrong with a
// file that can still be read (a field no 64-bit integer holds, blocks that do not tile their segment, ...) is in the
// snapshot's `warnings` (model/loadwarning.h: the builder's, then model::checkConsistency's); model::warningLine()
// words one for a user, naming the file.
LoadResult loadSnapshot(const std::string& path, const LoadOptions& options = {});
// Same, from memory; `name` is what error messages call the input.
LoadResult loadSnapshotFromMemory(std::span<const uint8_t> data, const std::string& name,
                                  const LoadOptions& options = {});

// Reads a whole file into memory, decompressing it when it is xz (used for snapshots and for reference texts).
Error readFile(const std::string& path, std::vector<uint8_t>& bytes);

// Writes a snapshot as a protocol-4 pickle (what PyTorch's tools read; its web viewer rejects protocol 5), as
// JSON, as an SQLite database (docs/sqlite.md) or as a Chrome/Perfetto trace-event JSON of its timeline
// (docs/perfetto.md). The file is written beside the target and renamed into place, so a failure never leaves a
// corrupt file. Format::Auto takes formatForPath(path).
Error saveSnapshot(const model::Snapshot& snapshot, const std::string& path, Format format = Format::Auto);
struct SaveOptions {
    Format format = Format::Auto;
    // SQLite only: false leaves the indexes out, for addSqliteIndexes() (io/sqlitewriter.h) to add later; the rows
    // are the same. A recording's parts are written so while the recording reads on.
    bool sqliteIndexes = true;
};
Error saveSnapshot(const model::Snapshot& snapshot, const std::string& path, const SaveOptions& options);

// The format a file name asks for: Perfetto for `.trace.json` and `.perfetto.json`, JSON for other `.json`, SQLite
// for `.sqlite`, `.sqlite3` and `.db`, pickle otherwise.
Format formatForPath(const std::string& path);

std::string encodePickle(const model::Snapshot& snapshot);
std::string encodeJson(const model::Snapshot& snapshot);
// The timeline as Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing): per device, counters of allocated
// and reserved bytes after every trace entry, each allocation as an async slice from its alloc to its
// free_completed, OOMs as instants and record_function ranges as slices (docs/perfetto.md). Replays every device
// (model/replay.h), so it costs O(entries) time and memory.
std::string encodePerfetto(const model::Snapshot& snapshot);

} // namespace memscope::io
