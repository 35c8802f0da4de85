#include "model/processmemory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <system_error>

#ifdef __GLIBC__
#include <malloc.h>
#include <sys/prctl.h>
#endif
#include <unistd.h>

namespace memscope::model {

namespace {

    constexpr const char* TunablesVariable = "GLIBC_TUNABLES";
    constexpr const char* HugePagesTunable = "glibc.malloc.hugetlb";
    // Set in the environment of the copy: "1" where the user had GLIBC_TUNABLES (its value in the second marker), "0"
    // where not.
    constexpr const char* CopyMarker = "MEMSCOPE_TUNED_COPY";
    constexpr const char* UserTunables = "MEMSCOPE_USER_GLIBC_TUNABLES";

    std::string fileText(const std::string& path)
    {
        std::ifstream file(path);
        return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    }

} // namespace

bool balloonReportsFreePages(const std::string& features)
{
    constexpr size_t ReportingBit = 5; // VIRTIO_BALLOON_F_REPORTING
    return features.size() > ReportingBit && features[ReportingBit] == '1';
}

bool freePagesReportedToHost()
{
    // Without exceptions: a directory that cannot be read counts as no balloon.
    std::error_code error;
    std::filesystem::directory_iterator it("/sys/bus/virtio/drivers/virtio_balloon", error);
    for (; !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
        const std::filesystem::path& device = it->path();
        if (device.filename().string().rfind("virtio", 0) == 0
            && balloonReportsFreePages(fileText((device / "features").string())))
            return true;
    }
    return false;
}

bool hugePagesPay()
{
    static const bool pay = [] {
        if (!hugePagesOnRequest(fileText("/sys/kernel/mm/transparent_hugepage/enabled")))
            return false;
        const char* forced = std::getenv("MEMSCOPE_HUGE_PAGES");
        if (forced && *forced)
            return std::strcmp(forced, "0") != 0;
        return !freePagesReportedToHost();
    }();
    return pay;
}

uint64_t availableMemory()
{
    uint64_t kib = 0;
    if (FILE* f = std::fopen("/proc/meminfo", "re")) {
        char line[128];
        while (std::fgets(line, sizeof line, f)) {
            unsigned long long value = 0;
            if (std::sscanf(line, "MemAvailable: %llu kB", &value) == 1) {
                kib = value;
                break;
            }
        }
        std::fclose(f);
    }
    return kib * 1024;
}

bool sanitizerAllocator()
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return true; // the sanitizer's allocator replaces glibc's: the tunable would do nothing
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
    return true;
#else
    return false;
#endif
#else
    return false;
#endif
}

std::optional<std::string> tunablesWithHugePages(const char* current)
{
    const std::string_view given = current ? current : "";
    // GLIBC_TUNABLES is name=value pairs separated by ':' (glibc manual, "Tunables").
    size_t at = 0;
    while (at <= given.size()) {
        const size_t end = std::min(given.find(':', at), given.size());
        const std::string_view pair = given.substr(at, end - at);
        if (pair.substr(0, pair.find('=')) == HugePagesTunable)
            return std::nullopt;
        at = end + 1;
    }
    std::string out(given);
    if (!out.empty())
        out += ':';
    out += HugePagesTunable;
    out += "=1";
    return out;
}

bool hugePagesOnRequest(const std::string& enabledFile)
{
    // The kernel marks the selected mode with brackets (Documentation/admin-guide/mm/transhuge.rst).
    return enabledFile.find("[madvise]") != std::string::npos;
}

bool restoreUserTunables()
{
    const char* marker = std::getenv(CopyMarker);
    if (!marker)
        return false;
    const char* user = std::getenv(UserTunables);
    if (std::strcmp(marker, "1") == 0 && user)
        setenv(TunablesVariable, user, 1);
    else
        unsetenv(TunablesVariable);
    unsetenv(UserTunables);
    unsetenv(CopyMarker);
    return true;
}

void tuneProcessMemory(char** argv)
{
#ifdef __GLIBC__
    if (restoreUserTunables()) {
        // The kernel names a process after the file it executed (exec(3): the last part of the path), here "exe";
        // ps, top and pgrep would show that. Name it after the program as it was started instead.
        if (argv && argv[0]) {
            const char* slash = std::strrchr(argv[0], '/');
            prctl(PR_SET_NAME, slash ? slash + 1 : argv[0]);
        }
    } else if (!sanitizerAllocator() && argv && argv[0]) {
        const char* current = std::getenv(TunablesVariable);
        const std::optional<std::string> tunables = tunablesWithHugePages(current);
        if (tunables && hugePagesPay()) {
            if (current)
                setenv(UserTunables, current, 1);
            setenv(CopyMarker, current ? "1" : "0", 1);
            setenv(TunablesVariable, tunables->c_str(), 1);
            execv("/proc/self/exe", argv);
            restoreUserTunables(); // the exec failed (no /proc, say): go on as we are
        }
    }
    // glibc serves a request of at least M_MMAP_THRESHOLD with a mapping of its own, given back when freed, and
    // raises that threshold to the size of each such mapping freed, up to 32 MiB (mallopt(3), "dynamic mmap
    // threshold"). Opening a large file frees mappings of hundreds of MB (the replay's build), so every buffer of
    // up to 32 MiB the views then make comes from the heap, and what they free there stays resident: about 55 MB at
    // the peak of a 1 GB open (docs/speed.md). A fixed threshold keeps buffers of 4 MiB and more out of the heap.
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
#else
    (void)argv;
#endif
}

} // namespace memscope::model
