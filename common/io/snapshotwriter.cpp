// saveSnapshot(): encodes a snapshot (picklewriter.cpp, jsonwriter.cpp) and replaces the target file atomically
// (atomicfile.h): readers of the target see the old file or the new one, never a half-written one; on any failure
// the target is untouched. Reentrant; blocks on disk I/O, so call it off the GUI thread.
#include "io/atomicfile.h"
#include "io/snapshotio.h"

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

Error saveSnapshot(const model::Snapshot& snapshot, const std::string& path, Format format)
{
    if (format == Format::Auto)
        format = endsWith(path, ".json") ? Format::Json : Format::Pickle;
    const std::string bytes = format == Format::Json ? encodeJson(snapshot) : encodePickle(snapshot);
    return replaceFileAtomically(path, [&](int fd, const std::string&) {
        if (!writeAllToFd(fd, bytes.data(), bytes.size()))
            return ioError("cannot write", errno, path);
        return Error {};
    });
}

} // namespace memscope::io
