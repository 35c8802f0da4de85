// replaceFileAtomically(): the temporary-file-and-rename discipline every writer of common/io uses (atomicfile.h
// says what it promises). Reentrant: one call per target at a time; any thread.
#include "io/atomicfile.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::io {

namespace {

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

} // namespace

Error ioError(const std::string& what, int err, const std::string& path)
{
    Error e;
    e.code = ErrorCode::Io;
    e.message = what + ": " + std::strerror(err);
    e.path = path;
    return e;
}

bool writeAllToFd(int fd, const char* data, size_t size)
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

Error replaceFileAtomically(const std::string& path, const FileFiller& fill)
{
    std::string temp = path + ".tmp-XXXXXX";
    int fd = mkostemp(temp.data(), O_CLOEXEC);
    if (fd < 0)
        return ioError("cannot create a temporary file beside it", errno, path);

    auto discard = [&] {
        if (fd >= 0)
            ::close(fd);
        ::unlink(temp.c_str());
        // A filler that opened the file as a database may have left its rollback journal beside it.
        ::unlink((temp + "-journal").c_str());
    };
    auto fail = [&](const char* what) {
        const int err = errno;
        discard();
        return ioError(what, err, path);
    };

    // mkstemp makes the file 0600; give it the mode the target has, or what a new file would get (0666 & ~umask).
    struct stat st { };
    const mode_t mode
        = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? (st.st_mode & 07777) : (0666 & ~currentUmask());
    if (::fchmod(fd, mode) != 0)
        return fail("cannot set the permissions of the temporary file");
    if (Error e = fill(fd, temp)) {
        discard();
        e.path = path;
        return e;
    }
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
