// Snapshot dumps (dump.h): a protocol-2 pickle of PyTorch's snapshot dict.
#include "dump.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::agent {
namespace {

    // The few opcodes the snapshot dict needs (pickletools names).
    class PickleWriter {
    public:
        PickleWriter() { m_out += "\x80\x02"; } // PROTO 2
        std::string finish()
        {
            m_out += '.'; // STOP
            return std::move(m_out);
        }
        void emptyDict() { m_out += '}'; }
        void emptyList() { m_out += ']'; }
        void mark() { m_out += '('; }
        void setItems() { m_out += 'u'; }
        void appends() { m_out += 'e'; }
        void tuple2() { m_out += '\x86'; }
        void none() { m_out += 'N'; }
        void boolean(bool v) { m_out += v ? '\x88' : '\x89'; }
        void integer(int64_t v)
        {
            if (v >= INT32_MIN && v <= INT32_MAX) {
                m_out += 'J'; // BININT, 4 bytes little-endian
                appendLe(uint64_t(v), 4);
                return;
            }
            // LONG1: n bytes of little-endian two's complement.
            uint8_t bytes[9];
            int n = 0;
            uint64_t u = uint64_t(v);
            for (; n < 8; ++n)
                bytes[n] = uint8_t(u >> (8 * n));
            while (n > 1 && ((bytes[n - 1] == 0 && !(bytes[n - 2] & 0x80)) || (bytes[n - 1] == 0xFF && (bytes[n - 2] & 0x80))))
                --n;
            m_out += '\x8a';
            m_out += char(n);
            m_out.append(reinterpret_cast<const char*>(bytes), size_t(n));
        }
        void unsignedInteger(uint64_t v)
        {
            if (v <= uint64_t(INT64_MAX)) {
                integer(int64_t(v));
                return;
            }
            m_out += '\x8a';
            m_out += char(9);
            appendLe(v, 8);
            m_out += '\0';
        }
        void floating(double v)
        {
            m_out += 'G'; // BINFLOAT, big-endian
            uint64_t bits;
            std::memcpy(&bits, &v, sizeof bits);
            for (int i = 7; i >= 0; --i)
                m_out += char(uint8_t(bits >> (8 * i)));
        }
        void string(std::string_view s)
        {
            m_out += 'X'; // BINUNICODE, 4-byte length
            appendLe(s.size(), 4);
            m_out.append(s);
        }

    private:
        void appendLe(uint64_t v, int n)
        {
            for (int i = 0; i < n; ++i)
                m_out += char(uint8_t(v >> (8 * i)));
        }
        std::string m_out;
    };

    const char* blockState(const BlockInfo& b)
    {
        if (b.allocated)
            return "active_allocated";
        return b.active ? "active_pending_free" : "inactive";
    }

    void writePool(PickleWriter& w, const PoolId& pool)
    {
        w.integer(pool.first);
        w.integer(pool.second);
        w.tuple2();
    }

    std::atomic<unsigned> g_dumpCounter { 0 };

    sem_t g_signalSem;
    const CachingAllocator* g_signalAllocator = nullptr;
    std::string* g_signalPath = nullptr;
    StackNamer* g_signalNamer = nullptr;

    void onSigusr2(int)
    {
        const int saved = errno;
        sem_post(&g_signalSem); // async-signal-safe; the dump thread does the work
        errno = saved;
    }

    void dumpThread()
    {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, nullptr);
        pthread_setname_np(pthread_self(), "memscope-dump");
        for (;;) {
            if (sem_wait(&g_signalSem) != 0)
                continue; // EINTR
            std::string written, error;
            if (dumpSnapshot(*g_signalAllocator, *g_signalPath, &written, &error, *g_signalNamer))
                std::fprintf(stderr, "memscope: snapshot written to %s\n", written.c_str());
            else
                std::fprintf(stderr, "memscope: snapshot dump failed: %s\n", error.c_str());
        }
    }

} // namespace

DumpSettings dumpSettingsFromEnvironment()
{
    DumpSettings s;
    if (const char* on = std::getenv("MEMSCOPE_DUMP_ON")) {
        s.onOom = std::strstr(on, "oom") != nullptr;
        s.onExit = std::strstr(on, "exit") != nullptr;
    }
    if (const char* path = std::getenv("MEMSCOPE_DUMP_PATH"))
        s.path = path;
    return s;
}

