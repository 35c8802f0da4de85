// memscope-cli: the command-line face of the snapshot engine. `stats`, `trace`, `segments`, `memory` and
// `compare` print exactly what PyTorch's torch/cuda/_memory_viz.py prints; `info` summarises a snapshot;
// `convert` rewrites it as pickle or JSON, or exports it as SQLite or a Perfetto trace. Single-threaded.
//
// `memscope-cli --help` prints the whole usage, `memscope-cli COMMAND --help` that command's (CommandHelps),
// `--version` the project's version; a mistyped command gets one line with the nearest commands.
//
// Exit codes: 0 success, 1 a file could not be read or written (one line on stderr naming it and the reason),
// 2 a bad command line (usage on stderr), 3 `diff`: growth over --fail-if-growth. A file that loads with warnings
// (model/loadwarning.h: a field left out, blocks that do not tile, ...) gets one stderr line per kind of warning,
// "memscope-cli: FILE: warning: ...", and changes neither the exit status nor what goes to stdout.
#include "whatif/allocatorreplay.h"
#include "democommand.h"
#include "diffcommand.h"
#include "insightscommand.h"
#include "whatif/whatif.h"
#include "keygencommand.h"
#include "recordcommand.h"
#include "io/snapshotio.h"
#include "model/consistency.h"
#include "model/prefault.h"
#include "model/processmemory.h"
#include "model/replay.h"
#include "report/memoryviz.h"
#include "viewer/recorder.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

using namespace memscope;

namespace {

constexpr const char* Usage = R"(usage: memscope-cli COMMAND [OPTIONS] FILE...

Snapshot files are what torch.cuda.memory._dump_snapshot() writes (pickle), or the same as JSON; .xz compressed
files are read directly.

commands (output identical to python -m torch.cuda._memory_viz):
  stats FILE...        how the allocator has filled its segments (_memory_viz segsum)
  trace FILE...        the recorded allocation events, Python-style
  segments FILE...     folded stacks of the memory in each segment (flamegraph.pl input)
  memory FILE...       folded stacks of the memory per stream (flamegraph.pl input)
  compare BEFORE AFTER folded stacks of segments only in one of the two snapshots

commands of memscope:
  info FILE...         a summary: devices, segments, trace entries, time span, peak, truncation
  diff A[@INDEX] B[@INDEX] [--by stack|stack+size|segment] [--format text|json|folded|difffolded]
       [--top N] [--device N|all] [--fail-if-growth BYTES] [--growth-of active|allocated|reserved]
                       what changed from A to B (B - A): totals per device, pool and stream, segments only
                       in one, live allocations by call stack; @INDEX: the state after INDEX trace entries
                       (default: the end); exit status 3 when growth exceeds --fail-if-growth (docs/diff-json.md)
  insights FILE... [--format text|json] [--top N]   (or --diff A[@MOMENT] B[@MOMENT])
                       the peak's top call stacks and their share, leak suspects, record_stream stalls,
                       fragmentation and every OOM explained (in pieces, the cap, or the device full), each
                       with the entry to go to; with --diff, what grew
  record ENDPOINT -o FILE [--duration S] [--events N] [--timeout S] [--follow] [--max-memory MIB]
       [--curve-server-key FILE --curve-key FILE]
                       join a running job's memscope agent (its MEMSCOPE_ENDPOINT) and record its allocator
                       events until the job exits, a limit or Ctrl-C, as a snapshot (in the format of the
                       output's suffix, as convert); after a gap it resynchronises by itself (marked in the
                       trace); --follow records on across restarts of the job; past --max-memory (4096 MiB)
                       the recording so far goes to FILE's part1, part2, ...; CURVE: the agent's public key
                       file and our secret key file
  keygen NAME [--force]
                       a CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub; prints the public key
  demo [--endpoint E] [--events N] [--rate N] [--leak] [--delay MS]
                       a training-like workload through memscope's allocator (host backend), published like a
                       real job; prints its endpoint first, ends with a goodbye
  allocator-replay FILE [--memory-limit BYTES] [--device-memory BYTES]
                       replay the trace through memscope's caching allocator and check that it makes
                       PyTorch's decisions (same addresses, same final segments and blocks); the job's
                       memory cap (set_per_process_memory_fraction times the device's memory) and the
                       device's memory when the trace needs them (otherwise found from the trace)
  whatif FILE --set KEY:VALUE [--set ...] [--sweep KEY:V1,V2,...] [--cap BYTES] [--format text|json]
                       replay the job's requests under other allocator settings (PYTORCH_CUDA_ALLOC_CONF
                       syntax) or another memory cap: peak reserved, fragmentation at the peak, cudaMalloc
                       calls, and which OOMs would not happen, still happen or be new (docs/whatif.md)
  convert IN OUT [--format pickle|json|sqlite|perfetto]
                       rewrite a snapshot as a protocol-4 pickle (default) or JSON (default for *.json), or
                       export it as an SQLite database (default for *.sqlite, *.db; docs/sqlite.md) or as a
                       Perfetto / chrome://tracing timeline (default for *.trace.json; docs/perfetto.md)

options:
  -h, --help           this text
)";

