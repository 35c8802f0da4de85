// CURVE key files (curvekeys.h): POSIX file calls and libzmq's Z85 and CURVE helpers.
#include "client/curvekeys.h"

#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::client {

namespace {

    std::string systemError(const std::string& path, const char* what, int error)
    {
        return path + ": " + what + ": " + std::strerror(error);
    }

    std::string_view trimmed(std::string_view line)
    {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
            line.remove_suffix(1);
        while (!line.empty() && (line.front() == ' ' || line.front() == '\t'))
            line.remove_prefix(1);
        return line;
    }

    // Writes `text` to a new temporary file beside `path` with `mode`, then gives it the name `path`: link(2) fails
    // when `path` exists (no overwrite), rename(2) replaces it (force). "" or the error.
    std::string writeAtomically(const std::string& path, const std::string& text, mode_t mode, bool force)
    {
        std::string temporary = path + ".XXXXXX";
        std::vector<char> buffer(temporary.begin(), temporary.end());
        buffer.push_back('\0');
        const int fd = ::mkstemp(buffer.data()); // mode 0600, O_EXCL
        if (fd < 0)
            return systemError(path, "cannot create", errno);
        temporary.assign(buffer.data());
        auto fail = [&](const char* what, int error) {
            ::close(fd);
            ::unlink(temporary.c_str());
            return systemError(path, what, error);
        };
        size_t written = 0;
        while (written < text.size()) {
            const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return fail("cannot write", errno);
            written += size_t(n);
        }
        if (::fchmod(fd, mode) != 0)
            return fail("cannot set the mode of", errno);
        if (::fsync(fd) != 0)
            return fail("cannot write", errno);
        if (::close(fd) != 0) {
            const int error = errno;
            ::unlink(temporary.c_str());
            return systemError(path, "cannot write", error);
        }
        if (force) {
            if (::rename(temporary.c_str(), path.c_str()) != 0) {
                const int error = errno;
                ::unlink(temporary.c_str());
                return systemError(path, "cannot create", error);
            }
            return {};
        }
        const int linked = ::link(temporary.c_str(), path.c_str());
        const int error = errno;
        ::unlink(temporary.c_str());
        if (linked != 0)
            return error == EEXIST ? path + ": exists already (use --force to replace it)"
                                   : systemError(path, "cannot create", error);
        return {};
    }

} // namespace

bool curveAvailable() { return zmq_has("curve") != 0; }

bool isZ85Key(std::string_view key)
{
    if (key.size() != Z85KeyLength)
        return false;
    const std::string text(key);
    uint8_t bytes[32];
    return zmq_z85_decode(bytes, text.c_str()) != nullptr;
}

KeyResult readKeyFile(const std::string& path, KeyKind kind)
{
    KeyResult r;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        r.error = systemError(path, "cannot open the key file", errno);
        return r;
    }
    struct stat st { };
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        r.error = path + ": not a key file (not a regular file)";
        return r;
    }
    // The same rule as ssh for private keys: a secret that others can read is no secret (and the agent refuses
    // its own the same way).
    if (kind == KeyKind::Secret && (st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
        ::close(fd);
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
        r.error = path + ": the secret key file is readable by group or others (mode " + mode
            + "); refusing it (chmod 600 it)";
        return r;
    }
    std::string text;
    char chunk[4096];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            const int error = errno;
            ::close(fd);
            r.error = systemError(path, "cannot read the key file", error);
            return r;
        }
        if (n == 0 || text.size() > 65536)
            break;
        text.append(chunk, size_t(n));
    }
    ::close(fd);
    std::string_view rest(text);
    while (!rest.empty()) {
        const size_t newline = rest.find('\n');
        const std::string_view line = trimmed(rest.substr(0, newline));
        rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
        if (line.empty() || line.front() == '#')
            continue;
        if (!isZ85Key(line)) {
            r.error = path
                + ": not a CURVE key (expected 40 Z85 characters on the first line that is not empty or "
                  "a comment, got "
                + std::to_string(line.size()) + " characters"
                + (line.size() == Z85KeyLength ? " that are not Z85)" : ")");
            return r;
        }
        r.key = std::string(line);
        return r;
    }
    r.error = path
        + ": no key in the file (expected 40 Z85 characters on the first line that is not empty or a "
          "comment)";
    return r;
}

std::string publicKeyOf(std::string_view secret)
{
    if (!isZ85Key(secret))
        return {};
    const std::string in(secret);
    char out[Z85KeyLength + 1] = {};
    if (zmq_curve_public(out, in.c_str()) != 0)
        return {};
    return std::string(out, Z85KeyLength);
}

KeyPair generateKeyPair()
{
    KeyPair k;
    char publicKey[Z85KeyLength + 1] = {}, secretKey[Z85KeyLength + 1] = {};
    if (zmq_curve_keypair(publicKey, secretKey) != 0) {
        k.error = std::string("cannot generate a CURVE key pair: ") + zmq_strerror(zmq_errno());
        return k;
    }
    k.publicKey.assign(publicKey, Z85KeyLength);
    k.secretKey.assign(secretKey, Z85KeyLength);
    return k;
}

std::string writeKeyPair(const std::string& name, const KeyPair& keys, bool force)
{
    const std::string secretPath = name + ".key", publicPath = name + ".pub";
    if (!force) {
        for (const std::string& path : { secretPath, publicPath }) {
            struct stat st { };
            if (::lstat(path.c_str(), &st) == 0)
                return path + ": exists already (use --force to replace it)";
        }
    }
    const std::string secretText = "# memscope CURVE secret key (keep it private: mode 0600)\n" + keys.secretKey + "\n";
    const std::string publicText = "# memscope CURVE public key\n" + keys.publicKey + "\n";
    if (std::string error = writeAtomically(secretPath, secretText, 0600, force); !error.empty())
        return error;
    if (std::string error = writeAtomically(publicPath, publicText, 0644, force); !error.empty()) {
        if (!force)
            ::unlink(secretPath.c_str()); // ours, made a moment ago: leave no half pair behind
        return error;
    }
    return {};
}

} // namespace memscope::client
