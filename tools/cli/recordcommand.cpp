// The `record` command (recordcommand.h): a client::AgentClient (common/client: the Clone pattern of the ZeroMQ
// Guide, chapter 5, with resyncs and reconnection) feeding a viewer::Recorder, then the snapshot written out.
// This thread owns the client, its sockets and the Recorder; a part of a bounded recording is built and written on a
// thread of its own from the history the Recorder hands over.
#include "recordcommand.h"

#include "client/agentclient.h"
#include "io/snapshotio.h"
#include "io/sqlitewriter.h"
#include "viewer/recorder.h"
#include "wire/endpoint.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace memscope {

namespace {

using Clock = std::chrono::steady_clock;

// SIGINT (Ctrl-C, the way to end --follow), SIGTERM (a job scheduler, `timeout`) and SIGHUP (a closed terminal) all
// end the recording the same way: what was received is written, then the command exits.
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void onStopSignal(int signal) { g_interrupted = signal; }

// Whether a file can be created beside `path` (the folder exists and is writable, the disk takes a file): checked
// before recording, so that a typo in -o does not cost a whole job's recording. Empty, or why not.
std::string outputProblem(const std::string& path)
{
    std::string probe = path + ".tmp-XXXXXX";
    const int fd = ::mkostemp(probe.data(), O_CLOEXEC);
    if (fd < 0)
        return std::string("cannot create a file in its folder (") + std::strerror(errno) + ")";
    ::close(fd);
    ::unlink(probe.c_str());
    return {};
}

// Where the recording (or one part of it) goes when `path` cannot take it any more (the disk filled up, the folder
// went away while recording): the system's temporary folder, under the same file name with our pid in front.
std::string fallbackPath(const std::string& path)
{
    const char* tmp = std::getenv("TMPDIR");
    std::string folder = tmp && *tmp ? tmp : "/tmp";
    if (folder.back() != '/')
        folder += '/';
    const size_t slash = path.rfind('/');
    return folder + "memscope-recording-" + std::to_string(::getpid()) + "-"
        + (slash == std::string::npos ? path : path.substr(slash + 1));
}

// What one trace entry costs `record` until it is written: the Recorder's entry and, while writing, the snapshot
// built from it (measured with `memscope-cli demo` recorded at 2 M events/s: peak RSS grows ~210 B per event).
constexpr uint64_t BytesPerEntry = 210;
constexpr double DefaultMaxMemoryMiB = 4096; // as the app's live history (live/historyLimitMiB)

// The name of part `n` of a bounded recording to `output`: job.pickle -> job.part1.pickle (the suffix kept, so
// the format is the output's).
std::string partPath(const std::string& output, uint64_t n)
{
    const size_t slash = output.rfind('/');
    const size_t dot = output.find('.', slash == std::string::npos ? 0 : slash + 1);
    const std::string part = ".part" + std::to_string(n);
    return dot == std::string::npos ? output + part : output.substr(0, dot) + part + output.substr(dot);
}

struct Options {
    std::string endpoint;
    std::string output;
    double maxMemoryMiB = DefaultMaxMemoryMiB; // past it, the recording so far goes to a part file
    double duration = 0; // seconds; 0: no limit
    uint64_t events = 0; // 0: no limit
    double timeout = 5; // seconds to wait for the agent's state reply
    bool follow = false; // keep recording across job restarts
    std::string curveServerKey, curveKey;
};

bool parseNumber(const std::string& text, double& out)
{
char* end = nullptr;
out = std::strtod(text.c_str(), &end);
return !text.empty() && end && *end == '\0' && out > 0 && out < 1e9;
}

// The Recorder plus what `record` needs to know to stop: a goodbye, silence, a fatal error.
class RecordListener : public client::RecordingListener {
public:
    RecordListener(std::FILE* err, uint64_t eventLimit)
        : m_err(err)
        , m_eventLimit(eventLimit)
    {
    }
    void onEvents(std::span<const wire::EventRecord> events) override
    {
        if (m_eventLimit == 0) {
            recorder().addEvents(events);
            return;
        }
        // One record at a time, so that the recording stops at exactly --events entries.
        for (const wire::EventRecord& e : events) {
            if (recorder().stats().applied >= m_eventLimit)
                break;
            recorder().addEvents({ &e, 1 });
        }
    }
    void onState(const viewer::DecodedState& state, const client::StateChange& change) override
    {
        client::RecordingListener::onState(state, change);
        if (change.kind == client::StateKind::Restarted)
            std::fprintf(m_err, "memscope-cli: %s: the job restarted (pid %u, was %u); recording on\n",
                         m_endpoint.c_str(), state.hello.pid, change.previousPid);
    }
    void onGoodbye(const wire::Goodbye& goodbye) override
    {
        client::RecordingListener::onGoodbye(goodbye);
        goodbyes = true;
    }
    void onSilence(std::chrono::milliseconds) override { silent = true; }
    void onError(const client::ClientError& e) override
    {
        if (e.fatal) {
            fatal = e.message;
            fatalKind = e.kind;
        }
        else if (e.kind == client::ErrorKind::NoAnswer)
            noAnswer = e.message;
        else
            std::fprintf(m_err, "memscope-cli: warning: %s\n", e.message.c_str());
    }