// Each command's own help (`memscope-cli COMMAND --help`): its usage line and its options. diff and insights keep
// theirs beside their parsers (diffcommand.h, insightscommand.h). The whole usage (Usage, above) is the summary.
struct CommandHelp {
    const char* name;
    const char* text;
};

constexpr const char* FileNote = R"(
FILE: what torch.cuda.memory._dump_snapshot() writes (pickle), or the same as JSON; .xz compressed files are read
directly. Several FILEs: one report after the other.

options:
  -h, --help           this text
)";

const CommandHelp CommandHelps[] = {
    { "stats", R"(usage: memscope-cli stats FILE...

How the allocator has filled its segments, exactly as `python -m torch.cuda._memory_viz stats` (segsum) prints it.
)" },
    { "trace", R"(usage: memscope-cli trace FILE...

The recorded allocation events, Python-style, exactly as `python -m torch.cuda._memory_viz trace` prints them.
)" },
    { "segments", R"(usage: memscope-cli segments FILE...

Folded stacks of the memory in each segment (flamegraph.pl input), exactly as
`python -m torch.cuda._memory_viz segments` writes them before flamegraph.pl.
)" },
    { "memory", R"(usage: memscope-cli memory FILE...

Folded stacks of the memory per stream (flamegraph.pl input), exactly as `python -m torch.cuda._memory_viz memory`
writes them before flamegraph.pl.
)" },
    { "compare", R"(usage: memscope-cli compare BEFORE AFTER

Folded stacks of the segments only in one of the two snapshots, exactly as `python -m torch.cuda._memory_viz compare`
prints them. `memscope-cli diff` matches live allocations by call stack instead.

options:
  -h, --help           this text
)" },
    { "info", R"(usage: memscope-cli info FILE...

A summary: format, devices, segments and blocks, reserved, allocated and active bytes, streams, frames, annotations,
and per device the trace's entries, time span, peaks and whether it is complete or truncated.
)" },
    { "record", R"(usage: memscope-cli record ENDPOINT -o FILE [--duration S] [--events N] [--timeout S] [--follow]
       [--max-memory MIB] [--curve-server-key FILE --curve-key FILE]

Joins a running job's memscope agent (its MEMSCOPE_ENDPOINT: ipc://PATH or tcp://HOST:PORT) and records its
allocator events until the job exits, a limit or Ctrl-C (SIGTERM, SIGHUP), as a snapshot in the format of the
output's suffix (pickle; JSON for *.json; SQLite for *.sqlite, *.db; Perfetto for *.trace.json). After a gap it
resynchronises by itself (marked in the trace, counted in the file's memscope_recording key that info prints).

options:
  -o, --output FILE        the snapshot to write
  --duration S             stop after S seconds
  --events N               stop after N events
  --timeout S              give up when the agent's state reply takes longer (default 5)
  --follow                 record on across restarts of the job (a new run at the same endpoint)
  --max-memory MIB         past this much held in memory (default 4096), write the recording so far as a part
                           (job.pickle -> job.part1.pickle, ...) and go on from its state; FILE is the last part
  --curve-server-key FILE  CURVE: the agent's public key file
  --curve-key FILE         CURVE: our secret key file (memscope-cli keygen NAME writes one)
  -h, --help               this text
)" },
    { "keygen", R"(usage: memscope-cli keygen NAME [--force]

Writes a CURVE key pair, NAME.key (secret, mode 0600) and NAME.pub, and prints the public key.

options:
  --force              overwrite NAME.key and NAME.pub if they exist
  -h, --help           this text
)" },
    { "demo", R"(usage: memscope-cli demo [--endpoint E] [--events N] [--rate N] [--leak] [--no-stacks] [--delay MS]
       [--linger MS]

A training-like workload through memscope's allocator (host backend, no GPU needed), published like a real job;
prints its endpoint first, ends with a goodbye. With MEMSCOPE_DUMP_ON=exit it writes its final state to
MEMSCOPE_DUMP_PATH before saying goodbye, as an agent in a job does.

options:
  --endpoint E         where to publish (default ipc://$XDG_RUNTIME_DIR/memscope-<pid>)
  --events N           stop after about N allocator events (default 100000)
  --rate N             at most N events per second (default 20000; 0: unlimited)
  --leak               keep one small tensor per step (a leak to find)
  --no-stacks          publish no call stacks (by default every allocation carries Python-like frames)
  --delay MS           wait before the first step, for viewers to connect (default 1000)
  --linger MS          after the last step, stay this long before saying goodbye (default 0)
  -h, --help           this text
)" },
    { "allocator-replay", R"(usage: memscope-cli allocator-replay FILE [--memory-limit BYTES] [--device-memory BYTES]

Replays the trace through memscope's caching allocator and checks that it makes PyTorch's decisions: the same
address for every allocation, the same final segments and blocks.

options:
  --memory-limit BYTES   the job's memory cap (set_per_process_memory_fraction times the device's memory);
                         without it, a trace that shows a cap is replayed under its peak reservation
  --device-memory BYTES  the device's memory (otherwise estimated from where the trace's segments lie)
  -h, --help             this text
BYTES: a count, or with a unit: 80GiB, 512MiB, 1.5GB.
)" },
    { "whatif", R"(usage: memscope-cli whatif FILE --set KEY:VALUE [--set ...] [--sweep KEY:V1,V2,...] [--cap BYTES]
       [--memory-limit BYTES] [--device-memory BYTES] [--format text|json]

Replays the job's requests, recovered from the trace by allocator-replay's exact replay, through memscope's caching
allocator under other settings, and prints beside the file's own: peak reserved, peak allocated, reserved minus
allocated and the largest free block at the peak, cudaMalloc calls, and every OOM (would not happen, would still
happen, would be new). Only a trace that allocator-replay replays exactly gets an answer.

options:
  --set KEY:VALUE        a PYTORCH_CUDA_ALLOC_CONF setting over the file's own: expandable_segments,
                         max_split_size_mb, max_non_split_rounding_mb, garbage_collection_threshold,
                         roundup_power2_divisions; several allowed, applied in order
  --sweep KEY:V1,V2,...  one replay per value (with the --set ones)
  --cap BYTES            the replay's memory cap (default: the original's)
  --memory-limit BYTES   the cap the job ran under (set_per_process_memory_fraction times the device's memory);
                         without it, a trace that shows a cap is replayed under its peak reservation
  --device-memory BYTES  the device's memory
  --format text|json     text (default), or JSON (docs/whatif.md)
  -h, --help             this text
BYTES: a count, or with a unit: 80GiB, 512MiB, 1.5GB.
)" },
    { "convert", R"(usage: memscope-cli convert IN OUT [--format pickle|json|sqlite|perfetto]

Rewrites a snapshot as a protocol-4 pickle (as PyTorch's viewer wants) or as JSON, or exports it as an SQLite
database (docs/sqlite.md) or as a Perfetto / chrome://tracing timeline (docs/perfetto.md).

options:
  --format FORMAT        pickle, json, sqlite or perfetto (default by OUT's suffix: json for *.json, sqlite for
                         *.sqlite, *.sqlite3 and *.db, perfetto for *.trace.json and *.perfetto.json, else pickle)
  -h, --help             this text
)" },
    { "diff", nullptr }, // DiffUsage
    { "insights", nullptr }, // InsightsUsage
};

const CommandHelp* findCommand(std::string_view name)
{
    for (const CommandHelp& c : CommandHelps)
        if (name == c.name)
            return &c;
    return nullptr;
}

std::string commandHelp(const CommandHelp& c)
{
    if (std::strcmp(c.name, "diff") == 0)
        return DiffUsage;
    if (std::strcmp(c.name, "insights") == 0)
        return InsightsUsage;
    std::string text = c.text;
    // The commands that read snapshot files share what FILE may be.
    if (text.find("FILE...") != std::string::npos && text.find("\noptions:") == std::string::npos)
        text += FileNote;
    return text;
}

// The optimal string alignment distance (Levenshtein's plus the swap of two neighbours, as git's "did you mean"
// counts them: git's levenshtein.c): "stast" is one edit from "stats".
size_t editDistance(std::string_view a, std::string_view b)
{
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i)
        d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j)
        d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i)
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({ d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost });
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[a.size()][b.size()];
}

