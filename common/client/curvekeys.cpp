// CURVE keys (curvekeys.h): libzmq's CURVE helpers, and key files written atomically with POSIX file calls.
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

std::string publicKeyOf(std::string_view secret)
{
    if (!wire::isZ85Key(secret))
        return {};
    const std::string in(secret);
    char out[wire::Z85KeyLength + 1] = {};
    if (zmq_curve_public(out, in.c_str()) != 0)
        return {};
    return std::string(out, wire::Z85KeyLength);
}

KeyPair generateKeyPair()
{
    KeyPair k;
    char publicKey[wire::Z85KeyLength + 1] = {}, secretKey[wire::Z85KeyLength + 1] = {};
    if (zmq_curve_keypair(publicKey, secretKey) != 0) {
        k.error = std::string("cannot generate a CURVE key pair: ") + zmq_strerror(zmq_errno());
        return k;
    }
    k.publicKey.assign(publicKey, wire::Z85KeyLength);
    k.secretKey.assign(secretKey, wire::Z85KeyLength);
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
