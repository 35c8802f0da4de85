// Landmarks and moments of a trace. See landmarks.h.
#include "model/landmarks.h"

#include <algorithm>
#include <array>
#include <charconv>

namespace memscope::model {

int64_t stateIndexAtTime(const Trace& trace, int64_t timeUs)
{
    auto it = std::lower_bound(trace.begin(), trace.end(), timeUs,
                               [](const TraceEntry& entry, int64_t t) { return entry.timeUs < t; });
    if (it == trace.begin())
        return 0;
    return std::min<int64_t>(int64_t(it - trace.begin()) + 1, int64_t(trace.size()));
}

std::vector<AnnotationRange> annotationRanges(const Snapshot& snapshot, int device)
{
    static const Trace none;
    const Trace& trace
        = device >= 0 && size_t(device) < snapshot.deviceTraces.size() ? snapshot.deviceTraces[size_t(device)] : none;
    std::vector<AnnotationRange> out;
    std::vector<size_t> open;
    for (const Annotation& a : snapshot.annotations) {
        if (a.device != device)
            continue;
        const std::string_view name = snapshot.str(a.name);
        if (a.stage == Annotation::Stage::Start) {
            AnnotationRange range;
            range.name = std::string(name);
            range.beginUs = range.endUs = a.timeUs;
            range.begin = range.end = stateIndexAtTime(trace, a.timeUs);
            open.push_back(out.size());
            out.push_back(std::move(range));
        } else if (a.stage == Annotation::Stage::End) {
            for (size_t k = open.size(); k-- > 0;) {
                AnnotationRange& r = out[open[k]];
                if (r.name == name) {
                    r.endUs = a.timeUs;
                    r.end = stateIndexAtTime(trace, a.timeUs);
                    r.closed = true;
                    open.erase(open.begin() + std::ptrdiff_t(k));
                    break;
                }
            }
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    return out;
}

bool isCompilerAnnotation(std::string_view name)
{
    // The record_function names torch.compile's own layers open (PyTorch 2.x: torch/_dynamo/eval_frame.py and
    // convert_frame.py, torch/_functorch/_aot_autograd/runtime_wrappers.py, torch/_inductor/output_code.py
    // CompiledFxGraph.__call__), as profiler traces of compiled models show them.
    static constexpr std::array<std::string_view, 6> Prefixes {
        "Torch-Compiled Region", "TorchDynamo ", "CompiledFunction", "AOTDispatcher ", "Pregraph bytecode", "## ",
    };
    return std::any_of(Prefixes.begin(), Prefixes.end(), [&](std::string_view p) { return name.starts_with(p); });
}

std::vector<int64_t> oomEntries(const Trace& trace)
{
    std::vector<int64_t> out;
    for (size_t i = 0; i < trace.size(); ++i)
        if (trace[i].action == Action::Oom)
            out.push_back(int64_t(i));
    return out;
}

AllocationId largestAllocation(const Replay& replay)
{
    const auto& all = replay.allocations();
    AllocationId best = NoAllocation;
    for (size_t i = 0; i < all.size(); ++i) {
        const Allocation& a = all[i];
        if (best == NoAllocation) {
            best = AllocationId(uint32_t(i));
            continue;
        }
        const Allocation& b = replay.allocation(best);
        if (a.size > b.size || (a.size == b.size && a.requestedSize > b.requestedSize))
            best = AllocationId(uint32_t(i));
    }
    return best;
}

namespace {

    bool parseInt(std::string_view text, int64_t& out)
    {
        if (text.empty() || text.size() > 18)
            return false;
        const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
        return r.ec == std::errc {} && r.ptr == text.data() + text.size() && out >= 0;
    }

    // "oom", "oom3", "oom-3", "oom:3" -> 3 (1 without a number).
    bool parseOom(std::string_view text, int64_t& which)
    {
        if (!text.starts_with("oom"))
            return false;
        text.remove_prefix(3);
        if (text.empty()) {
            which = 1;
            return true;
        }
        if (text.front() == '-' || text.front() == ':')
            text.remove_prefix(1);
        return parseInt(text, which) && which >= 1;
    }

} // namespace

std::optional<Moment> parseMoment(std::string_view text)
{
    if (text.empty())
        return std::nullopt;
    Moment m;
    int64_t n = 0;
    if (parseInt(text, n)) {
        m.kind = MomentKind::Index;
        m.number = n;
    } else if (text == "end") {
        m.kind = MomentKind::End;
    } else if (text == "peak" || text == "peak-allocated") {
        m.kind = MomentKind::PeakAllocated;
    } else if (text == "peak-reserved") {
        m.kind = MomentKind::PeakReserved;
    } else if (text == "largest") {
        m.kind = MomentKind::Largest;
    } else if (parseOom(text, n)) {
        m.kind = MomentKind::Oom;
        m.number = n;
    } else {
        m.kind = MomentKind::Annotation;
        m.name = std::string(text);
    }
    return m;
}

bool isMomentKeyword(std::string_view text)
{
    const auto m = parseMoment(text);
    return m && m->kind != MomentKind::Annotation;
}

std::string momentSpec(const Moment& moment)
{
    switch (moment.kind) {
    case MomentKind::Index:
        return std::to_string(moment.number);
    case MomentKind::End:
        return "end";
    case MomentKind::PeakAllocated:
        return "peak";
    case MomentKind::PeakReserved:
        return "peak-reserved";
    case MomentKind::Oom:
        return moment.number <= 1 ? std::string("oom") : "oom" + std::to_string(moment.number);
    case MomentKind::Largest:
        return "largest";
    case MomentKind::Annotation:
        return moment.name;
    case MomentKind::Count:
        break;
    }
    return {};
}

ResolvedMoment resolveMoment(const Moment& moment, const Snapshot& snapshot, const Replay& replay)
{
    ResolvedMoment r;
    const int64_t n = replay.entryCount();
    static const Trace none;
    const int device = replay.device();
    const Trace& trace = size_t(device) < snapshot.deviceTraces.size() ? snapshot.deviceTraces[size_t(device)] : none;
    auto fail = [&](std::string error) {
        r.error = std::move(error);
        return r;
    };
    auto done = [&](int64_t index, std::string why, ByteCount bytes = 0) {
        r.ok = true;
        r.index = std::clamp<int64_t>(index, 0, n);
        r.why = std::move(why);
        r.bytes = bytes;
        return r;
    };
    switch (moment.kind) {
    case MomentKind::Index:
        if (moment.number > n)
            return fail("index " + std::to_string(moment.number) + " is beyond the trace (" + std::to_string(n)
                        + " entries)");
        return done(moment.number, "state index " + std::to_string(moment.number));
    case MomentKind::End:
        return done(n, "the end of the trace");
    case MomentKind::PeakAllocated:
        if (n == 0)
            return fail("no trace recorded: no peak to go to");
        return done(replay.peakAllocated().index, "the peak of allocated bytes", replay.peakAllocated().bytes);
    case MomentKind::PeakReserved:
        if (n == 0)
            return fail("no trace recorded: no peak to go to");
        return done(replay.peakReserved().index, "the peak of reserved bytes", replay.peakReserved().bytes);
    case MomentKind::Oom: {
        // Entry indices of the trace are the replay's plus firstEntry (a trace longer than MaxReplayEntries).
        const std::vector<int64_t> ooms = oomEntries(trace);
        const int64_t which = std::max<int64_t>(1, moment.number);
        if (ooms.empty())
            return fail("the trace has no OOM");
        if (size_t(which) > ooms.size())
            return fail("the trace has " + std::to_string(ooms.size()) + " OOM" + (ooms.size() == 1 ? "" : "s")
                        + ", not " + std::to_string(which));
        const int64_t entry = ooms[size_t(which - 1)];
        return done(entry - replay.firstEntry() + 1,
                    "OOM " + std::to_string(which) + " of " + std::to_string(ooms.size()), trace[size_t(entry)].size);
    }
    case MomentKind::Largest: {
        const AllocationId id = largestAllocation(replay);
        if (id == NoAllocation)
            return fail("the trace has no allocation");
        const Allocation& a = replay.allocation(id);
        return done(a.allocIndex + 1, "the largest allocation", a.size);
    }
    case MomentKind::Annotation: {
        const auto ranges = annotationRanges(snapshot, device);
        auto find = [&](std::string_view name) {
            return std::find_if(ranges.begin(), ranges.end(), [&](const AnnotationRange& a) { return a.name == name; });
        };
        auto it = find(moment.name);
        bool atEnd = false;
        if (it == ranges.end() && moment.name.ends_with(":end")) {
            it = find(std::string_view(moment.name).substr(0, moment.name.size() - 4));
            atEnd = true;
        }
        if (it == ranges.end())
            return fail("no annotation named '" + moment.name
                        + "' (nor a number, end, peak, peak-reserved, oom or "
                          "largest)");
        return done(atEnd ? it->end : it->begin,
                    (atEnd ? "the end of annotation '" : "the start of annotation '") + it->name + "'");
    }
    case MomentKind::Count:
        break;
    }
    return fail("unknown moment");
}

ResolvedMoment openingMoment(const Snapshot& snapshot, const Replay& replay)
{
    const int device = replay.device();
    if (size_t(device) < snapshot.deviceTraces.size()) {
        const Trace& trace = snapshot.deviceTraces[size_t(device)];
        const std::vector<int64_t> ooms = oomEntries(trace);
        if (!ooms.empty() && ooms.front() >= replay.firstEntry()) {
            ResolvedMoment r = resolveMoment(Moment { MomentKind::Oom, 1, {} }, snapshot, replay);
            if (r.ok) {
                r.why = ooms.size() == 1 ? std::string("at the OOM")
                                         : "at the first of " + std::to_string(ooms.size()) + " OOMs";
                return r;
            }
        }
    }
    ResolvedMoment r = resolveMoment(Moment { MomentKind::End, 0, {} }, snapshot, replay);
    r.why = replay.entryCount() > 0 ? "at the end of the trace: no OOM in it" : "at the snapshot: no trace recorded";
    return r;
}

} // namespace memscope::model