// The commands nearest to a mistyped one: within one edit (two from six letters on), or the only ones it begins.
std::vector<std::string> nearestCommands(std::string_view typed)
{
    const size_t limit = typed.size() >= 6 ? 2 : 1;
    size_t best = limit + 1;
    std::vector<std::string> nearest;
    for (const CommandHelp& c : CommandHelps) {
        const size_t d = editDistance(typed, c.name);
        if (d > limit)
            continue;
        if (d < best) {
            best = d;
            nearest.clear();
        }
        if (d == best)
            nearest.emplace_back(c.name);
    }
    if (nearest.empty() && typed.size() >= 3)
        for (const CommandHelp& c : CommandHelps)
            if (std::string_view(c.name).starts_with(typed))
                nearest.emplace_back(c.name);
    return nearest;
}

constexpr const char* UsageHint = "usage: memscope-cli COMMAND [OPTIONS] FILE... (memscope-cli --help lists the commands)\n";

// One line naming what was typed (and what was perhaps meant), one line of usage: not the whole usage.
int unknownCommand(const std::string& command)
{
    std::string line = (command.size() > 1 && command[0] == '-' ? "unknown option '" : "unknown command '")
        + command + "'";
    const std::vector<std::string> nearest = nearestCommands(command);
    for (size_t i = 0; i < nearest.size(); ++i)
        line += (i == 0 ? ": did you mean '" : i + 1 == nearest.size() ? " or '" : ", '") + nearest[i] + "'";
    if (!nearest.empty())
        line += '?';
    std::fprintf(stderr, "memscope-cli: %s\n%s", line.c_str(), UsageHint);
    return 2;
}

