// CURVE key files (keyfile.h): POSIX file calls and RFC 32's Z85 alphabet.
#include "wire/keyfile.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::wire {

namespace {

    // ZeroMQ RFC 32 (Z85): the 85 characters, in the order of their values.
    constexpr std::string_view Z85Alphabet
        = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    static_assert(Z85Alphabet.size() == 85);

    // The value of each character, 0xff for one outside the alphabet.
    constexpr std::array<uint8_t, 256> z85Values()
    {
        std::array<uint8_t, 256> values {};
        values.fill(0xff);
        for (size_t i = 0; i < Z85Alphabet.size(); ++i)
            values[uint8_t(Z85Alphabet[i])] = uint8_t(i);
        return values;
    }
    constexpr std::array<uint8_t, 256> Z85Values = z85Values();

    // A single key file is read up to this much: the key is on its first lines, and a large file is not one.
    constexpr size_t MaxKeyFileBytes = 65536;

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

    // The text of the key file at `path` (at most about `limit` bytes), checked as a `kind` key file; "" or the error.
    std::string readText(const std::string& path, KeyKind kind, size_t limit, std::string* text)
    {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return systemError(path, "cannot open the key file", errno);
        struct stat st { };
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            ::close(fd);
            return path + ": not a key file (not a regular file)";
        }
        // The same rule as ssh for private keys: a secret that others can read is no secret.
        if (kind == KeyKind::Secret && (st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
            ::close(fd);
            char mode[8];
            std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
            return path + ": the secret key file is readable by group or others (mode " + mode
                + "); refusing it (chmod 600 it)";
        }
        char chunk[4096];
        for (;;) {
            const ssize_t n = ::read(fd, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                const int error = errno;
                ::close(fd);
                return systemError(path, "cannot read the key file", error);
            }
            if (n == 0 || text->size() > limit)
                break;
            text->append(chunk, size_t(n));
        }
        ::close(fd);
        return {};
    }

    // Calls `line(number, text)` for each line that is neither blank nor a '#' comment, trimmed, until it returns
    // false.
    template <typename Line> void forEachKeyLine(std::string_view text, Line&& line)
    {
        int number = 0;
        while (!text.empty()) {
            const size_t newline = text.find('\n');
            const std::string_view current = trimmed(text.substr(0, newline));
            text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
            ++number;
            if (current.empty() || current.front() == '#')
                continue;
            if (!line(number, current))
                return;
        }
    }

} // namespace

bool isZ85Key(std::string_view key)
{
    if (key.size() != Z85KeyLength)
        return false;
    for (size_t group = 0; group < key.size(); group += 5) {
        uint64_t value = 0;
        for (size_t i = group; i < group + 5; ++i) {
            const uint8_t digit = Z85Values[uint8_t(key[i])];
            if (digit == 0xff)
                return false;
            value = value * 85 + digit;
        }
        if (value > 0xffffffffu) // five characters hold up to 85^5 - 1, more than four bytes do
            return false;
    }
    return true;
}

KeyResult readKeyFile(const std::string& path, KeyKind kind)
{
    KeyResult r;
    std::string text;
    if (r.error = readText(path, kind, MaxKeyFileBytes, &text); !r.error.empty())
        return r;
    bool found = false;
    forEachKeyLine(text, [&](int, std::string_view line) {
        found = true;
        if (isZ85Key(line))
            r.key = std::string(line);
        else
            r.error = path
                + ": not a CURVE key (expected 40 Z85 characters on the first line that is not empty or a comment, "
                  "got "
                + std::to_string(line.size()) + " characters"
                + (line.size() == Z85KeyLength ? " that are not Z85)" : ")");
        return false;
    });
    if (!found)
        r.error = path
            + ": no key in the file (expected 40 Z85 characters on the first line that is not empty or a comment)";
    return r;
}

KeyListResult readClientKeys(const std::string& path)
{
    KeyListResult r;
    std::string text;
    if (r.error = readText(path, KeyKind::Public, SIZE_MAX, &text); !r.error.empty())
        return r;
    forEachKeyLine(text, [&](int number, std::string_view line) {
        if (!isZ85Key(line)) {
            r.error = path + ": line " + std::to_string(number)
                + " is not a Z85-encoded 32-byte client public key (40 characters; one per line, '#' comments)";
            r.keys.clear();
            return false;
        }
        r.keys.emplace_back(line);
        return true;
    });
    if (r.error.empty() && r.keys.empty())
        r.error = path + ": lists no client public keys (one Z85 key of 40 characters per line)";
    return r;
}

} // namespace memscope::wire
