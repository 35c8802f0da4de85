// The what-if replay. See whatif.h.
#include "whatif.h"

#include "agent/allocator.h"
#include "agent/config.h"
#include "agent/hostbackend.h"
#include "diffcommand.h"
#include "io/snapshotio.h"
#include "model/snapshot.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

namespace memscope {

namespace {

    // Use streams of record_stream, as the exact replay numbers them: far from any real cudaStream_t value.
    constexpr uintptr_t UseStreamBase = uintptr_t(0x5eed) << 48;

    // The keys of PYTORCH_CUDA_ALLOC_CONF that change the caching allocator's decisions (c10/cuda/
    // CUDAAllocatorConfig.h and c10/core/AllocatorConfig.h name them); the others concern pinned memory, other
    // backends or locking.
    const char* const DecisionKeys[] = { "expandable_segments", "max_split_size_mb", "max_non_split_rounding_mb",
                                         "garbage_collection_threshold", "roundup_power2_divisions" };

    // Applies one "key:value" over `config`; returns why not ("" when applied).
    std::string applySetting(agent::AllocatorConfig& config, const std::string& setting)
    {
        const size_t colon = setting.find(':');
        if (colon == std::string::npos || colon == 0)
            return "'" + setting + "' is not KEY:VALUE (as in PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True)";
        const std::string key = setting.substr(0, colon);
        if (std::find(std::begin(DecisionKeys), std::end(DecisionKeys), key) == std::end(DecisionKeys))
            return "'" + key + "' is not a setting that changes the allocator's decisions (one of expandable_segments, "
                   "max_split_size_mb, max_non_split_rounding_mb, garbage_collection_threshold, "
                   "roundup_power2_divisions)";
        const agent::ConfigParse p = agent::parseAllocatorConfig(setting);
        if (!p.ok)
            return "'" + setting + "': " + p.error;
        if (key == "expandable_segments")
            config.expandableSegments = p.config.expandableSegments;
        else if (key == "max_split_size_mb")
            config.maxSplitSize = p.config.maxSplitSize;
        else if (key == "max_non_split_rounding_mb")
            config.maxNonSplitRoundingSize = p.config.maxNonSplitRoundingSize;
        else if (key == "garbage_collection_threshold")
            config.garbageCollectionThreshold = p.config.garbageCollectionThreshold;
        else
            config.roundupPower2Divisions = p.config.roundupPower2Divisions;
        return {};
    }

    // The file's settings as the allocator's config: its PYTORCH_CUDA_ALLOC_CONF when it parses (the parsed
    // values the file reports agree with it in every file seen), else PyTorch's defaults.
    agent::AllocatorConfig originalConfig(const std::string& text, std::string& problem)
    {
        if (text.empty())
            return {};
        const agent::ConfigParse p = agent::parseAllocatorConfig(text);
        if (!p.ok)
            problem = "its PYTORCH_CUDA_ALLOC_CONF '" + text + "' does not parse: " + p.error;
        return p.ok ? p.config : agent::AllocatorConfig {};
    }