bool isHelp(const std::string& a) { return a == "-h" || a == "--help"; }

int usageError(const std::string& message)
{
    std::fprintf(stderr, "memscope-cli: %s\n\n%s", message.c_str(), Usage);
    return 2;
}

void printWarnings(const std::string& path, const std::vector<model::LoadWarning>& warnings)
{
    for (const model::LoadWarning& w : warnings)
        std::fprintf(stderr, "memscope-cli: %s\n", model::warningLine(path, w).c_str());
}

// `replaysFollow`: the caller builds the replays next, which fault in about as much memory as the file has bytes:
// warmed while the parse leaves the second core idle (model/prefault.h).
bool load(const std::string& path, std::shared_ptr<const model::Snapshot>& out, bool replaysFollow = false)
{
    model::WarmPages warm(replaysFollow ? model::WarmPages::sizeForFile(path) : 0);
    io::LoadResult r = io::loadSnapshot(path);
    warm.release();
    if (!r.ok()) {
        std::fprintf(stderr, "memscope-cli: %s\n", r.error.toString().c_str());
        return false;
    }
    printWarnings(path, r.snapshot->warnings);
    out = std::move(r.snapshot);
    return true;
}

bool writeAll(const std::string& text)
{
    return std::fwrite(text.data(), 1, text.size(), stdout) == text.size();
}

std::string humanBytes(int64_t bytes)
{
    return report::formatSize(static_cast<double>(bytes)) + " (" + std::to_string(bytes) + " B)";
}