std::string encodeSnapshotPickle(const std::vector<SegmentInfo>& segments, int deviceCount,
                                 const AllocatorConfig& config, const StackNamer& namer)
{
    PickleWriter w;
    w.emptyDict();
    w.mark();

    w.string("segments");
    w.emptyList();
    if (!segments.empty()) {
        w.mark();
        for (const SegmentInfo& s : segments) {
            w.emptyDict();
            w.mark();
            w.string("device");
            w.integer(s.device);
            w.string("address");
            w.unsignedInteger(s.address);
            w.string("total_size");
            w.unsignedInteger(s.totalSize);
            w.string("allocated_size");
            w.unsignedInteger(s.allocatedSize);
            w.string("active_size");
            w.unsignedInteger(s.activeSize);
            w.string("requested_size");
            w.unsignedInteger(s.requestedSize);
            w.string("stream");
            w.unsignedInteger(raw(s.stream));
            w.string("segment_type");
            w.string(s.isLarge ? "large" : "small");
            w.string("segment_pool_id");
            writePool(w, s.pool);
            w.string("is_expandable");
            w.boolean(s.isExpandable);
            w.string("frames");
            w.emptyList();
            w.string("blocks");
            w.emptyList();
            if (!s.blocks.empty()) {
                w.mark();
                for (const BlockInfo& b : s.blocks) {
                    w.emptyDict();
                    w.mark();
                    w.string("address");
                    w.unsignedInteger(b.address);
                    w.string("size");
                    w.unsignedInteger(b.size);
                    w.string("requested_size");
                    w.unsignedInteger(b.requestedSize);
                    w.string("state");
                    w.string(blockState(b));
                    w.string("frames");
                    w.emptyList();
                    if (b.active && b.stackId != 0 && namer) {
                        // As torch.cuda.memory._snapshot() writes a frame: {"filename", "line", "name"}.
                        const std::vector<SymbolFrame> frames = namer(b.stackId);
                        if (!frames.empty()) {
                            w.mark();
                            for (const SymbolFrame& f : frames) {
                                w.emptyDict();
                                w.mark();
                                w.string("filename");
                                w.string(f.filename);
                                w.string("line");
                                w.integer(f.line);
                                w.string("name");
                                w.string(f.name);
                                w.setItems();
                            }
                            w.appends();
                        }
                    }
                    w.setItems();
                }
                w.appends();
            }
            w.setItems();
        }
        w.appends();
    }

    w.string("device_traces");
    w.emptyList();
    if (deviceCount > 0) {
        w.mark();
        for (int d = 0; d < deviceCount; ++d)
            w.emptyList();
        w.appends();
    }

    w.string("allocator_settings");
    w.emptyDict();
    w.mark();
    w.string("PYTORCH_CUDA_ALLOC_CONF");
    w.string(config.text);
    w.string("max_split_size");
    w.integer(config.maxSplitSize == SIZE_MAX ? -1 : int64_t(config.maxSplitSize));
    w.string("garbage_collection_threshold");
    w.floating(config.garbageCollectionThreshold);
    w.string("expandable_segments");
    w.boolean(config.expandableSegments);
    // The rest as PyTorch 2.11 lists them (config.h, settingsLines: the same keys on the wire).
    w.string("pinned_num_register_threads");
    w.integer(1);
    w.string("release_lock_on_cudamalloc");
    w.boolean(config.releaseLockOnMalloc);
    w.string("pinned_use_cuda_host_register");
    w.boolean(false);
    w.string("graph_capture_record_stream_reuse");
    w.boolean(config.graphCaptureRecordStreamReuse);
    w.string("roundup_power2_divisions");
    w.emptyDict();
    w.mark();
    for (size_t i = 0; i < RoundUpPowerOfTwoIntervals; ++i) {
        w.string(std::to_string(size_t(1) << i));
        w.integer(int64_t(config.roundupPower2Divisions[i]));
    }
    w.setItems();
    w.setItems();

    w.setItems();
    return w.finish();
}

std::string dumpTarget(const std::string& path)
{
    struct stat st {};
    const bool folder = path.empty() || path.back() == '/' || (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
    if (!folder)
        return path;
    std::string dir = path.empty() ? "." : path;
    if (dir.back() != '/')
        dir += '/';
    return dir + "memscope-" + std::to_string(::getpid()) + "-" + std::to_string(g_dumpCounter.fetch_add(1)) + ".pickle";
}

bool dumpSnapshot(const CachingAllocator& allocator, const std::string& path, std::string* written,
                  std::string* error, const StackNamer& namer)
{
    const std::string target = dumpTarget(path);
    const std::string bytes
        = encodeSnapshotPickle(allocator.snapshotAll([] {}), allocator.deviceCount(), allocator.config(), namer);
    const std::string temp = target + ".tmp-" + std::to_string(::getpid());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        *error = temp + ": " + std::strerror(errno);
        return false;
    }
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *error = temp + ": " + std::strerror(errno);
            ::close(fd);
            ::unlink(temp.c_str());
            return false;
        }
        done += size_t(n);
    }
    if (::close(fd) != 0 || ::rename(temp.c_str(), target.c_str()) != 0) {
        *error = target + ": " + std::strerror(errno);
        ::unlink(temp.c_str());
        return false;
    }
    if (written)
        *written = target;
    return true;
}

void installDumpSignal(const CachingAllocator& allocator, const std::string& path, StackNamer namer)
{
    static std::atomic<bool> installed { false };
    if (installed.exchange(true))
        return;
    struct sigaction old {};
    if (sigaction(SIGUSR2, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
        return; // the host handles SIGUSR2 itself: leave it alone
    if (sem_init(&g_signalSem, 0, 0) != 0)
        return;
    g_signalAllocator = &allocator;
    g_signalPath = new std::string(path); // leaked on purpose, like the agent
    g_signalNamer = new StackNamer(std::move(namer));
    std::thread(dumpThread).detach();
    struct sigaction sa {};
    sa.sa_handler = onSigusr2;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, nullptr);
}

} // namespace memscope::agent
