// Publisher: the ZeroMQ side of the agent (see publisher.h). The hot path (onTraceEvent) writes one record into
// the ring; the "memscope-pub" thread does every socket call, every allocation and every syscall.
#include "publisher.h"

#include "curve.h"
#include "pythonstacks.h"
#include "wire/endpoint.h"
#include "wire/keyfile.h"

#include <lz4.h>
#include <zmq.h>

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define MEMSCOPE_HAVE_TSC 1
#else
#define MEMSCOPE_HAVE_TSC 0
#endif

#ifndef MEMSCOPE_AGENT_VERSION
#define MEMSCOPE_AGENT_VERSION "unknown"
#endif

namespace memscope::agent {
namespace {

    // At most 72 KiB per message: ZeroMQ bounds what it queues for a viewer in messages (ZMQ_SNDHWM,
    // zmq_setsockopt(3)), so a bounded message size is what turns that count into bytes (viewerQueueMessages).
    constexpr size_t MaxBatchRecords = 1024;
    constexpr size_t MaxBatchBytes = sizeof(wire::BatchHeader) + MaxBatchRecords * sizeof(wire::EventRecord);
    constexpr int LingerMs = 150; // what close may wait to flush the Goodbye unless stop() allows more
    constexpr int RouterHwm = 2; // state replies queued per peer; a peer that asks and never reads holds no more
    constexpr size_t MaxStateRequesters = 64; // distinct peers waiting for one state; more are dropped (they retry)
    constexpr unsigned MinStateIntervalMs = 100; // between two states taken once a burst is spent
    constexpr int StateBurst = 4; // states taken at once before the interval applies

    int64_t steadyNs()
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }

    // MEMSCOPE_RING_RECORDS, checked; a bad value is named on stderr and the default used.
    size_t ringRecordsFromEnvironment()
    {
        const char* text = std::getenv("MEMSCOPE_RING_RECORDS");
        if (!text)
            return Publisher::DefaultRingRecords;
        char* end = nullptr;
        errno = 0;
        const unsigned long long n = std::strtoull(text, &end, 10);
        if (errno == 0 && end != text && *end == '\0' && *text != '-' && n >= 2 && n <= Publisher::MaxRingRecords)
            return size_t(n);
        std::fprintf(stderr, "memscope: MEMSCOPE_RING_RECORDS=%s is not a number of records from 2 to %zu; using %zu\n",
                     text, Publisher::MaxRingRecords, Publisher::DefaultRingRecords);
        return Publisher::DefaultRingRecords;
    }

    // MEMSCOPE_VIEWER_BUFFER_MB, checked; a bad value is named on stderr and the default used.
    size_t viewerBufferFromEnvironment()
    {
        const char* text = std::getenv("MEMSCOPE_VIEWER_BUFFER_MB");
        if (!text)
            return Publisher::DefaultViewerBufferBytes;
        char* end = nullptr;
        errno = 0;
        const unsigned long long mib = std::strtoull(text, &end, 10);
        if (errno == 0 && end != text && *end == '\0' && *text != '-' && mib >= 1 && mib <= 65536)
            return size_t(mib) << 20;
        std::fprintf(stderr, "memscope: MEMSCOPE_VIEWER_BUFFER_MB=%s is not a number of MiB from 1 to 65536; using %zu\n",
                     text, Publisher::DefaultViewerBufferBytes >> 20);
        return Publisher::DefaultViewerBufferBytes;
    }

    // The messages ZeroMQ may queue for one viewer so that they hold at most `bytes` (every batch is at most
    // MaxBatchBytes; stacks, notes and settings are smaller but for rare large stacks). A viewer that reads slower
    // than the job publishes, or not at all, then loses whole batches beyond its share: PUB drops them for that
    // viewer alone (zmq_socket(3), ZMQ_PUB: "messages ... dropped" at the high water mark), which sees a sequence
    // gap and resynchronises. The job's memory never depends on how fast anyone reads.
    int viewerQueueMessages(size_t bytes) { return int(std::clamp<size_t>(bytes / MaxBatchBytes, 16, 1 << 20)); }

    // MEMSCOPE_COMPRESS, checked; unset or bad: LZ4 on tcp:// endpoints only (the bytes cross a network there; on
    // ipc the copy is cheaper than the compression).
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

    uint64_t realtimeNs() noexcept
    {
        timespec ts; // clock_gettime(CLOCK_REALTIME) is answered by the vDSO: no system call
        clock_gettime(CLOCK_REALTIME, &ts);
        return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
    }

    // The hot path's clock. clock_gettime(CLOCK_REALTIME) costs ~23 ns here even through the vDSO; the time stamp
    // counter ~10 ns. Records carry raw ticks until the publisher thread turns them into CLOCK_REALTIME ns
    // (convertTimes), the way tracy's client does. The counter is used only where it is a clock: an invariant TSC
    // (constant rate, runs in every C-state: CPUID 0x80000007 EDX bit 8, Intel SDM vol. 3 §17.17.1 / AMD APM vol. 3
    // CPUID Fn8000_0007) that the kernel itself trusts as its clocksource (it switches away from "tsc" when it
    // finds the counters of two CPUs unsynchronised or drifting: Documentation/admin-guide/kernel-parameters.txt,
    // tsc=; arch/x86/kernel/tsc_sync.c). Anything else reads CLOCK_REALTIME directly.
    bool invariantTsc() noexcept
    {
#if MEMSCOPE_HAVE_TSC
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        if (!__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) || eax < 0x80000007u)
            return false;
        if (!__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx))
            return false;
        return (edx & (1u << 8)) != 0;
#else
        return false;
