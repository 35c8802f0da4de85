// Writing a file so that a failure never leaves a corrupt one: the content goes to a temporary file in the target's
// folder (so the rename cannot cross file systems), is flushed to disk, and only then renamed over the target.
// Readers of the target see the old file or the new one, never a half-written one; on any failure the temporary
// file is removed and the target is untouched. Used by every writer of common/io. Reentrant; blocks on disk I/O.
#pragma once

#include "io/error.h"

#include <functional>
#include <string>

namespace memscope::io {

// Fills the temporary file: `fd` is open for writing (mode 0666 & ~umask, or the target's mode when it exists),
// `tempPath` is its name, for writers that reopen it by name (SQLite). Returns an Error (message only: its path
// is set to the target's) or an empty one. The fd stays open and owned by the caller; the filler must not close
// it.
using FileFiller = std::function<Error(int fd, const std::string& tempPath)>;

// Creates a temporary file beside `path`, lets `fill` write it, flushes it and renames it to `path`. The error names
// `path` and the reason ("cannot create a temporary file beside it: Permission denied", or the filler's message).
Error replaceFileAtomically(const std::string& path, const FileFiller& fill);

// write(2) until all `size` bytes are written (EINTR retried); false with errno set otherwise.
bool writeAllToFd(int fd, const char* data, size_t size);

// The error for a failed system call: "WHAT: strerror(err)", naming `path`.
Error ioError(const std::string& what, int err, const std::string& path);

} // namespace memscope::io