    // Makes the job's calls again under `config`; `memory`: the device's bytes (0: the backend's default).
    // `until`: stops before the first call that ended after that trace entry; `state`: then takes the allocator's
    // segments; `curve`: keeps a point after every call.
    MemoryOutcome run(const std::vector<JobCall>& calls, int device, const agent::AllocatorConfig& config, size_t cap,
                      size_t memory, bool curve = false, size_t until = SIZE_MAX,
                      std::vector<WhatIfSegment>* state = nullptr)
    {
        agent::HostBackend::Options o;
        o.deviceCount = device + 1;
        o.scripted = true; // made-up segment addresses, no host memory behind them
        o.completeEventsImmediately = false; // a record_stream use completes where the job's did
        o.madeUpDescending = true; // each new segment below the last, as CUDA places them
        if (memory)
            o.capacity = memory;
        agent::HostBackend backend(o);
        agent::CachingAllocator allocator(backend, config);
        if (cap)
            allocator.setMemoryLimit(device, cap);

        MemoryOutcome out;
        out.keepCurve = curve;
        std::vector<uintptr_t> where; // per block: its address now (0: not held)
        PoolWindows windows(allocator, device);
        size_t request = 0;
        for (const JobCall& c : calls) {
            if (c.entry > until && c.kind != JobCall::Kind::CompleteUse)
                break;
            switch (c.kind) {
            case JobCall::Kind::Malloc: {
                const agent::MallocResult r = allocator.malloc(device, c.size, agent::StreamId { c.stream });

                if (r.status == agent::Status::Ok) {
                    if (c.failed) {
                        allocator.free(device, r.ptr); // the job never held it
                    } else {
                        if (where.size() <= c.block)
                            where.resize(size_t(c.block) + 1, 0);
                        where[c.block] = raw(r.ptr);
                    }
                } else {
                    out.ooms.push_back({ request, c.entry, c.size });
                }
                ++request;
                break;
            }
            case JobCall::Kind::Free:
            case JobCall::Kind::RecordUse: {
                if (c.block >= where.size() || !where[c.block])
                    break; // its Malloc failed here
                const agent::DevicePtr ptr { where[c.block] };
                if (c.kind == JobCall::Kind::RecordUse) {
                    allocator.recordStream(device, ptr, agent::StreamId { UseStreamBase + c.use });
                } else {
                    allocator.free(device, ptr);
                    where[c.block] = 0;
                }
                break;
            }
            case JobCall::Kind::CompleteUse:
                backend.completeStream(device, agent::StreamId { UseStreamBase + c.use });
                break;
            case JobCall::Kind::EmptyCache:
                allocator.emptyCache(device);
                break;
            case JobCall::Kind::PoolStreamBegin:
                windows.begin(c.poolFirst, c.poolSecond, c.stream);
                break;
            case JobCall::Kind::PoolStreamEnd:
                windows.end(c.poolFirst, c.poolSecond, c.stream);
                break;
            case JobCall::Kind::ReleasePool:
                windows.release(c.poolFirst, c.poolSecond);
                break;
            }
            watchOutcome(allocator, device, out, c.entry);
        }
        finishOutcome(allocator, device, out);
        if (state) {
            for (const agent::SegmentInfo& seg : allocator.snapshot(device)) {
                WhatIfSegment w { seg.address, seg.totalSize, seg.isLarge, seg.isExpandable, {} };
                for (const agent::BlockInfo& b : seg.blocks)
                    w.blocks.push_back({ b.address, b.size, b.allocated, b.active });
                state->push_back(std::move(w));
            }
        }
        return out;
    }

    std::string grouped(size_t n)
    {
        std::string digits = std::to_string(n), out;
        for (size_t i = 0; i < digits.size(); ++i) {
            if (i && (digits.size() - i) % 3 == 0)
                out += ',';
            out += digits[i];
        }
        return out;
    }

    std::string bytes(size_t n) { return grouped(n) + " B (" + agent::formatSize(n) + ")"; }

    std::string change(size_t before, size_t after)
    {
        if (before == after)
            return "the same";
        const double pct = before ? 100.0 * (double(after) - double(before)) / double(before) : 0.0;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%+.1f %%", pct);
        return buf;
    }

    std::set<size_t> requestsOf(const MemoryOutcome& o)
    {
        std::set<size_t> s;
        for (const auto& oom : o.ooms)
            s.insert(oom.request);
        return s;
    }

    nlohmann::json outcomeJson(const MemoryOutcome& o, const std::string& settings, size_t cap)
    {
        nlohmann::json ooms = nlohmann::json::array();
        for (const auto& oom : o.ooms)
            ooms.push_back({ { "request", oom.request }, { "entry", oom.entry }, { "size_bytes", oom.size } });
        return {
            { "settings", settings },
            { "memory_limit_bytes", cap },
            { "peak_reserved_bytes", o.peakReserved },
            { "peak_allocated_bytes", o.peakAllocated },
            { "allocated_at_peak_bytes", o.allocatedAtPeak },
            { "fragmentation_at_peak_bytes", o.peakReserved - std::min(o.peakReserved, o.allocatedAtPeak) },
            { "largest_free_block_at_peak_bytes", o.largestFreeAtPeak },
            { "device_allocations", o.deviceAllocs },
            { "segments_at_end", o.segmentsAtEnd },
            { "oom_count", o.ooms.size() },
            { "ooms", ooms },
        };
    }

} // namespace

WhatIfResult whatIf(const model::Snapshot& snapshot, const WhatIfOptions& options)
{
    AllocatorReplayOptions original = options.original;
    original.curves = original.curves || options.curves;
    return whatIf(recoverJob(snapshot, original), options);
}

namespace {