#endif
    }

    bool kernelClocksourceIsTsc() noexcept
    {
        FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
        if (!f)
            return false;
        char name[32] = {};
        const bool read = std::fgets(name, sizeof name, f) != nullptr;
        std::fclose(f);
        return read && std::strncmp(name, "tsc", 3) == 0 && (name[3] == '\n' || name[3] == '\0');
    }

    // MEMSCOPE_CLOCK=realtime forces clock_gettime (a check on the converted clock, or a machine whose TSC misleads).
    bool useTsc() noexcept
    {
        const char* forced = std::getenv("MEMSCOPE_CLOCK");
        if (forced && std::strcmp(forced, "realtime") == 0)
            return false;
        return invariantTsc() && kernelClocksourceIsTsc();
    }

    inline uint64_t ticks() noexcept
    {
#if MEMSCOPE_HAVE_TSC
        return __rdtsc();
#else
        return 0;
#endif
    }

    // A (ticks, realtime ns) pair taken as close together as possible: the tightest of three tries.
    void clockPair(uint64_t& tsc, uint64_t& ns) noexcept
    {
        uint64_t best = UINT64_MAX;
        for (int i = 0; i < 3; ++i) {
            const uint64_t before = ticks();
            const uint64_t now = realtimeNs();
            const uint64_t after = ticks();
            if (after - before < best) {
                best = after - before;
                tsc = before + (after - before) / 2;
                ns = now;
            }
        }
    }

    wire::EventType eventType(TraceAction action) noexcept
    {
        switch (action) {
        case TraceAction::Alloc:
            return wire::EventType::Alloc;
        case TraceAction::FreeRequested:
            return wire::EventType::FreeRequested;
        case TraceAction::FreeCompleted:
            return wire::EventType::FreeCompleted;
        case TraceAction::SegmentAlloc:
            return wire::EventType::SegmentAlloc;
        case TraceAction::SegmentFree:
            return wire::EventType::SegmentFree;
        case TraceAction::SegmentMap:
            return wire::EventType::SegmentMap;
        case TraceAction::SegmentUnmap:
            return wire::EventType::SegmentUnmap;
        case TraceAction::Oom:
        case TraceAction::Count:
            break;
        }
        return wire::EventType::Oom;
    }

    template <typename T> void append(std::vector<char>& out, const T& value)
    {
        const char* p = reinterpret_cast<const char*>(&value);
        out.insert(out.end(), p, p + sizeof(T));
    }

    void copyString(char* dst, size_t capacity, const char* src)
    {
        const size_t n = strnlen(src, capacity - 1);
        std::memcpy(dst, src, n);
        dst[n] = '\0';
    }

} // namespace

namespace {

    // memscope's own allocator as a source: its state is taken under every device lock at once, so the rings'
    // positions read there are exact.
    class AllocatorSource final : public EventSource {
    public:
        explicit AllocatorSource(CachingAllocator& allocator)
            : m_allocator(allocator)
        {
        }
        int deviceCount() const override { return m_allocator.deviceCount(); }
        bool takeState(const std::vector<EventRing*>& rings, std::vector<SegmentInfo>& state,
                       std::vector<uint64_t>& written) override
        {
            state = m_allocator.snapshotAll([&] {
                for (size_t d = 0; d < rings.size(); ++d)
                    written[d] = rings[d]->written();
            });
            return true;
        }
        std::string settings() const override { return settingsLines(m_allocator.config()); }

    private:
        CachingAllocator& m_allocator;
    };

} // namespace

Publisher::Publisher(CachingAllocator& allocator, PublisherOptions options)
    : Publisher(*new AllocatorSource(allocator), std::move(options))
{
    m_ownedSource.reset(&m_source);
}

Publisher::Publisher(EventSource& source, PublisherOptions options)
    : m_source(source)
    , m_options(std::move(options))
    , m_useTsc(useTsc())
{
    if (m_options.ringCapacity == 0)
        m_options.ringCapacity = ringRecordsFromEnvironment();
    if (m_options.viewerBufferBytes == 0)
        m_options.viewerBufferBytes = viewerBufferFromEnvironment();
    const int devices = std::max(source.deviceCount(), 1);
    m_channels.reserve(size_t(devices));
    for (int d = 0; d < devices; ++d)
        m_channels.push_back(std::make_unique<Channel>(m_options.ringCapacity));
    clockPair(m_tscBase, m_clockBaseNs);
    m_anchorTsc = m_tscBase;
    m_anchorNs = m_clockBaseNs;
    m_nsPerTick = 0; // unknown until the thread calibrates (records wait in the ring meanwhile)
    const StackSettings stacks = stackSettingsFromEnvironment();
    m_stackDepth = m_options.stackDepth < 0 ? stacks.nativeDepth
                                            : std::min(unsigned(m_options.stackDepth), MaxStackDepth);
    m_pythonStacks = m_options.pythonStacks < 0 ? stacks.python : m_options.pythonStacks > 0;
    m_ownCode = agentCodeSpan();
    if (m_stackDepth > 0 || m_pythonStacks) {
        primeStackCapture(); // the constructing thread (usually the job's main thread) learns its stack bounds now
        // The device in the top 6 bits of an id: each device's table hands out ids without any shared counter.
        for (size_t d = 0; d < m_channels.size(); ++d)
            m_channels[d]->stacks = std::make_unique<StackTable>(
                uint32_t(d) << 26, std::min(m_options.maxStacks, (size_t(1) << 26) - 1), m_options.maxStackFrames);
    }
}

uint64_t Publisher::stacksDropped() const
{
    uint64_t n = 0;
    for (const auto& c : m_channels)
        n += c->stacks ? c->stacks->dropped() : 0;
    return n;
}

uint64_t Publisher::lost() const
{
    uint64_t n = 0;
    for (const auto& c : m_channels)
        n += c->ring.lostTotal();
    return n;
}

uint64_t Publisher::recorded() const
{
    uint64_t n = 0;
    for (const auto& c : m_channels)
        n += c->ring.written();
    return n;
}

uint64_t Publisher::eventTime() const noexcept { return m_useTsc ? ticks() : realtimeNs(); }

void Publisher::calibrate() noexcept
{
    if (!m_useTsc)
        return;
    uint64_t tsc = 0, ns = 0;
    clockPair(tsc, ns);
    // The rate over the whole run so far (the longer the span, the smaller the error of the pairs' jitter).
    if (tsc > m_tscBase && ns > m_clockBaseNs)
        m_nsPerTick = double(ns - m_clockBaseNs) / double(tsc - m_tscBase);
}

void Publisher::anchor() noexcept
{
    if (m_useTsc)
        clockPair(m_anchorTsc, m_anchorNs);
}

uint64_t Publisher::realtimeOf(uint64_t time) const noexcept
{
    if (!m_useTsc)
        return time;
    // Relative to a (ticks, CLOCK_REALTIME) pair taken at this drain (anchor()): a record is at most a drain
    // interval plus the ring's backlog older than it, so the rate's error (ppm after the first seconds) moves it
    // by nanoseconds, and a step of CLOCK_REALTIME (settimeofday, NTP) shows in every record after the next drain.
    const int64_t delta = int64_t(time - m_anchorTsc);
    return m_anchorNs + uint64_t(int64_t(double(delta) * m_nsPerTick));
}

Publisher::~Publisher()
{
    stop();
    if (m_thread.joinable())
        m_thread.join();
    if (m_context && !m_threadOwnsSockets) { // never started a thread: the sockets are still ours
        removeOwnSockets();
        if (m_pub)
            zmq_close(m_pub);
        if (m_router)
            zmq_close(m_router);
        if (m_zap)
            zmq_close(m_zap);
        zmq_ctx_term(m_context);
    }
}

namespace {