// `replayWarnings` gets what the replays met that does not fit the final state (model::addReplayWarnings).
std::string info(const std::string& path, const model::Snapshot& s, std::vector<model::LoadWarning>& replayWarnings)
{
    model::WarningCollector replayIssues;
    const std::optional<viewer::RecordingInfo> recording = viewer::recordingInfoOf(s);
    std::string out = path + "\n";
    auto line = [&](const std::string& key, const std::string& value) { out += "  " + key + ": " + value + "\n"; };
    int64_t reserved = 0, allocated = 0, active = 0;
    for (const auto& seg : s.segments) {
        reserved += seg.totalSize;
        for (uint32_t i = 0; i < seg.blockCount; ++i) {
            const auto& b = s.blocks[seg.blockBegin + i];
            if (b.state == model::BlockState::ActiveAllocated)
                allocated += b.size;
            if (b.state != model::BlockState::Inactive)
                active += b.size;
        }
    }
    line("format", s.legacyTopLevelList ? "legacy (a bare list of segments)" : "snapshot dict");
    line("devices", std::to_string(s.deviceCount()));
    line("segments", std::to_string(s.segments.size()) + " (" + std::to_string(s.blocks.size()) + " blocks)");
    line("reserved", humanBytes(reserved));
    line("allocated", humanBytes(allocated));
    line("active", humanBytes(active));
    line("streams", std::to_string(s.streams.size()));
    line("frames", std::to_string(s.frames.size()) + " distinct, " + std::to_string(s.stackCount() - 1)
             + " distinct stacks");
    line("annotations", std::to_string(s.annotations.size()));
    for (size_t d = 0; d < s.deviceTraces.size(); ++d) {
        const auto& t = s.deviceTraces[d];
        std::string v = std::to_string(t.size()) + " entries";
        if (!t.empty()) {
            const double seconds = static_cast<double>(t.back().timeUs - t.front().timeUs) / 1e6;
            char buf[64];
            std::snprintf(buf, sizeof buf, ", %.3f s", seconds);
            v += buf;
            const model::Replay replay = model::Replay::build(s, static_cast<int>(d));
            model::addReplayWarnings(s, std::span(&replay, 1), replayIssues);
            const model::Peak allocatedPeak = replay.peakAllocated();
            v += ", peak allocated " + report::formatSize(double(allocatedPeak.bytes)) + " after "
                + std::to_string(allocatedPeak.index) + " entries, peak reserved "
                + report::formatSize(double(replay.peakReserved().bytes));
            const auto initial = replay.stateAt(0);
            const size_t liveBlocks = initial.allocations.size();
            if (!initial.segments.empty() || liveBlocks != 0)
            {
                v += "; truncated: " + std::to_string(initial.segments.size()) + " segments and "
                    + std::to_string(liveBlocks) + " blocks were alive before the first entry";
                // PyTorch says when its history ring overwrote older events (allocator_settings).
                const model::Value* overflowed
                    = s.allocatorSettings ? s.allocatorSettings->find("trace_alloc_overflowed") : nullptr;
                if (overflowed && (overflowed->kind == model::Value::Kind::Bool ? overflowed->boolean
                                                                                : overflowed->integer != 0)) {
                    const model::Value* max = s.allocatorSettings->find("trace_alloc_max_entries");
                    v += " (PyTorch's history overwrote its older events";
                    if (max && max->kind == model::Value::Kind::Int)
                        v += ": max_entries " + std::to_string(max->integer);
                    v += ")";
                }
            }
            else if (recording && !recording->complete())
                v += "; starts with no memory in use, but with holes: " + std::to_string(recording->missing)
                    + " records not received, " + std::to_string(recording->lost)
                    + " dropped by the agent (the \"memscope: resync\" annotations mark where)";
            else if (recording && !recording->endedWithTheJob())
                v += "; complete from its first record to its last (starts with no memory in use), but the job "
                     "ended without its goodbye: records after the last one received may be missing";
            else
                v += "; complete (starts with no memory in use)";
            if (replay.freeRequestedSkipped())
                v += "; recorded without free_requested entries (skip_actions): each free counts from its "
                     "completion";
        }
        line("trace device " + std::to_string(d), v);
    }
    if (!s.hasDeviceTraces || s.entryCount() == 0)
        line("trace", "none recorded (history was off)");
    // A memscope recording says where it came from (record, the app's Save, triggers, bounded history parts).
    if (recording) {
        std::string v = "from " + recording->endpoint + " (pid " + std::to_string(recording->pid) + " on "
            + recording->host + "), " + std::to_string(recording->events) + " events, "
            + std::to_string(recording->lost) + " lost, " + std::to_string(recording->missing) + " missing in "
            + std::to_string(recording->gaps) + " gaps, " + std::to_string(recording->resyncs) + " resyncs, "
            + std::to_string(recording->restarts) + " restarts";
        if (recording->part > 0)
            v += "; part " + std::to_string(recording->part) + " of a bounded history";
        if (!recording->ended.empty())
            v += "; ended: " + recording->ended;
        line("recording", v);
    }
    replayIssues.appendTo(replayWarnings);
    return out;
}

} // namespace