    // The settings of `options` over the job's own; empty when they apply, else why not.
    std::string configsOf(const RecoveredJob& job, const WhatIfOptions& options, agent::AllocatorConfig& base,
                          agent::AllocatorConfig& config, std::string* newSettings)
    {
        std::string problem;
        base = originalConfig(job.settings, problem);
        if (!problem.empty())
            return problem;
        config = base;
        std::string settings = job.settings;
        for (const std::string& s : options.sets) {
            if (std::string why = applySetting(config, s); !why.empty())
                return why;
            settings += (settings.empty() ? "" : ",") + s;
        }
        if (newSettings)
            *newSettings = settings;
        return {};
    }

    std::string notExact(const RecoveredJob& job)
    {
        if (job.devices.empty())
            return "it has no allocator trace to replay";
        for (const RecoveredDevice& d : job.devices) {
            if (!d.exact)
                return "memscope's allocator does not replay device " + std::to_string(d.device)
                    + "'s trace exactly, so it cannot tell what other settings would change (allocator-replay: "
                    + d.why + ")";
        }
        return {};
    }

} // namespace

std::vector<WhatIfSegment> whatIfStateAt(const RecoveredJob& job, const WhatIfOptions& options, int device, size_t entry,
                                         std::string* error)
{
    std::vector<WhatIfSegment> state;
    agent::AllocatorConfig base, config;
    std::string why = configsOf(job, options, base, config, nullptr);
    if (why.empty())
        why = notExact(job);
    for (const RecoveredDevice& d : job.devices) {
        if (why.empty() && d.device == device)
            run(d.calls, d.device, config, options.cap ? *options.cap : job.memoryLimit,
                options.original.deviceMemory, false, entry, &state);
    }
    if (error)
        *error = why;
    return state;
}

WhatIfResult whatIf(const RecoveredJob& job, const WhatIfOptions& options)
{
    WhatIfResult result;
    result.originalSettings = job.settings;
    result.originalCap = job.memoryLimit;
    result.originalCapInferred = job.memoryLimitInferred;
    result.cap = options.cap ? *options.cap : job.memoryLimit;

    agent::AllocatorConfig base, config;
    result.error = configsOf(job, options, base, config, &result.newSettings);
    if (result.error.empty())
        result.error = notExact(job);
    if (!result.error.empty())
        return result;
    for (const RecoveredDevice& d : job.devices) {
        WhatIfDevice w;
        w.device = d.device;
        w.original = d.original;
        for (const JobCall& c : d.calls)
            w.requests += c.kind == JobCall::Kind::Malloc;
        w.baseline = run(d.calls, d.device, base, job.memoryLimit, options.original.deviceMemory);
        w.replayed = run(d.calls, d.device, config, result.cap, options.original.deviceMemory, options.curves);
        w.firstChangedOom = w.requests;
        const std::set<size_t> before = requestsOf(w.original), after = requestsOf(w.replayed);
        for (size_t q : before)
            if (!after.count(q))
                w.firstChangedOom = std::min(w.firstChangedOom, q);
        for (size_t q : after)
            if (!before.count(q))
                w.firstChangedOom = std::min(w.firstChangedOom, q);
        result.devices.push_back(std::move(w));
    }
    result.ok = true;
    return result;
}

std::string whatIfText(const WhatIfResult& r, const std::string& name)
{
    auto settingsName = [](const std::string& s) { return s.empty() ? std::string("PyTorch's defaults") : s; };
    std::string out;
    out += name + ": the job's requests replayed under " + settingsName(r.newSettings) + ", against the file ("
        + settingsName(r.originalSettings) + ")";
    if (r.originalCap)
        out += "; memory cap " + bytes(r.originalCap)
            + (r.originalCapInferred ? " (not in the file: its peak reservation, which replays it exactly)" : "");
    if (r.cap != r.originalCap)
        out += "; the replay's cap " + (r.cap ? bytes(r.cap) : std::string("none"));
    out += "\n";
    for (const WhatIfDevice& d : r.devices) {
        char line[512];
        out += "device " + std::to_string(d.device) + ": " + grouped(d.requests) + " requests\n";
        auto row = [&](const char* what, size_t a, size_t b, bool withChange) {
            std::snprintf(line, sizeof line, "  %-30s %32s  %32s%s%s\n", what, bytes(a).c_str(), bytes(b).c_str(),
                          withChange ? "  " : "", withChange ? change(a, b).c_str() : "");
            out += line;
        };
        std::snprintf(line, sizeof line, "  %-30s %32s  %32s\n", "", "original", "what if");
        out += line;
        row("peak reserved", d.original.peakReserved, d.replayed.peakReserved, true);
        row("peak allocated", d.original.peakAllocated, d.replayed.peakAllocated, true);
        row("reserved - allocated at peak", d.original.peakReserved - std::min(d.original.peakReserved, d.original.allocatedAtPeak),
            d.replayed.peakReserved - std::min(d.replayed.peakReserved, d.replayed.allocatedAtPeak), true);
        row("largest free block at peak", d.original.largestFreeAtPeak, d.replayed.largestFreeAtPeak, false);
        std::snprintf(line, sizeof line, "  %-30s %32s  %32s\n", "cudaMalloc calls and maps",
                      grouped(d.original.deviceAllocs).c_str(), grouped(d.replayed.deviceAllocs).c_str());
        out += line;
        std::snprintf(line, sizeof line, "  %-30s %32s  %32s\n", "segments at the end",
                      grouped(d.original.segmentsAtEnd).c_str(), grouped(d.replayed.segmentsAtEnd).c_str());
        out += line;
        std::snprintf(line, sizeof line, "  %-30s %32s  %32s\n", "OOMs", grouped(d.original.ooms.size()).c_str(),
                      grouped(d.replayed.ooms.size()).c_str());
        out += line;
        const std::set<size_t> before = requestsOf(d.original), after = requestsOf(d.replayed);
        size_t gone = 0, kept = 0, added = 0;
        for (size_t q : before)
            (after.count(q) ? kept : gone)++;
        for (size_t q : after)
            added += !before.count(q);
        out += "  OOMs: " + grouped(gone) + " would not happen, " + grouped(kept) + " would still happen, "
            + grouped(added) + " would be new\n";
        for (const auto& oom : d.replayed.ooms) {
            if (!before.count(oom.request))
                out += "    new: request " + grouped(oom.request) + " (" + bytes(oom.size) + ", entry "
                    + grouped(oom.entry) + " of the file) would fail\n";
        }
        if (d.firstChangedOom < d.requests) {
            const bool avoided = before.count(d.firstChangedOom) != 0;
            out += "  exact up to request " + grouped(d.firstChangedOom) + ": there the job as recorded "
                + (avoided ? "met an OOM that would not happen" : "did not meet the OOM that would")
                + "; the requests after it are those of a job that "
                + (avoided ? "did" : "did not") + " and went on as it did\n";
        }
        // The error bar: the file's own settings replayed the same way.
        const bool calibrated = d.baseline.peakReserved == d.original.peakReserved
            && requestsOf(d.baseline) == before;
        if (!calibrated)
            out += "  note: under the file's own settings this replay gives a peak reserved of "
                + bytes(d.baseline.peakReserved) + " and " + grouped(d.baseline.ooms.size())
                + " OOMs (the file: " + bytes(d.original.peakReserved) + ", " + grouped(d.original.ooms.size())
                + "): segment addresses are made up here, and where PyTorch's choice between equal blocks went by "
                  "address the replay may choose otherwise\n";
    }
    out += "The requests are the job's as recorded; a job that reacts to an OOM (retries, smaller batches) would "
           "have asked differently after one.\n";
    return out;
}

std::string whatIfJson(const std::vector<WhatIfResult>& results, const std::string& file)
{
    nlohmann::json runs = nlohmann::json::array();
    for (const WhatIfResult& r : results) {
        nlohmann::json devices = nlohmann::json::array();
        for (const WhatIfDevice& d : r.devices) {
            nlohmann::json dev = {
                { "device", d.device },
                { "requests", d.requests },
                { "original", outcomeJson(d.original, r.originalSettings, r.originalCap) },
                { "baseline", outcomeJson(d.baseline, r.originalSettings, r.originalCap) },
                { "replayed", outcomeJson(d.replayed, r.newSettings, r.cap) },
                // null when no OOM changes: the whole replay stands on requests either run makes
                { "first_changed_oom_request",
                  d.firstChangedOom < d.requests ? nlohmann::json(d.firstChangedOom) : nlohmann::json(nullptr) },
            };
            devices.push_back(std::move(dev));
        }
        nlohmann::json run = {
            { "settings", r.newSettings },
            { "memory_limit_bytes", r.cap },
            { "devices", devices },
        };
        // The first device's pair at the top as well: what most files (one device) are asked for.
        if (!r.devices.empty()) {
            run["original"] = devices[0]["original"];
            run["replayed"] = devices[0]["replayed"];
        }
        runs.push_back(std::move(run));
    }
    nlohmann::json doc = {
        { "format", "memscope-whatif" },
        { "version", 1 },
        { "source", file },
        { "original_settings", results.empty() ? "" : results[0].originalSettings },
        { "original_memory_limit_bytes", results.empty() ? 0 : results[0].originalCap },
        { "original_memory_limit_inferred", !results.empty() && results[0].originalCapInferred },
        { "runs", runs },
    };
    return doc.dump(2) + "\n";
}

WhatIfOutput whatIfCommand(const std::vector<std::string>& args)
{
    WhatIfOutput out;
    constexpr const char* Usage
        = "usage: memscope-cli whatif SNAPSHOT --set KEY:VALUE [--set ...] [--sweep KEY:V1,V2,...] [--cap BYTES]\n"
          "       [--memory-limit BYTES] [--device-memory BYTES] [--format text|json]\n";
    auto usage = [&](const std::string& why) {
        out.exitCode = 2;
        out.err = "memscope-cli: " + why + "\n" + Usage;
        return out;
    };
    std::vector<std::string> files, sets;
    std::string sweepKey;
    std::vector<std::string> sweepValues;
    WhatIfOptions options;
    bool json = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
        if (a == "--set") {
            const std::string* v = value();
            if (!v)
                return usage("--set needs KEY:VALUE");
            sets.push_back(*v);
        } else if (a == "--sweep") {
            const std::string* v = value();
            const size_t colon = v ? v->find(':') : std::string::npos;
            if (!v || colon == std::string::npos || colon == 0 || colon + 1 >= v->size())
                return usage("--sweep needs KEY:V1,V2,... (e.g. max_split_size_mb:64,128,256)");
            sweepKey = v->substr(0, colon);
            std::string rest = v->substr(colon + 1);
            size_t start = 0;
            while (start <= rest.size()) {
                const size_t comma = rest.find(',', start);
                const std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
                if (item.empty())
                    return usage("--sweep has an empty value in '" + *v + "'");
                sweepValues.push_back(item);
                if (comma == std::string::npos)
                    break;
                start = comma + 1;
            }
        } else if (a == "--memory-limit" || a == "--device-memory" || a == "--cap") {
            const std::string* v = value();
            model::ByteCount n = 0;
            if (!v || !parseByteCount(*v, n) || n <= 0)
                return usage(a + " needs a positive byte count (e.g. 2684354560, 2.5GiB)");
            if (a == "--memory-limit")
                options.original.memoryLimit = size_t(n);
            else if (a == "--device-memory")
                options.original.deviceMemory = size_t(n);
            else
                options.cap = size_t(n);
        } else if (a == "--format") {
            const std::string* v = value();
            if (!v || (*v != "text" && *v != "json"))
                return usage("--format needs text or json");
            json = *v == "json";
        } else if (a.size() > 1 && a[0] == '-') {
            return usage("unknown option '" + a + "' for 'whatif'");
        } else {
            files.push_back(a);
        }
    }
    if (files.size() != 1)
        return usage("'whatif' needs exactly one SNAPSHOT");
    if (sets.empty() && sweepValues.empty() && !options.cap)
        return usage("'whatif' needs at least one --set, --sweep or --cap: what to change");
    io::LoadResult loaded = io::loadSnapshot(files[0]);
    if (!loaded.ok()) {
        out.exitCode = 1;
        out.err = "memscope-cli: " + loaded.error.toString() + "\n";
        return out;
    }
    std::vector<std::vector<std::string>> runs;
    if (sweepValues.empty()) {
        runs.push_back(sets);
    } else {
        for (const std::string& v : sweepValues) {
            runs.push_back(sets);
            runs.back().push_back(sweepKey + ":" + v);
        }
    }
    std::vector<WhatIfResult> results;
    for (const auto& runSets : runs) {
        options.sets = runSets;
        WhatIfResult r = whatIf(*loaded.snapshot, options);
        if (!r.ok) {
            out.exitCode = 1;
            out.err = "memscope-cli: " + files[0] + ": " + r.error + "\n";
            return out;
        }
        if (!json)
            out.out += (results.empty() ? "" : "\n") + whatIfText(r, files[0]);
        results.push_back(std::move(r));
    }
    if (json)
        out.out = whatIfJson(results, files[0]);
    return out;
}

int runWhatIf(const std::vector<std::string>& args)
{
    const WhatIfOutput r = whatIfCommand(args);
    std::fwrite(r.out.data(), 1, r.out.size(), stdout);
    std::fwrite(r.err.data(), 1, r.err.size(), stderr);
    std::fflush(stdout);
    return r.exitCode;
}

} // namespace memscope