    // The sockets of this user's jobs that died without a clean stop (killed, crashed: no one removed them), in the
    // default endpoints' folder: memscope-PID and memscope-PID-state whose PID no longer runs. Removed when the next
    // job starts there, so that the attach dialog lists running jobs, not old files. A socket another user owns, or
    // whose PID runs (perhaps reused by another process), is left alone.
    void removeStaleSockets(const std::string& dir)
    {
        DIR* d = ::opendir(dir.c_str());
        if (!d)
            return;
        while (const dirent* entry = ::readdir(d)) {
            const wire::SocketName name = wire::parseSocketName(entry->d_name);
            const pid_t pid = pid_t(name.pid);
            if (!name.memscope || pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH)
                continue;
            const std::string path = dir + "/" + entry->d_name;
            struct stat st { };
            if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == ::getuid())
                ::unlink(path.c_str());
        }
        ::closedir(d);
    }

} // namespace

std::string Publisher::defaultEndpoint(std::string* error)
{
    std::string dir = wire::runtimeSocketFolder();
    struct stat st { };
    if (!dir.empty() && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ::access(dir.c_str(), W_OK) == 0) {
        // $XDG_RUNTIME_DIR: this user's own (the XDG Base Directory Specification), mode 0700.
    } else {
        dir = wire::fallbackSocketFolder();
        if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
            if (error)
                *error = "cannot create " + dir + ": " + std::strerror(errno);
            return {};
        }
        // Someone else's folder, or one others may enter, is refused: the sockets would be theirs to read.
        if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) {
            if (error)
                *error = dir + " is not a folder owned by this user";
            return {};
        }
        if ((st.st_mode & 0777) != 0700)
            ::chmod(dir.c_str(), 0700);
    }
    removeStaleSockets(dir);
    return std::string(wire::IpcScheme) + dir + "/" + wire::socketName(::getpid());
}

namespace {

    // Binds `socket` to an ipc:// endpoint so that only this user can connect, from the first moment: ZeroMQ makes
    // the socket file with the process's umask (022 or 000 would let any local user read the job's state), so it is
    // bound under a temporary name beside the endpoint, made 0600, and renamed into place (rename(2) is atomic; in
    // a sticky folder such as /tmp it fails for a path another user holds, which is then refused). Abstract
    // endpoints (ipc://@NAME), which have no file and no permissions at all, never get here (wire::endpointProblem).
    // Other endpoints: a plain zmq_bind.
    // On success, *inode is the socket file's (0 for non-ipc endpoints), for removing it at exit.
    bool bindPrivate(void* socket, const std::string& endpoint, std::string* error, ino_t* inode)
    {
        *inode = 0;
        if (endpoint.rfind("ipc://", 0) != 0) {
            if (zmq_bind(socket, endpoint.c_str()) == 0)
                return true;
            *error = zmq_strerror(zmq_errno());
            return false;
        }
        const std::string path = endpoint.substr(wire::IpcScheme.size()); // not abstract (wire::endpointProblem)
        struct stat st {};
        if (::lstat(path.c_str(), &st) == 0 && st.st_uid != ::geteuid()) {
            *error = "the path belongs to another user (uid " + std::to_string(st.st_uid) + ")";
            return false;
        }
        const std::string temp = path + ".bind-" + std::to_string(::getpid());
        if (zmq_bind(socket, ("ipc://" + temp).c_str()) != 0) {
            *error = zmq_strerror(zmq_errno());
            return false;
        }
        if (::chmod(temp.c_str(), 0600) != 0 || ::rename(temp.c_str(), path.c_str()) != 0) {
            *error = std::strerror(errno);
            zmq_unbind(socket, ("ipc://" + temp).c_str());
            ::unlink(temp.c_str());
            return false;
        }
        if (::lstat(path.c_str(), &st) == 0)
            *inode = st.st_ino;
        return true;
    }

} // namespace

