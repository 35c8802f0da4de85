// The publisher's environment variables (publishenv.h).
#include "publishenv.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace memscope::agent {
namespace {

    // `text` as a whole number in [least, most], else 0.
    unsigned long long numberIn(const char* text, unsigned long long least, unsigned long long most)
    {
        char* end = nullptr;
        errno = 0;
        const unsigned long long n = std::strtoull(text, &end, 10);
        return errno == 0 && end != text && *end == '\0' && *text != '-' && n >= least && n <= most ? n : 0;
    }

} // namespace

size_t ringRecordsFromEnvironment(size_t fallback, size_t most)
{
    const char* text = std::getenv("MEMSCOPE_RING_RECORDS");
    if (!text)
        return fallback;
    if (const unsigned long long n = numberIn(text, 2, most))
        return size_t(n);
    std::fprintf(stderr, "memscope: MEMSCOPE_RING_RECORDS=%s is not a number of records from 2 to %zu; using %zu\n",
                 text, most, fallback);
    return fallback;
}

size_t viewerBufferFromEnvironment(size_t fallback)
{
    const char* text = std::getenv("MEMSCOPE_VIEWER_BUFFER_MB");
    if (!text)
        return fallback;
    if (const unsigned long long mib = numberIn(text, 1, 65536))
        return size_t(mib) << 20;
    std::fprintf(stderr, "memscope: MEMSCOPE_VIEWER_BUFFER_MB=%s is not a number of MiB from 1 to 65536; using %zu\n",
                 text, fallback >> 20);
    return fallback;
}

bool compressionFromEnvironment(const std::string& endpoint)
{
    const bool tcp = endpoint.rfind("tcp://", 0) == 0;
    const char* text = std::getenv("MEMSCOPE_COMPRESS");
    if (!text || !*text)
        return tcp;
    if (std::strcmp(text, "lz4") == 0)
        return true;
    if (std::strcmp(text, "none") == 0 || std::strcmp(text, "0") == 0)
        return false;
    std::fprintf(stderr, "memscope: MEMSCOPE_COMPRESS=%s is neither lz4 nor none; %s\n", text,
                 tcp ? "compressing (tcp endpoint)" : "not compressing");
    return tcp;
}

bool insecureTcpFromEnvironment()
{
    const char* value = std::getenv("MEMSCOPE_INSECURE_TCP");
    if (!value || !*value || std::strcmp(value, "0") == 0)
        return false;
    if (std::strcmp(value, "1") == 0)
        return true;
    std::fprintf(stderr, "memscope: MEMSCOPE_INSECURE_TCP=%s is neither 1 nor 0; taken as unset\n", value);
    return false;
}

std::string fileFromEnvironment(const std::string& given, const char* name)
{
    if (!given.empty())
        return given;
    const char* value = std::getenv(name);
    return value ? value : "";
}

} // namespace memscope::agent
