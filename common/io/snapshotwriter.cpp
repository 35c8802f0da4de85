// saveSnapshot(): encodes a snapshot (picklewriter.cpp, jsonwriter.cpp) and replaces the target file atomically:
// the bytes go to a temporary file in the same folder (so the rename cannot cross file systems), are flushed to
// disk, and only then renamed over the target. Readers of the target see the old file or the new one, never a
// half-written one; on any failure the temporary file is removed and the target is untouched. Reentrant; blocks on
// disk I/O, so call it off the GUI thread.
#include "io/snapshotio.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::io {

namespace {

Error ioError(const std::string& what, int err, const std::string& path)
{
    Error e;
    e.code = ErrorCode::Io;
    e.message = what + ": " + std::strerror(err);
    e.path = path;
    return e;
}

bool endsWith(std::string_view s, std::string_view suffix)
{
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The process umask, read without changing it (umask(2) can only be read by setting it, which races with other
// threads creating files): Linux reports it in /proc/self/status since 4.7. Falls back to the usual 022.
mode_t currentUmask()
{
    mode_t mask = 022;
    if (FILE* f = std::fopen("/proc/self/status", "re")) {
        char line[256];
        while (std::fgets(line, sizeof line, f)) {
            unsigned value = 0;
            if (std::sscanf(line, "Umask: %o", &value) == 1) {
                mask = static_cast<mode_t>(value & 0777);
                break;
            }
        }
        std::fclose(f);
    }
    return mask;
}

bool writeAll(int fd, const char* data, size_t size)
{
    while (size > 0) {
        const ssize_t n = ::write(fd, data, size);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        if (n == 0) {
            errno = EIO;
            return false;
        }
        data += n;
        size -= static_cast<size_t>(n);
    }
    return true;
}

} // namespace

Error saveSnapshot(const model::Snapshot& snapshot, const std::string& path, Format format)
{
    if (format == Format::Auto)
        format = endsWith(path, ".json") ? Format::Json : Format::Pickle;
    const std::string bytes = format == Format::Json ? encodeJson(snapshot) : encodePickle(snapshot);

    std::string temp = path + ".tmp-XXXXXX";
    int fd = mkostemp(temp.data(), O_CLOEXEC);
    if (fd < 0)
        return ioError("cannot create a temporary file beside it", errno, path);

    auto fail = [&](const char* what) {
        const int err = errno;
        if (fd >= 0)
            ::close(fd);
        ::unlink(temp.c_str());
        return ioError(what, err, path);
    };

    // mkstemp makes the file 0600; give it the mode the target has, or what a new file would get (0666 & ~umask).
    struct stat st {};
    const mode_t mode = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? (st.st_mode & 07777)
                                                                              : (0666 & ~currentUmask());
    if (::fchmod(fd, mode) != 0)
        return fail("cannot set the permissions of the temporary file");
    if (!writeAll(fd, bytes.data(), bytes.size()))
        return fail("cannot write");
    if (::fsync(fd) != 0)
        return fail("cannot flush to disk");
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0)
        return fail("cannot write");
    if (::rename(temp.c_str(), path.c_str()) != 0)
        return fail("cannot replace the file");

    // Flush the folder too, so the rename survives a crash (best effort: some file systems refuse).
    const size_t slash = path.rfind('/');
    const std::string folder = slash == std::string::npos ? std::string(".") : path.substr(0, slash == 0 ? 1 : slash);
    const int dirFd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirFd >= 0) {
        ::fsync(dirFd);
        ::close(dirFd);
    }
    return {};
}

} // namespace memscope::io