bool Publisher::start(std::string* error)
{
    auto fail = [&](const std::string& message) {
        if (error)
            *error = message;
        if (m_pub)
            zmq_close(m_pub);
        if (m_router)
            zmq_close(m_router);
        if (m_zap)
            zmq_close(m_zap);
        if (m_context)
            zmq_ctx_term(m_context);
        m_pub = m_router = m_zap = m_context = nullptr;
        m_curve = false;
        return false;
    };
    if (m_running.load() || m_context)
        return fail("the publisher is already started");
    m_endpoint = m_options.endpoint;
    if (m_endpoint.empty()) {
        std::string why;
        m_endpoint = defaultEndpoint(&why);
        if (m_endpoint.empty())
            return fail(why);
    }
    // ipc:///PATH or tcp://HOST:PORT, as the viewers' rule (wire/endpoint.h) is.
    if (const std::string why = wire::endpointProblem(m_endpoint); !why.empty())
        return fail(m_endpoint + ": " + why);
    // tcp: loopback needs nothing; anything else only with CURVE keys (docs/protocol.md, "TCP and CURVE").
    const std::string secretFile = !m_options.curveSecretFile.empty()
        ? m_options.curveSecretFile
        : (std::getenv("MEMSCOPE_CURVE_SECRET") ? std::getenv("MEMSCOPE_CURVE_SECRET") : "");
    const std::string clientsFile = !m_options.curveClientsFile.empty()
        ? m_options.curveClientsFile
        : (std::getenv("MEMSCOPE_CURVE_CLIENTS") ? std::getenv("MEMSCOPE_CURVE_CLIENTS") : "");
    bool ipv6 = false;
    std::optional<std::string> secretKey;
    std::vector<std::array<uint8_t, 32>> clientKeys;
    if (m_endpoint.rfind("tcp://", 0) == 0) {
        const TcpEndpoint tcp = parseTcpEndpoint(m_endpoint);
        const std::string asked = m_endpoint;
        m_endpoint = tcp.bind;
        ipv6 = tcp.ipv6;
        const bool curve = !tcp.loopback || !secretFile.empty() || !clientsFile.empty();
        if (curve) {
            const std::string refuse = "refusing to bind " + asked + ": ";
            const std::string what = tcp.loopback ? "CURVE (asked for by MEMSCOPE_CURVE_SECRET/_CLIENTS) needs"
                                                  : "an endpoint other than loopback needs CURVE:";
            if (secretFile.empty() || clientsFile.empty())
                return fail(refuse + what + " both MEMSCOPE_CURVE_SECRET (the agent's secret key file) and "
                            + "MEMSCOPE_CURVE_CLIENTS (the authorised client public keys); "
                            + (secretFile.empty() ? "MEMSCOPE_CURVE_SECRET" : "MEMSCOPE_CURVE_CLIENTS")
                            + " is not set");
            const wire::KeyResult secret = wire::readKeyFile(secretFile, wire::KeyKind::Secret);
            if (!secret.ok())
                return fail(refuse + "MEMSCOPE_CURVE_SECRET: " + secret.error);
            secretKey = secret.key;
            const wire::KeyListResult clients = wire::readClientKeys(clientsFile);
            if (!clients.ok())
                return fail(refuse + "MEMSCOPE_CURVE_CLIENTS: " + clients.error);
            if (!publicKeyOf(*secretKey))
                return fail(refuse + "MEMSCOPE_CURVE_SECRET: " + secretFile + ": ZeroMQ cannot use this key ("
                            + zmq_strerror(zmq_errno()) + ")");
            for (const std::string& k : clients.keys) {
                std::array<uint8_t, 32> binary {};
                zmq_z85_decode(binary.data(), k.c_str());
                clientKeys.push_back(binary);
            }
        }
    }
    m_stateEndpoint = wire::stateEndpointFor(m_endpoint);

    // libzmq starts its I/O and reaper threads from here on; with every signal blocked while they are created they
    // (and our thread) inherit a full mask and never take the host's signals.
    struct SignalMask {
        sigset_t old;
        SignalMask()
        {
            sigset_t all;
            sigfillset(&all);
            pthread_sigmask(SIG_SETMASK, &all, &old);
        }
        ~SignalMask() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
    } mask;
    m_context = zmq_ctx_new();
    if (!m_context)
        return fail(std::string("zmq_ctx_new: ") + zmq_strerror(zmq_errno()));
    zmq_ctx_set(m_context, ZMQ_IO_THREADS, 1);
    m_pub = zmq_socket(m_context, ZMQ_PUB);
    m_router = zmq_socket(m_context, ZMQ_ROUTER);
    if (!m_pub || !m_router)
        return fail(std::string("zmq_socket: ") + zmq_strerror(zmq_errno()));
    switch (m_options.compression) {
    case Compression::FromEnvironment:
        m_compress = compressionFromEnvironment(m_endpoint);
        break;
    case Compression::None:
        m_compress = false;
        break;
    case Compression::Lz4:
        m_compress = true;
        break;
    }
    const int linger = LingerMs;
    const int sndhwm = viewerQueueMessages(m_options.viewerBufferBytes);
    zmq_setsockopt(m_pub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(m_router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(m_pub, ZMQ_SNDHWM, &sndhwm, sizeof sndhwm);
    zmq_setsockopt(m_router, ZMQ_SNDHWM, &RouterHwm, sizeof RouterHwm);
    if (ipv6) {
        const int on = 1;
        zmq_setsockopt(m_pub, ZMQ_IPV6, &on, sizeof on);
        zmq_setsockopt(m_router, ZMQ_IPV6, &on, sizeof on);
    }
    if (secretKey) {
        // The ZAP handler (ZeroMQ RFC 27) must be bound before the CURVE servers: libzmq lets every client in
        // when no handler is there (zmq_setsockopt(3), ZMQ_ZAP_ENFORCE_DOMAIN). The publisher thread serves it.
        m_zap = zmq_socket(m_context, ZMQ_REP);
        if (!m_zap || zmq_bind(m_zap, "inproc://zeromq.zap.01") != 0)
            return fail(std::string("cannot start the CURVE authentication handler: ") + zmq_strerror(zmq_errno()));
        zmq_setsockopt(m_zap, ZMQ_LINGER, &linger, sizeof linger);
        m_clientKeys = std::move(clientKeys);
        const int server = 1;
        const char domain[] = "memscope";
        for (void* socket : { m_pub, m_router }) {
            if (zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &server, sizeof server) != 0
                || zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, secretKey->data(), 40) != 0
                || zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, domain, sizeof domain - 1) != 0)
                return fail("cannot make " + m_endpoint + " a CURVE server: " + zmq_strerror(zmq_errno()));
        }
        m_curve = true;
    }

    std::string pubError, routerError;
    ino_t pubInode = 0, routerInode = 0;
    const bool pubBound = bindPrivate(m_pub, m_endpoint, &pubError, &pubInode);
    const bool routerBound = pubBound && bindPrivate(m_router, m_stateEndpoint, &routerError, &routerInode);
    if (pubInode)
        m_ownSockets.push_back({ m_endpoint.substr(6), pubInode });
    if (routerInode)
        m_ownSockets.push_back({ m_stateEndpoint.substr(6), routerInode });
    bool threadStarted = false;
    std::string threadError;
    if (pubBound && routerBound && m_options.startThread) {
        try {
            m_running.store(true, std::memory_order_release);
            m_threadOwnsSockets = true; // the thread owns the sockets and the context from now on
            m_thread = std::thread([this] { run(); }); // inherits the full signal mask
            threadStarted = true;
        } catch (const std::exception& e) {
            m_running.store(false);
            m_threadOwnsSockets = false;
            threadError = e.what();
        }
    }
    if (!pubBound || !routerBound)
        removeOwnSockets();
    if (!pubBound)
        return fail("cannot bind " + m_endpoint + ": " + pubError);
    if (!routerBound)
        return fail("cannot bind " + m_stateEndpoint + ": " + routerError);
    if (m_options.startThread && !threadStarted)
        return fail("cannot start the publisher thread: " + threadError);
    return true;
}

void Publisher::onTraceEvent(const TraceEvent& event) { onTraceEventWithStack(event); }

namespace {
    // setThreadStack(): the frames this thread's allocator calls carry instead of (or after) a captured stack.
    thread_local Publisher::ThreadStack t_threadStack;
} // namespace

void Publisher::setThreadStack(const uintptr_t* frames, unsigned count, bool afterNative) noexcept
{
    t_threadStack = ThreadStack { frames, frames ? std::min(count, MaxStackDepth) : 0, afterNative };
}

void Publisher::setThreadStack(const ThreadStack& stack) noexcept { t_threadStack = stack; }

Publisher::ThreadStack Publisher::threadStack() noexcept { return t_threadStack; }

void Publisher::defineFrame(uintptr_t address, std::string name, std::string file, int line)
{
    m_definedFrames[address] = DefinedFrame { std::move(name), std::move(file), line };
}

uint32_t Publisher::internStack(Channel& c) noexcept
{
    const ThreadStack& given = t_threadStack;
    if (given.frames && !given.afterNative)
        return c.stacks->intern(given.frames, given.count);
    uintptr_t frames[MaxStackDepth];
    unsigned n = m_stackDepth > 0 ? memscope::agent::captureStack(frames, m_stackDepth) : 0;
    // The agent's own frames (the allocator, this function) say nothing about the caller: innermost, they go.
    unsigned own = 0;
    while (own < n && m_ownCode.contains(frames[own]))
        ++own;
    if (own > 0) {
        std::memmove(frames, frames + own, (n - own) * sizeof(uintptr_t));
        n -= own;
    }
    if (given.frames) {
        const unsigned more = std::min(given.count, MaxStackDepth - n);
        std::copy(given.frames, given.frames + more, frames + n);
        n += more;
    }
    return c.stacks->intern(frames, n);
}