int main(int argc, char** argv)
{
    model::tuneProcessMemory(argv); // first: it may execute the program again (model/processmemory.h)
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty())
        return usageError("no command given");
    if (args.front() == "--version") {
        std::fputs("memscope-cli " MEMSCOPE_VERSION "\n", stdout);
        return 0;
    }
    if (isHelp(args.front())) {
        std::fputs(Usage, stdout);
        return 0;
    }
    const std::string command = args.front();
    args.erase(args.begin());
    const CommandHelp* known = findCommand(command);
    if (!known)
        return unknownCommand(command);
    // COMMAND --help (anywhere before a "--"): that command's help.
    for (const std::string& a : args) {
        if (a == "--")
            break;
        if (isHelp(a)) {
            std::fputs(commandHelp(*known).c_str(), stdout);
            return 0;
        }
    }

    if (command == "stats" || command == "trace" || command == "segments" || command == "memory"
        || command == "info") {
        if (args.empty())
            return usageError("'" + command + "' needs at least one FILE");
        for (const auto& a : args)
            if (a.size() > 1 && a[0] == '-')
                return usageError("unknown option '" + a + "' for '" + command + "'");
        int status = 0;
        for (const std::string& path : args) {
            std::shared_ptr<const model::Snapshot> s;
            if (!load(path, s, command == "info")) {
                status = 1;
                continue;
            }
            std::string text;
            std::vector<model::LoadWarning> replayWarnings;
            if (command == "stats")
                text = report::segsum(*s);
            else if (command == "trace")
                text = report::trace(*s);
            else if (command == "segments")
                text = report::segmentsFolded(*s);
            else if (command == "memory")
                text = report::memoryFolded(*s);
            else
                text = info(path, *s, replayWarnings);
            if (!writeAll(text)) {
                std::fprintf(stderr, "memscope-cli: cannot write to standard output\n");
                return 1;
            }
            std::fflush(stdout); // the replay's warnings come after the report they are about
            printWarnings(path, replayWarnings);
        }
        return status;
    }

    if (command == "allocator-replay")
        return runAllocatorReplay(args);
    if (command == "whatif")
        return runWhatIf(args);
    if (command == "diff")
        return runDiff(args);
    if (command == "insights")
        return runInsights(args);
    if (command == "record")
        return runRecord(args);
    if (command == "demo")
        return runDemo(args);
    if (command == "keygen")
        return runKeygen(args);

    if (command == "compare") {
        if (args.size() != 2)
            return usageError("'compare' needs exactly two files: BEFORE AFTER");
        std::shared_ptr<const model::Snapshot> before, after;
        if (!load(args[0], before) || !load(args[1], after))
            return 1;
        return writeAll(report::compareFolded(*before, *after)) ? 0 : 1;
    }

    if (command == "convert") {
        io::Format format = io::Format::Auto;
        std::vector<std::string> files;
        for (size_t i = 0; i < args.size(); ++i) {
            if (args[i] == "--format") {
                if (i + 1 >= args.size())
                    return usageError("--format needs a value: pickle, json, sqlite or perfetto");
                const std::string& f = args[++i];
                if (f == "pickle")
                    format = io::Format::Pickle;
                else if (f == "json")
                    format = io::Format::Json;
                else if (f == "sqlite")
                    format = io::Format::Sqlite;
                else if (f == "perfetto")
                    format = io::Format::Perfetto;
                else
                    return usageError("unknown format '" + f + "': use pickle, json, sqlite or perfetto");
            } else if (args[i].size() > 1 && args[i][0] == '-') {
                return usageError("unknown option '" + args[i] + "' for 'convert'");
            } else {
                files.push_back(args[i]);
            }
        }
        if (files.size() != 2)
            return usageError("'convert' needs exactly two files: IN OUT");
        std::shared_ptr<const model::Snapshot> s;
        if (!load(files[0], s))
            return 1;
        if (io::Error e = io::saveSnapshot(*s, files[1], format)) {
            std::fprintf(stderr, "memscope-cli: %s\n", e.toString().c_str());
            return 1;
        }
        return 0;
    }

    return usageError("unknown command '" + command + "'");
}
