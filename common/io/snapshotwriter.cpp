// saveSnapshot(): picks the format (by suffix for Format::Auto), encodes a snapshot (picklewriter.cpp,
// jsonwriter.cpp, perfettowriter.cpp) or writes it as a database (sqlitewriter.cpp), and replaces the target file
// atomically (atomicfile.h): readers of the target see the old file or the new one, never a half-written one; on
// any failure the target is untouched. Reentrant; blocks on disk I/O, so call it off the GUI thread.
#include "io/atomicfile.h"
#include "io/snapshotio.h"
#include "io/sqlitewriter.h"

#include <cerrno>
#include <string>
#include <string_view>

namespace memscope::io {

namespace {

bool endsWith(std::string_view s, std::string_view suffix)
{
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

} // namespace

Format formatForPath(const std::string& path)
{
    // Checked before ".json": a Chrome trace is JSON too, but not a snapshot.
    if (endsWith(path, ".trace.json") || endsWith(path, ".perfetto.json"))
        return Format::Perfetto;
    if (endsWith(path, ".json"))
        return Format::Json;
    if (endsWith(path, ".sqlite") || endsWith(path, ".sqlite3") || endsWith(path, ".db"))
        return Format::Sqlite;
    return Format::Pickle;
}

Error saveSnapshot(const model::Snapshot& snapshot, const std::string& path, Format format)
{
    SaveOptions options;
    options.format = format;
    return saveSnapshot(snapshot, path, options);
}

Error saveSnapshot(const model::Snapshot& snapshot, const std::string& path, const SaveOptions& options)
{
    const Format format = options.format == Format::Auto ? formatForPath(path) : options.format;
    if (format == Format::Sqlite) {
        return replaceFileAtomically(path, [&](int, const std::string& tempPath) {
            return writeSqliteDatabase(snapshot, tempPath, options.sqliteIndexes);
        });
    }
    const std::string bytes = format == Format::Json ? encodeJson(snapshot)
        : format == Format::Perfetto                 ? encodePerfetto(snapshot)
                                                     : encodePickle(snapshot);
    return replaceFileAtomically(path, [&](int fd, const std::string&) {
        if (!writeAllToFd(fd, bytes.data(), bytes.size()))
            return ioError("cannot write", errno, path);
        return Error {};
    });
}

} // namespace memscope::io