uint32_t Publisher::onTraceEventWithStack(const TraceEvent& event)
{
    if (!m_enabled.load(std::memory_order_relaxed) || event.device < 0 || size_t(event.device) >= m_channels.size())
        return 0;
    Channel& c = *m_channels[size_t(event.device)];
    // One time stamp (and one stack) per allocator call: a malloc's SegmentAlloc and Alloc, a free's FreeRequested
    // and FreeCompleted share them. Call 0 is an event reported by hand (the preload shim): its own stamp.
    const bool sameCall = event.call != 0 && event.call == c.lastCall;
    const uint64_t now = sameCall ? c.lastTime : eventTime();
    c.lastTime = now;
    c.lastCall = event.call;
    uint32_t stackId = 0;
    if (m_stackDepth > 0 || m_pythonStacks) {
        // The stack is interned before the record enters the ring, so the publisher, having read the record, sees
        // the stack too (the table's release store precedes the ring's) and sends it first.
        stackId = sameCall ? c.lastStackId : internStack(c);
        c.lastStackId = stackId;
    }
    c.ring.push([&](wire::EventRecord& r) noexcept {
        r.timeNs = now;
        r.address = event.addr;
        r.stream = raw(event.stream);
        r.stackId = stackId;
        r.poolFirst = static_cast<int32_t>(event.pool.first);
        r.poolSecond = static_cast<int32_t>(event.pool.second);
        r.type = static_cast<uint8_t>(eventType(event.action));
        r.device = static_cast<uint8_t>(event.device);
        switch (event.action) {
        case TraceAction::Alloc:
        case TraceAction::FreeRequested:
        case TraceAction::FreeCompleted:
            r.size = event.blockSize;
            r.requestedSize = event.size;
            break;
        default:
            r.size = event.size;
            r.requestedSize = 0;
            break;
        }
    });
    return stackId;
}

