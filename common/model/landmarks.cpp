// Landmarks and moments of a trace. See landmarks.h.
#include "model/landmarks.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <utility>

namespace memscope::model {

int64_t stateIndexAtTime(const Trace& trace, int64_t timeUs)
{
    auto it = std::lower_bound(trace.begin(), trace.end(), timeUs,
                               [](const TraceEntry& entry, int64_t t) { return entry.timeUs < t; });
    if (it == trace.begin())
        return 0;
    return std::min<int64_t>(int64_t(it - trace.begin()) + 1, int64_t(trace.size()));
}

namespace {

    // The first entry at or after `timeUs` (std::lower_bound's answer), searched from `hint` outwards in doubling
    // steps, then by halves: O(log distance), and the entries read lie near the hint (a binary search over 20 M
    // entries of 64 bytes misses the cache at nearly every step).
    size_t lowerBoundFrom(const Trace& trace, int64_t timeUs, size_t hint)
    {
        const size_t n = trace.size();
        auto before = [&](size_t i) { return trace[i].timeUs < timeUs; };
        hint = std::min(hint, n);
        size_t lo = 0, hi = n; // the answer lies in [lo, hi]
        if (hint < n && before(hint)) {
            lo = hint + 1;
            for (size_t step = 1;; step *= 2) {
                const size_t probe = lo + step - 1;
                if (probe >= n)
                    break;
                if (!before(probe)) {
                    hi = probe;
                    break;
                }
                lo = probe + 1;
            }
        } else {
            hi = hint;
            for (size_t step = 1;; step *= 2) {
                if (step > hi)
                    break;
                const size_t probe = hi - step;
                if (before(probe)) {
                    lo = probe + 1;
                    break;
                }
                hi = probe;
            }
        }
        auto it = std::lower_bound(trace.begin() + std::ptrdiff_t(lo), trace.begin() + std::ptrdiff_t(hi), timeUs,
                                   [](const TraceEntry& entry, int64_t t) { return entry.timeUs < t; });
        return size_t(it - trace.begin());
    }

} // namespace

AnnotationTracker::Change AnnotationTracker::update(const Snapshot& snapshot, int64_t limit)
{
    static const Trace none;
    const Trace& trace = m_device >= 0 && size_t(m_device) < snapshot.deviceTraces.size()
        ? snapshot.deviceTraces[size_t(m_device)]
        : none;
    limit = std::clamp<int64_t>(limit, 0, int64_t(trace.size()));
    // stateIndexAtTime() clamped to `limit`, and whether it can still change as the trace grows (no entry at or after
    // the time yet, or clamped).
    auto resolve = [&](int64_t timeUs, bool& known) {
        const size_t first = lowerBoundFrom(trace, timeUs, m_hint);
        m_hint = first;
        const int64_t state = first == 0 ? 0 : std::min<int64_t>(int64_t(first) + 1, int64_t(trace.size()));
        known = first < trace.size() && state <= limit;
        return std::min(state, limit);
    };
    const size_t before = m_ranges.size();
    std::vector<uint32_t> changed; // ranges (creation order) whose indices changed

    // Indices not known at the last update. A range whose times lie past the trace's end stays at its end, so its
    // indices change at every growth, but not its place among the others (all such ranges begin there).
    std::vector<uint32_t> pending;
    for (const uint32_t sequence : m_pending) {
        AnnotationRange& r = m_ranges[m_position[sequence]];
        uint8_t& unknown = m_unknown[sequence];
        const int64_t begin = r.begin, end = r.end;
        bool known = true;
        if (unknown & BeginUnknown) {
            r.begin = resolve(r.beginUs, known);
            if (known)
                unknown &= uint8_t(~BeginUnknown);
            if (!r.closed)
                r.end = r.begin; // an open range ends where it begins
        }
        if ((unknown & EndUnknown) && r.closed) {
            r.end = resolve(r.endUs, known);
            if (known)
                unknown &= uint8_t(~EndUnknown);
        }
        if (r.begin != begin || r.end != end)
            changed.push_back(sequence);
        if (unknown)
            pending.push_back(sequence);
    }
    m_pending = std::move(pending);

    // Annotations added since.
    for (; m_read < snapshot.annotations.size(); ++m_read) {
        const Annotation& a = snapshot.annotations[m_read];
        if (a.device != m_device)
            continue;
        const std::string_view name = snapshot.str(a.name);
        if (a.stage == Annotation::Stage::Start) {
            AnnotationRange range;
            range.name = std::string(name);
            range.beginUs = range.endUs = a.timeUs;
            bool known = true;
            range.begin = range.end = resolve(a.timeUs, known);
            const auto sequence = uint32_t(m_position.size());
            m_position.push_back(uint32_t(m_ranges.size()));
            m_sequence.push_back(sequence);
            m_unknown.push_back(known ? 0 : BeginUnknown);
            if (!known)
                m_pending.push_back(sequence);
            m_open[range.name].push_back(sequence);
            m_ranges.push_back(std::move(range));
        } else if (a.stage == Annotation::Stage::End) {
            // Paired with the latest open START of the same name (record_function nests).
            auto open = m_open.find(std::string(name));
            if (open == m_open.end() || open->second.empty())
                continue;
            const uint32_t sequence = open->second.back();
            open->second.pop_back();
            if (open->second.empty())
                m_open.erase(open); // a job that names each step's range anew would keep one entry per step
            AnnotationRange& r = m_ranges[m_position[sequence]];
            bool known = true;
            r.endUs = a.timeUs;
            r.end = resolve(a.timeUs, known);
            r.closed = true;
            changed.push_back(sequence);
            if (!known) {
                if (!m_unknown[sequence])
                    m_pending.push_back(sequence);
                m_unknown[sequence] |= EndUnknown;
            }
        }
    }

    // Still sorted by (begin, sequence)? The array is if every neighbouring pair is, and only pairs with a new range or
    // one whose begin changed can be out of order. If one is, it is sorted again from there (or from where a newcomer
    // that begins earlier belongs).
    auto key = [&](size_t i) { return std::pair(m_ranges[i].begin, m_sequence[i]); };
    auto outOfOrder = [&](size_t i) { // i and its left neighbour
        return i > 0 && i < m_ranges.size() && key(i) < key(i - 1);
    };
    size_t from = m_ranges.size();
    for (const uint32_t sequence : changed) {
        const size_t i = m_position[sequence];
        if (i < before && (outOfOrder(i) || outOfOrder(i + 1)))
            from = std::min(from, i);
    }
    for (size_t i = before; i < m_ranges.size(); ++i)
        if (outOfOrder(i)) {
            from = std::min(from, before);
            break;
        }
    if (from < m_ranges.size()) {
        auto smallest = key(from);
        for (size_t i = from + 1; i < m_ranges.size(); ++i)
            smallest = std::min(smallest, key(i));
        while (from > 0 && smallest < key(from - 1))
            --from; // rare: annotations out of time order
        std::vector<size_t> order(m_ranges.size() - from);
        for (size_t i = 0; i < order.size(); ++i)
            order[i] = from + i;
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
        std::vector<AnnotationRange> ranges;
        std::vector<uint32_t> sequences;
        ranges.reserve(order.size());
        sequences.reserve(order.size());
        for (size_t i : order) {
            ranges.push_back(std::move(m_ranges[i]));
            sequences.push_back(m_sequence[i]);
        }
        for (size_t i = 0; i < order.size(); ++i) {
            m_ranges[from + i] = std::move(ranges[i]);
            m_sequence[from + i] = sequences[i];
            m_position[sequences[i]] = uint32_t(from + i);
        }
    }

    Change change;
    change.from = std::min(from, before);
    for (uint32_t sequence : changed)
        if (m_position[sequence] < change.from)
            change.changed.push_back(m_position[sequence]);
    std::sort(change.changed.begin(), change.changed.end());
    change.changed.erase(std::unique(change.changed.begin(), change.changed.end()), change.changed.end());
    return change;
}

std::vector<AnnotationRange> annotationRanges(const Snapshot& snapshot, int device)
{
    AnnotationTracker tracker(device);
    tracker.update(snapshot, INT64_MAX);
    return std::move(tracker).takeRanges();
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

std::vector<int64_t> oomEntries(const Trace& trace, size_t from)
{
    std::vector<int64_t> out;
    for (size_t i = from; i < trace.size(); ++i)
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
    const bool traced = size_t(device) < snapshot.deviceTraces.size();
    return openingMoment(snapshot, replay,
                         traced ? oomEntries(snapshot.deviceTraces[size_t(device)]) : std::vector<int64_t> {});
}

ResolvedMoment openingMoment(const Snapshot& snapshot, const Replay& replay, std::span<const int64_t> ooms)
{
    const int device = replay.device();
    if (size_t(device) < snapshot.deviceTraces.size()) {
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