    std::string m_endpoint;
    bool goodbyes = false, silent = false;
    std::string fatal, noAnswer;
    client::ErrorKind fatalKind = client::ErrorKind::Socket;

private:
    std::FILE* m_err;
    uint64_t m_eventLimit;
};

} // namespace

int runRecord(const std::vector<std::string>& args) { return runRecord(args, stdout, stderr); }

int runRecord(const std::vector<std::string>& args, std::FILE* out, std::FILE* err)
{
    auto usage = [&](const std::string& message) {
        std::fprintf(err,
                     "memscope-cli: %s\nusage: memscope-cli record ENDPOINT -o FILE [--duration S] [--events N] "
                     "[--timeout S] [--follow] [--max-memory MIB] [--curve-server-key FILE --curve-key FILE]\n",
                     message.c_str());
        return 2;
    };
    Options o;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&](std::string& v) {
            if (i + 1 >= args.size())
                return false;
            v = args[++i];
            return true;
        };
        std::string v;
        if (a == "-o" || a == "--output") {
            if (!value(o.output) || o.output.empty())
                return usage("-o needs a FILE");
        } else if (a == "--duration") {
            if (!value(v) || !parseNumber(v, o.duration))
                return usage("--duration needs a positive number of seconds");
        } else if (a == "--max-memory") {
            if (!value(v) || !parseNumber(v, o.maxMemoryMiB))
                return usage("--max-memory needs a positive number of MiB");
        } else if (a == "--timeout") {
            if (!value(v) || !parseNumber(v, o.timeout))
                return usage("--timeout needs a positive number of seconds");
        } else if (a == "--follow") {
            o.follow = true;
        } else if (a == "--curve-server-key") {
            if (!value(o.curveServerKey) || o.curveServerKey.empty())
                return usage("--curve-server-key needs a FILE (the agent's public key)");
        } else if (a == "--curve-key") {
            if (!value(o.curveKey) || o.curveKey.empty())
                return usage("--curve-key needs a FILE (our secret key, from memscope-cli keygen)");
        } else if (a == "--events") {
            double n = 0;
            if (!value(v) || !parseNumber(v, n) || n != double(uint64_t(n)))
                return usage("--events needs a positive whole number");
            o.events = uint64_t(n);
        } else if (a.size() > 1 && a[0] == '-') {
            return usage("unknown option '" + a + "' for 'record'");
        } else if (o.endpoint.empty()) {
            o.endpoint = a;
        } else {
            return usage("'record' takes one ENDPOINT, got '" + o.endpoint + "' and '" + a + "'");
        }
    }
    if (o.endpoint.empty())
        return usage("'record' needs an ENDPOINT (the job's MEMSCOPE_ENDPOINT, e.g. ipc:///tmp/memscope)");
    if (o.output.empty())
        return usage("'record' needs -o FILE");
    if (const std::string why = wire::endpointProblem(o.endpoint); !why.empty())
        return usage(o.endpoint + ": " + why);
    if (o.curveServerKey.empty() != o.curveKey.empty())
        return usage("--curve-server-key and --curve-key go together");

    if (const std::string problem = outputProblem(o.output); !problem.empty()) {
        std::fprintf(err, "memscope-cli: %s: %s; nothing was recorded\n", o.output.c_str(), problem.c_str());
        return 1;
    }

    client::ClientOptions options;
    options.endpoint = o.endpoint;
    options.answerTimeout = std::chrono::milliseconds(int64_t(o.timeout * 1000));
    options.curveServerKeyFile = o.curveServerKey;
    options.curveSecretKeyFile = o.curveKey;
    RecordListener listener(err, o.events);
    listener.m_endpoint = o.endpoint;
    viewer::Recorder& recorder = listener.recorder();
    client::AgentClient agent(options, listener);
    if (!agent.start()) {
        std::fprintf(err, "memscope-cli: %s\n", listener.fatal.c_str());
        return 1;
    }

    g_interrupted = 0;
    static constexpr int StopSignals[] = { SIGINT, SIGTERM, SIGHUP };
    struct sigaction action {}, previous[3] {};
    action.sa_handler = onStopSignal;
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < 3; ++i)
        ::sigaction(StopSignals[i], &action, &previous[i]);
    struct Restore {
        struct sigaction* previous;
        ~Restore()
        {
            for (int i = 0; i < 3; ++i)
                ::sigaction(StopSignals[i], &previous[i], nullptr);
        }
    } restore { previous };

    const char* stopReason = "";
    int status = 0;
    bool silent = false;
    // Records the agent dropped, its ring full, as far as we know: those its records and resyncs announced
    // (RecorderStats::lost), or its own count when its goodbye says more (RecorderStats::agentLost: drops after its
    // last record, which no record announces). Under --follow the goodbye counts its own run only, so the larger of
    // the two is a lower bound there.
    auto agentDropped = [&] { return recorder.stats().agentDropped(); };
    // What the recording says of itself (the snapshot's "memscope_recording"), as of now.
    auto recordingInfo = [&](int64_t part, const char* ended) {
        const viewer::RecorderStats& st = recorder.stats();
        viewer::RecordingInfo info;
        info.endpoint = o.endpoint;
        info.host = recorder.hello().host;
        info.pid = recorder.hello().pid;
        info.devices = recorder.hello().deviceCount;
        info.events = st.applied;
        info.lost = agentDropped();
        info.missing = st.missing;
        info.gaps = st.gaps;
        info.resyncs = st.resyncs;
        info.restarts = st.restarts;
        info.part = part;
        info.savedAtUs = int64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
        info.ended = ended;
        return viewer::recordingExtras(info);
    };
    // Writes `snapshot` to `path`, else (the disk filled up, the folder went away) to the temporary folder: the
    // path written, or empty when neither took it (the reasons are on `err`). Any thread: it sets `status` only
    // through the flag it is given.
    // `format`: a part of an SQLite output is written without its indexes (io::SaveOptions::sqliteIndexes), which
    // are added once reading is over.
    auto writeTo = [err](model::Snapshot& snapshot, const std::string& path, bool& failedOver,
                         const io::SaveOptions& format = {}) -> std::string {
        if (io::Error e = io::saveSnapshot(snapshot, path, format)) {
            // Never lose the recording: the temporary folder may still take it (saveSnapshot writes beside the
            // target and renames, so the target itself is never left half written).
            const std::string fallback = fallbackPath(path);
            if (io::Error again = io::saveSnapshot(snapshot, fallback, format)) {
                std::fprintf(err, "memscope-cli: %s\nmemscope-cli: %s\n", e.toString().c_str(),
                             again.toString().c_str());
                return {};
            }
            std::fprintf(err, "memscope-cli: %s; the recording was written to %s instead\n", e.toString().c_str(),
                         fallback.c_str());
            failedOver = true;
            return fallback;
        }
        return path;
    };
    auto writeOut = [&](model::Snapshot& snapshot, const std::string& path) {
        bool failedOver = false;
        std::string written = writeTo(snapshot, path, failedOver);
        if (failedOver)
            status = 1;
        return written;
    };
    // A part is built and written on a thread of its own while this one goes on reading: a job that ends meanwhile
    // (or floods) is not kept waiting on the snapshot or the disk; this thread only hands the Recorder's history
    // over (Recorder::takeHistory: a copy of the allocator state, the entries moved). One part at a time: the next
    // one waits for it. An SQLite part is written without its indexes, which cost the writer about as much as the
    // trace's rows: they are added to every part once reading is over (partsToIndex), when time no longer costs
    // records.
    struct PartWrite {
        std::thread thread;
        std::atomic<bool> done { false };
        uint64_t number = 0;
        std::string written;
        bool failedOver = false;
        uint64_t stalls = 0; // parts the reading waited for (a write slower than the job: the disk, the machine)
        Clock::duration stalled {};
        std::vector<std::string> partsToIndex; // SQLite parts written without their indexes
        ~PartWrite()
        {
            if (thread.joinable())
                thread.join();
        }
    } partWrite;
    // Waits for the part being written, reports it; false when it could not be written at all. `reading`: the
    // recording goes on, so a wait is a stall of the reading, counted.
    auto finishPart = [&](bool reading) -> bool {
        if (!partWrite.thread.joinable())
            return true;
        const bool stall = reading && !partWrite.done.load(std::memory_order_acquire);
        const Clock::time_point waitFrom = Clock::now();
        partWrite.thread.join();
        if (stall) {
            ++partWrite.stalls;
            partWrite.stalled += Clock::now() - waitFrom;
        }
        if (partWrite.failedOver)
            status = 1;
        if (partWrite.written.empty())
            return false;
        if (io::formatForPath(partWrite.written) == io::Format::Sqlite)
            partWrite.partsToIndex.push_back(partWrite.written);
        std::fprintf(err, "memscope-cli: %s: part %llu of the recording written to %s (--max-memory %g MiB)\n",
                     o.endpoint.c_str(), static_cast<unsigned long long>(partWrite.number), partWrite.written.c_str(),
                     o.maxMemoryMiB);
        return true;
    };
    // Bounded memory: past --max-memory the recording so far is written as a part, and goes on from its state.
    const uint64_t partEntries = std::max<uint64_t>(1000, uint64_t(o.maxMemoryMiB * 1048576.0) / BytesPerEntry);
    uint64_t parts = 0;
    const Clock::time_point start = Clock::now();
    const auto durationLimit = std::chrono::duration<double>(o.duration);
    for (;;) {
        if (g_interrupted) {
            stopReason = g_interrupted == SIGINT ? "interrupted" : g_interrupted == SIGTERM ? "terminated" : "hung up";
            break;
        }
        if (o.duration > 0 && Clock::now() - start >= durationLimit) {
            stopReason = "duration reached";
            break;
        }
        agent.poll(std::chrono::milliseconds(50));
        if (!listener.fatal.empty()) {
            std::fprintf(err, "memscope-cli: %s\n", listener.fatal.c_str());
            if (!agent.hasState())
                return 1;
            // What came before it is the job's: kept (the exit status still says the recording was cut short), and
            // the file says what stopped it.
            switch (listener.fatalKind) {
            case client::ErrorKind::Incompatible:
                stopReason = "stopped by an incompatible message";
                break;
            case client::ErrorKind::Untrusted:
                stopReason = "stopped: the endpoint's socket belongs to another user";
                break;
            default:
                stopReason = "stopped by an error at the endpoint";
                break;
            }
            status = 1;
            break;
        }
        if (!agent.hasState() && !listener.noAnswer.empty()) {
            std::fprintf(err, "memscope-cli: %s\n", listener.noAnswer.c_str());
            return 1;
        }
        if (agent.link() == client::Link::Gone && !agent.hasState()) {
            std::fprintf(err, "memscope-cli: %s: the job exited before answering the state request\n",
                         o.endpoint.c_str());
            return 1;
        }
        if (o.events > 0 && recorder.stats().applied >= o.events) {
            stopReason = "event limit reached";
            break;
        }
        if (partWrite.thread.joinable() && partWrite.done.load(std::memory_order_acquire) && !finishPart(true)) {
            stopReason = "a part could not be written";
            status = 1;
            break;
        }
        // A part that comes due while the previous one is still being written grows on (reading never waits for the
        // disk) up to twice its size; only past that, the disk slower than the job, does reading wait for the write.
        const bool writing = partWrite.thread.joinable() && !partWrite.done.load(std::memory_order_acquire);
        if (recorder.entryCount() >= (writing ? 2 * partEntries : partEntries) && agent.hasState()) {
            if (!finishPart(true)) {
                stopReason = "a part could not be written";
                status = 1;
                break;
            }
            const uint64_t n = parts + 1;
            partWrite.number = n;
            partWrite.written.clear();
            partWrite.failedOver = false;
            partWrite.done.store(false, std::memory_order_relaxed);
            parts = n;
            partWrite.thread
                = std::thread([&partWrite, &writeTo, path = partPath(o.output, n),
                               extras = recordingInfo(int64_t(n), ""), history = recorder.takeHistory()]() mutable {
                      model::Snapshot snapshot = history.snapshot();
                      history = {}; // its entries go back before the write
                      snapshot.topLevelExtras = std::move(extras);
                      io::SaveOptions unindexed;
                      unindexed.sqliteIndexes = false;
                      partWrite.written = writeTo(snapshot, path, partWrite.failedOver, unindexed);
                      partWrite.done.store(true, std::memory_order_release);
                  });
        }
        if (o.follow)
            continue; // a goodbye or silence waits for the job's next run
        if (listener.goodbyes) {
            stopReason = "the job said goodbye";
            break;
        }
        if (listener.silent && agent.link() == client::Link::Silent) {
            silent = true;
            stopReason = agent.silenceIsClosed() ? "the job's connection closed without a goodbye"
                                                 : "the agent went silent";
            break;
        }
    }
    if (!finishPart(false) && status == 0) {
        stopReason = "a part could not be written";
        status = 1;
    }
    if (partWrite.stalls > 0)
        std::fprintf(
            err,
            "memscope-cli: warning: %s: reading waited %lld ms in all for %llu parts still being written at "
            "twice their size (the disk or the machine slower than the job); records may have been missed "
            "meanwhile\n",
            o.endpoint.c_str(),
            static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(partWrite.stalled).count()),
            static_cast<unsigned long long>(partWrite.stalls));
    if (!agent.hasState()) {
        std::fprintf(err, "memscope-cli: %s: interrupted before the agent answered\n", o.endpoint.c_str());
        return 1;
    }
    agent.flush(); // records held for a fresh state that did not come: the Recorder applies what fits

    if (silent && agent.silenceIsClosed())
        std::fprintf(err,
                     "memscope-cli: warning: %s: the job's connection closed without a goodbye (it exited or was "
                     "killed); keeping what was received\n",
                     o.endpoint.c_str());
    else if (silent)
        std::fprintf(err,
                     "memscope-cli: warning: %s: the agent went silent (no goodbye, nothing for %lld s, the "
                     "connection still open: a hung or stopped job, or a publisher thread held up inside the job, "
                     "which the job's stderr names); keeping what was received\n",
                     o.endpoint.c_str(), static_cast<long long>(options.silenceLimit.count() / 1000));
    const viewer::RecorderStats& st = recorder.stats();
    if (st.resyncs > st.restarts)
        std::fprintf(err,
                     "memscope-cli: warning: %s: the recording missed allocator events and resynchronised %llu "
                     "times (%llu records not received, %llu lost by the agent); the trace marks each gap with a "
                     "\"memscope: resync\" annotation\n",
                     o.endpoint.c_str(), static_cast<unsigned long long>(st.resyncs - st.restarts),
                     static_cast<unsigned long long>(st.missing), static_cast<unsigned long long>(agentDropped()));
    if (st.resyncNeeded())
        std::fprintf(err,
                     "memscope-cli: warning: %s: the recording missed allocator events (%llu lost by the agent, %llu "
                     "sequence gaps, %llu events that did not fit); its trace is incomplete\n",
                     o.endpoint.c_str(), static_cast<unsigned long long>(agentDropped()),
                     static_cast<unsigned long long>(st.gaps), static_cast<unsigned long long>(st.inconsistent));
    else if (st.agentLost > st.lost)
        std::fprintf(err,
                     "memscope-cli: warning: %s: the agent dropped %llu records, its ring full (its goodbye's count; "
                     "%llu of them announced before); the recording's trace is incomplete\n",
                     o.endpoint.c_str(), static_cast<unsigned long long>(st.agentLost),
                     static_cast<unsigned long long>(st.lost));

    model::Snapshot snapshot = recorder.snapshot();
    snapshot.topLevelExtras = recordingInfo(parts > 0 ? int64_t(parts + 1) : 0, stopReason);
    const std::string written = writeOut(snapshot, o.output);
    // Reading is over: the SQLite parts get the indexes they were written without. One that cannot be indexed keeps
    // every row (a query scans instead of seeking); the recording is whole, so this is a warning only.
    for (const std::string& part : partWrite.partsToIndex)
        if (io::Error e = io::addSqliteIndexes(part))
            std::fprintf(err, "memscope-cli: warning: %s; its rows are all there\n", e.toString().c_str());
    if (written.empty())
        return 1;
    const wire::Hello& hello = recorder.hello();
    std::fprintf(out,
                 "%s: %llu events from pid %u on %s (%s), %zu segments, records %llu to %llu; lost %llu, gaps "
                 "%llu (%llu missing), inconsistent %llu, resyncs %llu (%llu restarts)%s; wrote %s%s\n",
                 o.endpoint.c_str(), static_cast<unsigned long long>(st.applied), hello.pid, hello.host, stopReason,
                 snapshot.segments.size(), static_cast<unsigned long long>(st.joinedAfter + 1),
                 static_cast<unsigned long long>(recorder.lastSequence()),
                 static_cast<unsigned long long>(agentDropped()), static_cast<unsigned long long>(st.gaps),
                 static_cast<unsigned long long>(st.missing), static_cast<unsigned long long>(st.inconsistent),
                 static_cast<unsigned long long>(st.resyncs), static_cast<unsigned long long>(st.restarts),
                 st.resyncNeeded() ? ", resync needed" : "", written.c_str(),
                 parts > 0 ? (" (the last part; parts 1 to " + std::to_string(parts) + " beside it)").c_str() : "");
    std::fflush(out);
    return status;
}

} // namespace memscope