bool Publisher::annotate(int device, bool start, std::string_view name)
{
    if (!m_enabled.load(std::memory_order_relaxed) || device < 0 || size_t(device) >= m_channels.size())
        return false;
    PendingNote note { realtimeNs(), uint8_t(device), uint8_t(start ? 0 : 1),
                       std::string(name.substr(0, wire::MaxNoteNameBytes)) };
    std::lock_guard lock(m_notesMutex);
    if (m_pendingNotes.size() >= MaxPendingNotes) {
        m_notesDropped.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    m_pendingNotes.push_back(std::move(note));
    return true;
}

void Publisher::sendNotes()
{
    {
        std::lock_guard lock(m_notesMutex);
        if (m_pendingNotes.empty())
            return;
        m_sendingNotes.swap(m_pendingNotes);
    }
    // Back to back in frames of up to 64 KiB: a job that annotates every few microseconds costs a few messages.
    std::vector<char> frame;
    auto flush = [&] {
        zmq_send(m_pub, wire::NotesTopic, 1, ZMQ_SNDMORE);
        zmq_send(m_pub, frame.data(), frame.size(), 0);
        frame.clear();
    };
    for (const PendingNote& n : m_sendingNotes) {
        wire::NoteHeader header {};
        header.magic = wire::Magic;
        header.version = wire::ProtocolVersion;
        header.stage = n.stage;
        header.device = n.device;
        header.timeNs = n.timeNs;
        header.nameBytes = uint32_t(n.name.size());
        append(frame, header);
        frame.insert(frame.end(), n.name.begin(), n.name.end());
        if (frame.size() >= (size_t(64) << 10))
            flush();
    }
    if (!frame.empty())
        flush();
    m_sendingNotes.clear();
}

void Publisher::sendSettings()
{
    if (m_settingsLines.empty() || m_settingsLines.size() > wire::MaxSettingsBytes)
        return;
    wire::SettingsHeader header {};
    header.magic = wire::Magic;
    header.version = wire::ProtocolVersion;
    header.textBytes = uint32_t(m_settingsLines.size());
    std::vector<char> frame;
    append(frame, header);
    frame.insert(frame.end(), m_settingsLines.begin(), m_settingsLines.end());
    zmq_send(m_pub, wire::SettingsTopic, 1, ZMQ_SNDMORE);
    zmq_send(m_pub, frame.data(), frame.size(), 0);
}

void Publisher::sendHeartbeat()
{
    wire::EventRecord heartbeat {};
    heartbeat.sequence = ++m_sequence;
    heartbeat.timeNs = realtimeNs();
    heartbeat.type = static_cast<uint8_t>(wire::EventType::Heartbeat);
    sendFrame(&heartbeat, 1);
}

bool Publisher::drain(const uint64_t* upTo)
{
    bool any = false;
    for (size_t d = 0; d < m_channels.size(); ++d) {
        EventRing& ring = m_channels[d]->ring;
        const uint64_t limit = upTo ? upTo[d] : UINT64_MAX;
        // At most one ring's worth per call, so that a producer faster than the socket cannot keep this thread
        // from the other devices, the state requests and the stop flag.
        for (size_t round = 0; round <= ring.capacity() / MaxBatchRecords; ++round) {
            const size_t n = std::min(ring.available(limit), MaxBatchRecords);
            if (n == 0)
                break;
            sendNewStacks(d); // every stack these records name (interned before they entered the ring), before them
            anchor();
            if (!sendBatch(ring, n, limit))
                break; // no memory for a message: the records wait in the ring
            any = true;
        }
    }
    return any;
}

void Publisher::sendNewStacks(size_t device)
{
    Channel& c = *m_channels[device];
    if (!c.stacks)
        return;
    const size_t size = c.stacks->size();
    for (; c.stacksSent < size; ++c.stacksSent)
        sendStack(c.stacks->at(c.stacksSent));
}

void Publisher::resendStacks()
{
    for (const auto& c : m_channels)
        for (size_t i = 0; c->stacks && i < c->stacksSent; ++i)
            sendStack(c->stacks->at(i));
}

void Publisher::sendStack(const StackTable::Stack& stack)
{
    std::vector<wire::FrameRecord> frames(stack.count);
    std::string strings;
    auto addString = [&](const std::string& text) {
        const size_t at = strings.find(text + '\0');
        if (at != std::string::npos && (at == 0 || strings[at - 1] == '\0'))
            return uint32_t(at);
        const uint32_t offset = uint32_t(strings.size());
        strings += text;
        strings += '\0';
        return offset;
    };
    for (unsigned i = 0; i < stack.count; ++i) {
        const uintptr_t address = stack.frames[i];
        if (python::Frame f; python::symbolise(address, f)) {
            frames[i].address = address;
            frames[i].nameOffset = addString(f.name);
            frames[i].fileOffset = addString(f.file);
            frames[i].line = f.line;
            continue;
        }
        if (auto defined = m_definedFrames.find(address); defined != m_definedFrames.end()) {
            frames[i].address = address;
            frames[i].nameOffset = addString(defined->second.name);
            frames[i].fileOffset = addString(defined->second.file);
            frames[i].line = defined->second.line;
            continue;
        }
        auto it = m_symbols.find(address);
        if (it == m_symbols.end()) {
            std::string name = "??", file = "??";
            Dl_info info {};
            // address - 1: the call instruction, not the one after it (which may belong to the next function).
            if (dladdr(reinterpret_cast<void*>(address - 1), &info) != 0) {
                if (info.dli_fname && *info.dli_fname)
                    file = info.dli_fname;
                std::string mangled = info.dli_sname && *info.dli_sname
                    ? std::string(info.dli_sname)
                    : m_elfSymbols.find(info.dli_fname, reinterpret_cast<uintptr_t>(info.dli_fbase), address - 1);
                if (!mangled.empty()) {
                    int status = 0;
                    char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
                    name = status == 0 && demangled ? std::string(demangled) : mangled;
                    std::free(demangled);
                }
            }
            it = m_symbols.emplace(address, std::make_pair(std::move(name), std::move(file))).first;
        }
        frames[i].address = address;
        frames[i].nameOffset = addString(it->second.first);
        frames[i].fileOffset = addString(it->second.second);
        frames[i].line = 0; // dladdr knows no lines
    }
    sendStackMessage(stack.id, frames, strings);
}

void Publisher::sendSymbolizedStack(uint32_t stackId, const std::vector<SymbolFrame>& symbolFrames)
{
    std::vector<wire::FrameRecord> frames(std::min(symbolFrames.size(), size_t(wire::MaxStackFrames)));
    std::string strings;
    std::unordered_map<std::string, uint32_t> offsets;
    auto addString = [&](const std::string& text) {
        auto [it, added] = offsets.emplace(text, uint32_t(strings.size()));
        if (added) {
            strings += text;
            strings += '\0';
        }
        return it->second;
    };
    for (size_t i = 0; i < frames.size(); ++i) {
        frames[i].address = 0;
        frames[i].nameOffset = addString(symbolFrames[i].name);
        frames[i].fileOffset = addString(symbolFrames[i].filename);
        frames[i].line = int32_t(std::clamp<int64_t>(symbolFrames[i].line, INT32_MIN, INT32_MAX));
    }
    sendStackMessage(stackId, frames, strings);
}

void Publisher::sendStackMessage(uint32_t stackId, const std::vector<wire::FrameRecord>& frames,
                                 const std::string& strings)
{
    wire::StackDefHeader header {};
    header.magic = wire::Magic;
    header.version = wire::ProtocolVersion;
    header.stackId = stackId;
    header.frameCount = uint32_t(frames.size());
    header.stringBytes = uint32_t(strings.size());
    m_stackMessage.clear();
    append(m_stackMessage, header);
    for (const wire::FrameRecord& f : frames)
        append(m_stackMessage, f);
    m_stackMessage.insert(m_stackMessage.end(), strings.begin(), strings.end());
    zmq_send(m_pub, wire::StacksTopic, 1, ZMQ_SNDMORE);
    zmq_send(m_pub, m_stackMessage.data(), m_stackMessage.size(), 0);
}

bool Publisher::sendBatch(EventRing& ring, size_t count, uint64_t upTo)
{
    // One pass over the records: copied out of the ring, renumbered into the agent's one sequence, time stamps
    // converted. Uncompressed, they are copied straight into the ZeroMQ message that goes out (no other copy of
    // the batch is made on this side); compressed, into m_batch, from which LZ4 writes the message.
    const uint64_t firstSequence = m_sequence + 1;
    const size_t rawBytes = count * sizeof(wire::EventRecord);
    auto renumber = [this](wire::EventRecord& r) noexcept {
        r.sequence = ++m_sequence;
        r.timeNs = realtimeOf(r.timeNs);
    };
    wire::BatchHeader header {};
    header.magic = wire::Magic;
    header.version = wire::ProtocolVersion;
    header.flags = uint16_t(wire::BatchFlags::None);
    header.count = uint32_t(count);
    header.firstSequence = firstSequence;
    zmq_msg_t message;
    const bool observed = m_source.observed();
    if (observed) {
        // An observed allocator's records are completed (block sizes, stacks) before they are numbered; the
        // definitions of their stacks go out first.
        const size_t n = ring.pop(m_batch.data(), count, upTo);
        m_source.complete(m_batch.data(), n, *this);
        for (size_t i = 0; i < n; ++i)
            renumber(m_batch[i]);
    }
    if (!m_compress) {
        if (zmq_msg_init_size(&message, sizeof header + rawBytes) != 0)
            return false;
        auto* frame = static_cast<char*>(zmq_msg_data(&message));
        std::memcpy(frame, &header, sizeof header);
        if (observed)
            std::memcpy(frame + sizeof header, m_batch.data(), rawBytes);
        else
            ring.pop(reinterpret_cast<wire::EventRecord*>(frame + sizeof header), count, upTo, renumber);
    } else {
        if (!observed)
            ring.pop(m_batch.data(), count, upTo, renumber);
        m_rawBytes += rawBytes;
        const int packed = LZ4_compress_fast_extState(m_lz4State.data(), reinterpret_cast<const char*>(m_batch.data()),
                                                      m_packed.data(), int(rawBytes), int(m_packed.size()), 1);
        const bool compressed = packed > 0 && size_t(packed) < rawBytes;
        const size_t payload = compressed ? size_t(packed) : rawBytes; // incompressible: sent as it is
        if (zmq_msg_init_size(&message, sizeof header + payload) != 0)
            return false; // out of memory: these records are gone, a viewer sees the gap in the sequence
        header.flags = uint16_t(compressed ? wire::BatchFlags::Compressed : wire::BatchFlags::None);
        auto* frame = static_cast<char*>(zmq_msg_data(&message));
        std::memcpy(frame, &header, sizeof header);
        std::memcpy(frame + sizeof header, compressed ? m_packed.data() : reinterpret_cast<const char*>(m_batch.data()),
                    payload);
        m_sentBytes += payload;
    }
    zmq_send(m_pub, wire::EventsTopic, 1, ZMQ_SNDMORE);
    if (zmq_msg_send(&message, m_pub, 0) < 0)
        zmq_msg_close(&message);
    m_lastPublished.store(m_sequence, std::memory_order_release);
    return true;
}

void Publisher::sendFrame(const wire::EventRecord* records, size_t count)
{
    wire::BatchHeader header {};
    header.magic = wire::Magic;
    header.version = wire::ProtocolVersion;
    header.count = uint32_t(count);
    header.firstSequence = records[0].sequence;
    zmq_msg_t message;
    if (zmq_msg_init_size(&message, sizeof header + count * sizeof(wire::EventRecord)) != 0)
        return;
    auto* frame = static_cast<char*>(zmq_msg_data(&message));
    std::memcpy(frame, &header, sizeof header);
    std::memcpy(frame + sizeof header, records, count * sizeof(wire::EventRecord));
    zmq_send(m_pub, wire::EventsTopic, 1, ZMQ_SNDMORE);
    if (zmq_msg_send(&message, m_pub, 0) < 0)
        zmq_msg_close(&message);
    m_lastPublished.store(records[count - 1].sequence, std::memory_order_release);
}

void Publisher::answerZap()
{
    for (;;) {
        std::vector<std::string> request;
        for (;;) {
            zmq_msg_t msg;
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, m_zap, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&msg);
                break;
            }
            request.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
            const bool more = zmq_msg_more(&msg);
            zmq_msg_close(&msg);
            if (!more)
                break;
        }
        if (request.empty())
            return;
        std::string why;
        const std::string status = zapDecision(request, m_clientKeys, &why);
        // RFC 27 reply: version, request id, status code, status text, user id, metadata.
        const std::string requestId = request.size() > 1 ? request[1] : std::string();
        const std::string frames[] = { "1.0", requestId, status, why, status == "200" ? "memscope-viewer" : "", "" };
        for (size_t i = 0; i < 6; ++i)
            zmq_send(m_zap, frames[i].data(), frames[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
        if (status == "200")
            m_curveAccepted.fetch_add(1, std::memory_order_relaxed);
        else
            m_curveRefused.fetch_add(1, std::memory_order_relaxed);
    }
}

void Publisher::answerRequests()
{
    // Requests are collected, not answered one by one: every requester waiting when a state is taken gets that same
    // state, one message shared by reference (zmq_msg_copy), and beyond a burst states are taken at most every
    // MinStateIntervalMs.
    // So the job's memory and CPU do not grow with the number of viewers asking (or with peers that ask and never
    // read: the ROUTER keeps at most RouterHwm replies per peer, and those share one buffer).
    for (;;) {
        std::vector<std::string> frames;
        for (;;) {
            zmq_msg_t msg;
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, m_router, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&msg);
                break;
            }
            const char* data = static_cast<const char*>(zmq_msg_data(&msg));
            if (frames.size() < 4) // identity [, empty delimiter], request: anything longer is not ours
                frames.emplace_back(data, data + zmq_msg_size(&msg));
            const bool more = zmq_msg_more(&msg);
            zmq_msg_close(&msg);
            if (!more)
                break;
        }
        if (frames.empty())
            break;
        if (frames.size() < 2 || frames.back().size() != sizeof(wire::Request))
            continue;
        wire::Request request;
        std::memcpy(&request, frames.back().data(), sizeof request);
        if (request.magic != wire::Magic || request.version != wire::ProtocolVersion
            || request.type != uint16_t(wire::RequestType::State))
            continue;
        frames.pop_back(); // the routing frames stay: identity [, delimiter]
        if (std::find(m_stateRequesters.begin(), m_stateRequesters.end(), frames) != m_stateRequesters.end())
            continue; // asked twice before being answered: one answer
        if (m_stateRequesters.size() >= MaxStateRequesters) {
            ++m_stateRequestsDropped; // it asks again after its timeout
            continue;
        }
        m_stateRequesters.push_back(std::move(frames));
    }
    if (m_stateRequesters.empty())
        return;
    // A token bucket: a burst of StateBurst states at once (a viewer's retries after ZeroMQ's slow joiner, a few
    // viewers arriving together), then one per MinStateIntervalMs.
    const int64_t now = steadyNs();
    if (m_lastStateNs != 0)
        m_stateTokens = std::min(double(StateBurst),
                                 m_stateTokens + double(now - m_lastStateNs) / (double(MinStateIntervalMs) * 1e6));
    m_lastStateNs = now;
    if (m_stateTokens < 1.0)
        return; // the run loop comes back, and the bucket has refilled a little
    m_stateTokens -= 1.0;
    ++m_statesTaken;

    // The state is the allocator's after the records each ring holds at that moment: publish exactly those,
    // then the state is the one after the last sequence given.
    std::vector<uint64_t> written(m_channels.size());
    std::vector<EventRing*> rings;
    for (const auto& c : m_channels)
        rings.push_back(&c->ring);
    std::vector<SegmentInfo> segments;
    if (!m_source.takeState(rings, segments, written)) {
        m_stateRequesters.clear(); // they ask again
        return;
    }
    drain(written.data());
    m_source.stateSent(segments);
    // A viewer that joins late missed the definitions of stacks interned before it subscribed (it subscribes
    // before it asks, docs/protocol.md): send them again, ahead of the state and of any later record.
    resendStacks();
    m_source.resendStacks(*this);
    sendSettings();
    const uint64_t lastSequence = m_sequence;

    wire::Hello hello {};
    hello.magic = wire::Magic;
    hello.version = wire::ProtocolVersion;
    hello.deviceCount = uint16_t(m_source.deviceCount());
    hello.pid = uint32_t(::getpid());
    hello.clockBaseNs = m_clockBaseNs;
    char host[sizeof hello.host] = {};
    ::gethostname(host, sizeof host - 1);
    copyString(hello.host, sizeof hello.host, host);
    copyString(hello.agentVersion, sizeof hello.agentVersion, MEMSCOPE_AGENT_VERSION);

    wire::StateHeader state {};
    state.lastSequence = lastSequence;
    state.segmentCount = uint32_t(segments.size());
    for (const SegmentInfo& s : segments)
        state.blockCount += uint32_t(s.blocks.size());

    zmq_msg_t reply;
    const size_t bytes = sizeof hello + sizeof state + segments.size() * sizeof(wire::SegmentRecord)
        + size_t(state.blockCount) * sizeof(wire::BlockRecord);
    if (zmq_msg_init_size(&reply, bytes) != 0) {
        m_stateRequesters.clear(); // no memory now: they ask again
        return;
    }
    char* out = static_cast<char*>(zmq_msg_data(&reply));
    auto put = [&out](const auto& value) {
        std::memcpy(out, &value, sizeof value);
        out += sizeof value;
    };
    put(hello);
    put(state);
    for (const SegmentInfo& s : segments) {
        wire::SegmentRecord r {};
        r.address = s.address;
        r.size = s.totalSize;
        r.stream = raw(s.stream);
        r.poolFirst = int32_t(s.pool.first);
        r.poolSecond = int32_t(s.pool.second);
        r.device = uint8_t(s.device);
        r.isExpandable = s.isExpandable;
        r.isSmall = !s.isLarge;
        put(r);
    }
    for (const SegmentInfo& s : segments) {
        for (const BlockInfo& b : s.blocks) {
            wire::BlockRecord r {};
            r.address = b.address;
            r.size = b.size;
            r.requestedSize = b.requestedSize;
            r.stream = raw(s.stream);
            r.device = uint8_t(s.device);
            r.state = b.allocated ? 1 : (b.active ? 2 : 0);
            r.stackId = b.stackId; // its Alloc's stack (sent again just before this reply)
            put(r);
        }
    }
    for (const std::vector<std::string>& routing : m_stateRequesters) {
        zmq_msg_t copy;
        zmq_msg_init(&copy);
        zmq_msg_copy(&copy, &reply); // shares the buffer
        for (const std::string& frame : routing)
            zmq_send(m_router, frame.data(), frame.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        if (zmq_msg_send(&copy, m_router, ZMQ_DONTWAIT) < 0)
            zmq_msg_close(&copy); // that peer's queue is full: it asked and does not read
    }
    zmq_msg_close(&reply);
    m_stateRequesters.clear();
}

void Publisher::run()
{
    pthread_setname_np(pthread_self(), "memscope-pub");
    m_threadId.store(std::this_thread::get_id());
    if (m_compress || m_source.observed())
        m_batch.assign(MaxBatchRecords, wire::EventRecord {});
    if (m_compress) {
        m_packed.resize(size_t(LZ4_compressBound(int(MaxBatchRecords * sizeof(wire::EventRecord)))));
        m_lz4State.resize(size_t(LZ4_sizeofState()));
    }
    // A first tick rate over >= 10 ms (refined at every heartbeat check) before any record leaves.
    if (m_useTsc) {
        const uint64_t since = realtimeNs() - m_clockBaseNs;
        if (since < 10000000u)
            std::this_thread::sleep_for(std::chrono::nanoseconds(10000000u - since));
        calibrate();
    }
    if (m_source.observed())
        takeBaseline();
    m_settingsLines = m_source.settings();
    sendSettings(); // to the viewers already there; a later one gets them with its state
    auto lastCalibration = std::chrono::steady_clock::now();
    auto lastSettings = lastCalibration;
    auto lastSend = std::chrono::steady_clock::now();

    zmq_pollitem_t items[] = { { m_router, 0, ZMQ_POLLIN, 0 }, { m_zap, 0, ZMQ_POLLIN, 0 } };
    const int polled = m_zap ? 2 : 1;
    while (!m_stopRequested.load(std::memory_order_acquire)) {
        if (zmq_poll(items, polled, long(m_options.drainIntervalMs)) > 0) {
            if (polled > 1 && (items[1].revents & ZMQ_POLLIN))
                answerZap();
            if (items[0].revents & ZMQ_POLLIN)
                answerRequests();
        }
        if (!m_stateRequesters.empty())
            answerRequests(); // requests held back by MinStateIntervalMs
        const auto now = std::chrono::steady_clock::now();
        if (now - lastCalibration >= std::chrono::milliseconds(m_options.heartbeatIntervalMs)) {
            calibrate();
            lastCalibration = now;
        }
        sendNotes();
        // The settings again every second: a viewer whose subscription took effect just after they went out with
        // its state (ZeroMQ's slow joiner, docs/protocol.md) has them a second later.
        if (now - lastSettings >= std::chrono::seconds(1)) {
            sendSettings();
            lastSettings = now;
        }
        if (drain()) {
            lastSend = now;
        } else if (now - lastSend >= std::chrono::milliseconds(m_options.heartbeatIntervalMs)) {
            sendHeartbeat();
            lastSend = now;
        }
    }
    if (!m_forked.load()) {
        sendNotes();
        drain();
        wire::Goodbye goodbye {};
        goodbye.magic = wire::Magic;
        goodbye.version = wire::ProtocolVersion;
        goodbye.lastSequence = m_lastPublished.load();
        goodbye.lost = lost();
        zmq_send(m_pub, wire::GoodbyeTopic, 1, ZMQ_SNDMORE);
        zmq_send(m_pub, &goodbye, sizeof goodbye, 0);
    }
    // Whatever stop() still waits for (less a margin to finish) may go to flushing what is queued for a slow
    // viewer; at least LingerMs for the Goodbye.
    const int64_t left = m_stopDeadlineNs.load() - steadyNs();
    const int linger = std::max<int>(LingerMs, int(std::min<int64_t>(left / 1000000 - 50, 60000)));
    zmq_setsockopt(m_pub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(m_pub);
    zmq_close(m_router);
    if (m_zap)
        zmq_close(m_zap);
    if (!m_forked.load())
        removeOwnSockets(); // a clean exit leaves no socket file to look like a dead job
    zmq_ctx_term(m_context); // waits up to `linger` for the batches and the Goodbye to leave
    {
        std::lock_guard lock(m_doneMutex);
        m_done = true;
    }
    m_doneCv.notify_all();
}

void Publisher::takeBaseline()
{
    // What the observed allocator held before we started is in this first state; the records the rings took
    // meanwhile are in it too and never go out.
    std::vector<uint64_t> written(m_channels.size());
    std::vector<EventRing*> rings;
    for (const auto& c : m_channels)
        rings.push_back(&c->ring);
    std::vector<SegmentInfo> state;
    if (!m_source.takeState(rings, state, written))
        return; // records go out as they are; a viewer's state request retries
    for (size_t d = 0; d < m_channels.size(); ++d) {
        for (;;) {
            const size_t n = m_channels[d]->ring.pop(m_batch.data(), MaxBatchRecords, written[d]);
            if (n == 0)
                break;
            m_source.discard(m_batch.data(), n);
        }
    }
    m_source.stateSent(state);
}

void Publisher::stop(unsigned maxWaitMs)
{
    if (m_forked.load())
        return;
    m_enabled.store(false, std::memory_order_relaxed); // nothing more goes into the ring
    if (!m_running.exchange(false))
        return;
    m_stopDeadlineNs.store(steadyNs() + int64_t(maxWaitMs) * 1000000);
    m_stopRequested.store(true, std::memory_order_release);
    std::unique_lock lock(m_doneMutex);
    const bool done = m_doneCv.wait_for(lock, std::chrono::milliseconds(maxWaitMs), [this] { return m_done; });
    lock.unlock();
    if (done && m_thread.joinable())
        m_thread.join();
}

void Publisher::removeOwnSockets()
{
    // Only the very files bound here: a path since taken by another run of the job stays.
    for (const OwnSocket& own : m_ownSockets) {
        struct stat st {};
        if (::lstat(own.path.c_str(), &st) == 0 && st.st_ino == own.inode && st.st_uid == ::geteuid())
            ::unlink(own.path.c_str());
    }
    m_ownSockets.clear();
}

void Publisher::disableAfterFork()
{
    m_forked.store(true);
    m_enabled.store(false);
    m_running.store(false);
}

} // namespace memscope::agent
