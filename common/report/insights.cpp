// Insights of snapshots and diffs. See insights.h.
#include "report/insights.h"

#include "model/framefilter.h"
#include "model/landmarks.h"
#include "report/memoryviz.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

namespace memscope::report {

using namespace memscope::model;

std::string_view insightKindName(InsightKind kind)
{
    switch (kind) {
    case InsightKind::Peak:
        return "peak";
    case InsightKind::TopConsumer:
        return "top-consumer";
    case InsightKind::Fragmentation:
        return "fragmentation";
    case InsightKind::Oom:
        return "oom";
    case InsightKind::LeakSuspect:
        return "leak-suspect";
    case InsightKind::LateSurvivor:
        return "late-survivor";
    case InsightKind::PendingFree:
        return "pending-free";
    case InsightKind::Growth:
        return "growth";
    case InsightKind::WhatIf:
        return "what-if";
    case InsightKind::Count:
        break;
    }
    return "unknown";
}

namespace {

    std::string size(ByteCount bytes) { return formatSize(double(bytes)); }
    std::string signedSize(ByteCount bytes) { return (bytes > 0 ? "+" : bytes < 0 ? "-" : "") + size(std::abs(bytes)); }
    std::string percent(double share)
    {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f%%", share * 100.0);
        return buf;
    }
    std::string plural(int64_t n, const char* one, const char* many)
    {
        return std::to_string(n) + " " + (n == 1 || n == -1 ? one : many);
    }

    // Library code: frames of PyTorch itself, installed packages and the interpreter, which say little about which
    // line of the user's program holds the memory.
    bool isLibraryFrame(std::string_view filename)
    {
        static constexpr std::string_view Markers[]
            = { "/torch/", "site-packages/", "dist-packages/", "<frozen", "/lib/python", "/torchinductor_" };
        if (filename.empty() || filename == "??")
            return true;
        return std::any_of(std::begin(Markers), std::end(Markers),
                           [&](std::string_view m) { return filename.find(m) != std::string_view::npos; });
    }

    // The frames of a stack a user sees, innermost first.
    std::vector<FrameId> shownFrames(const Snapshot& s, StackId stack, bool frameFilter)
    {
        std::vector<FrameId> out;
        for (const FrameId* f = s.stackBegin(stack); f != s.stackEnd(stack); ++f) {
            const Frame& fr = s.frame(*f);
            if (!frameFilter || keepFrame(s.str(fr.name), s.str(fr.filename)))
                out.push_back(*f);
        }
        return out;
    }

    // The site of a stack (model/framefilter.h) and what allocated there: the innermost Python frame below it
    // (torch.nn.functional's dropout, a library's forward) when the site is not that frame itself. (-1, -1) for an
    // empty stack.
    // A site as a label: a frame of Python code as basename:line:name; a native one (a stack without Python
    // frames: the autograd engine's) by its function alone, parameters and namespaces cut:
    // "AddmmBackward0 (autograd engine)", "div_Scalar (operator)".
    std::string siteText(const Snapshot& s, const Frame& f)
    {
        const std::string_view file = s.str(f.filename);
        if (!isNativeFrame(file))
            return displayFrame(s, f);
        std::string_view name = s.str(f.name);
        if (const size_t paren = name.find('('); paren != std::string_view::npos)
            name = name.substr(0, paren);
        const bool node = name.find("autograd::generated::") != std::string_view::npos;
        const bool op = name.starts_with("at::_ops::");
        for (std::string_view tail : { std::string_view("::apply"), std::string_view("::call") })
            if ((node || op) && name.ends_with(tail))
                name.remove_suffix(tail.size());
        if (const size_t colons = name.rfind("::"); (node || op) && colons != std::string_view::npos)
            name.remove_prefix(colons + 2);
        if (node)
            return std::string(name) + " (autograd engine)";
        if (op)
            return std::string(name) + " (operator)";
        return displayFrame(s, f);
    }

    std::pair<int, int> siteAndWhat(const Snapshot& s, StackId stack)
    {
        const int site = siteIndex(s, stack);
        return { site, site < 0 ? -1 : whatIndex(s, stack, site) };
    }

    std::string stackText(const Snapshot& s, StackId stack, const InsightOptions& options)
    {
        if (options.frameFilter && s.stackSize(stack) > 0) {
            // The site first, then the frames of the user's code and model libraries, outermost last; the
            // internal frames (native, the interpreter's, PyTorch's own Python) are counted, not listed.
            const auto [site, what] = siteAndWhat(s, stack);
            const FrameId* frames = s.stackBegin(stack);
            std::string out = "  at " + siteText(s, s.frame(frames[site]));
            if (what >= 0)
                out += " via " + displayFrame(s, s.frame(frames[what]));
            out += "\n";
            size_t shown = 0, more = 0, hidden = 0;
            for (uint32_t i = 0; i < s.stackSize(stack); ++i) {
                const Frame& f = s.frame(frames[i]);
                if (int(i) == site || isInternalFrame(s.str(f.name), s.str(f.filename))) {
                    hidden += int(i) != site;
                    continue;
                }
                if (shown < options.maxFrames) {
                    out += "  " + displayFrame(s, f) + "\n";
                    ++shown;
                } else {
                    ++more;
                }
            }
            if (more > 0)
                out += "  ... " + std::to_string(more) + " more frames\n";
            if (hidden > 0)
                out += "  (" + std::to_string(hidden) + " internal frames hidden)\n";
            return out;
        }
        const std::vector<FrameId> frames = shownFrames(s, stack, options.frameFilter);
        if (frames.empty())
            return s.stackSize(stack) == 0 ? "  (no stack recorded)\n" : "  (every frame hidden by the frame filter)\n";
        std::string out;
        for (size_t i = 0; i < frames.size() && i < options.maxFrames; ++i)
            out += "  " + displayFrame(s, s.frame(frames[i])) + "\n";
        if (frames.size() > options.maxFrames)
            out += "  ... " + std::to_string(frames.size() - options.maxFrames) + " more frames\n";
        return out;
    }

    // Stacks grouped as a user sees them: by their shown frames (frames are interned by content in a snapshot, so
    // equal frames have equal ids), one group id per distinct list, computed once per StackId.
    class StackGroups {
    public:
        StackGroups(const Snapshot& s, bool frameFilter)
            : m_snapshot(s)
            , m_filter(frameFilter)
            , m_group(s.stackCount(), UINT32_MAX)
        {
        }
        uint32_t group(StackId stack, StackId forward = EmptyStack)
        {
            if (forward == EmptyStack || !m_filter)
                return ownGroup(stack);
            // A backward allocation with its forward pass: grouped by its own label and the forward one's.
            auto [it, added] = m_withForward.emplace(std::make_pair(raw(stack), raw(forward)), 0u);
            if (!added)
                return it->second;
            std::vector<FrameId> key = keyOf(stack);
            key.push_back(FrameId { UINT32_MAX }); // between the two: no frame has this id
            const std::vector<FrameId> forwardKey = keyOf(forward);
            key.insert(key.end(), forwardKey.begin(), forwardKey.end());
            it->second = intern(std::move(key), stack, forward);
            return it->second;
        }
        StackId forward(uint32_t group) const { return m_forward[group]; }
        StackId representative(uint32_t group) const { return m_representative[group]; }
        size_t size() const { return m_representative.size(); }

    private:
        uint32_t ownGroup(StackId stack)
        {
            uint32_t& g = m_group[raw(stack)];
            if (g == UINT32_MAX)
                g = intern(keyOf(stack), stack, EmptyStack);
            return g;
        }
        // With the filter on, stacks group by what their label says (their site and what allocated there): two rows
        // never read the same.
        std::vector<FrameId> keyOf(StackId stack) const
        {
            std::vector<FrameId> key;
            if (m_filter && m_snapshot.stackSize(stack) > 0) {
                const auto [site, what] = siteAndWhat(m_snapshot, stack);
                key.push_back(m_snapshot.stackBegin(stack)[site]);
                if (what >= 0)
                    key.push_back(m_snapshot.stackBegin(stack)[what]);
            } else {
                key = shownFrames(m_snapshot, stack, m_filter);
            }
            return key;
        }
        uint32_t intern(std::vector<FrameId> key, StackId stack, StackId forward)
        {
            auto [it, added] = m_index.emplace(std::move(key), uint32_t(m_representative.size()));
            if (added) {
                m_representative.push_back(stack);
                m_forward.push_back(forward);
            }
            return it->second;
        }

        const Snapshot& m_snapshot;
        bool m_filter;
        std::vector<uint32_t> m_group;
        std::map<std::vector<FrameId>, uint32_t> m_index;
        std::vector<StackId> m_representative;
        std::vector<StackId> m_forward; // per group: its forward stack (EmptyStack: none)
        std::map<std::pair<uint32_t, uint32_t>, uint32_t> m_withForward; // (stack, forward) -> group
    };

    struct Settings {
        bool expandable = false;
        bool maxSplitSet = false;
        std::string conf;
    };

    Settings settingsOf(const Snapshot& s)
    {
        Settings out;
        if (!s.allocatorSettings)
            return out;
        if (const Value* v = s.allocatorSettings->find("expandable_segments"))
            out.expandable = v->kind == Value::Kind::Bool ? v->boolean : v->integer != 0;
        if (const Value* v = s.allocatorSettings->find("max_split_size"))
            out.maxSplitSet = v->kind == Value::Kind::Int && v->integer >= 0;
        if (const Value* v = s.allocatorSettings->find("PYTORCH_CUDA_ALLOC_CONF"); v && v->kind == Value::Kind::String)
            out.conf = v->text;
        return out;
    }

    // PyTorch's advice on fragmentation, quoted from its memory-management notes (docs/source/notes/cuda.rst,
    // "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF") and from the OOM message of
    // c10/cuda/CUDACachingAllocator.cpp ("If reserved but unallocated memory is large try setting
    // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."), offered only when not set already.
    std::string fragmentationAdvice(const Settings& settings)
    {
        std::string out;
        if (!settings.expandable)
            out += "PyTorch's advice: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets a segment grow instead of "
                   "needing one free block of the whole size (\"If reserved but unallocated memory is large try "
                   "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation\": the OOM "
                   "message, c10/cuda/CUDACachingAllocator.cpp).\n";
        if (!settings.maxSplitSet)
            out += "PyTorch's advice: max_split_size_mb:N \"prevents the native allocator from splitting blocks larger "
                   "than this size (in MB). This can reduce fragmentation and may allow some borderline workloads to "
                   "complete without running out of memory\" (docs/source/notes/cuda.rst, Memory management).\n";
        if (out.empty())
            out = "expandable_segments and max_split_size_mb are set already (" + settings.conf
                + "): what is left is a lower peak, or freeing long-lived blocks before large requests.\n";
        return out;
    }

    struct DeviceContext {
        const Snapshot& s;
        const Replay& replay;
        const InsightOptions& options;
        StackGroups& groups;
        int device;
        std::vector<Insight>& out;

        // The forward stack of an allocation's alloc entry (EmptyStack: none, or made before the trace).
        StackId forwardOf(const Allocation& a) const
        {
            if (s.forwardStacks.empty() || a.allocIndex < 0 || size_t(device) >= s.deviceTraces.size())
                return EmptyStack;
            const Trace& trace = s.deviceTraces[size_t(device)];
            const size_t k = size_t(replay.firstEntry() + a.allocIndex);
            return k < trace.size() ? s.forwardStack(trace[k]) : EmptyStack;
        }
        uint32_t groupOf(const Allocation& a) { return groups.group(a.stack, forwardOf(a)); }
        // An insight's stack and forward stack from its group.
        void setStacks(Insight& it, uint32_t group) const
        {
            it.stack = groups.representative(group);
            it.forwardStack = groups.forward(group);
        }
        std::string label(const Insight& it) const { return insightLabel(s, it, options.frameFilter); }
        std::string text(const Insight& it) const { return insightStackText(s, it, options); }
    };

    int64_t timeAt(const Trace& trace, int64_t entry)
    {
        return trace.empty() ? 0 : trace[size_t(std::clamp<int64_t>(entry, 0, int64_t(trace.size()) - 1))].timeUs;
    }

    void peakInsights(DeviceContext& c)
    {
        const Replay& replay = c.replay;
        const Peak peak = replay.peakAllocated();
        const ReplayState state = replay.stateAt(peak.index);
        const ReplaySeries& series = replay.series();
        const size_t at = size_t(peak.index);

        struct Group {
            ByteCount bytes = 0, requested = 0;
            int64_t count = 0;
            AllocationId largest = NoAllocation;
            ByteCount largestBytes = -1;
        };
        std::unordered_map<uint32_t, Group> byGroup;
        for (const ReplayBlock& b : state.blocks) {
            if (b.state != BlockState::ActiveAllocated) // the peak is of allocated bytes
                continue;
            Group& g = byGroup[c.groupOf(c.replay.allocation(b.allocation))];
            g.bytes += b.size;
            g.requested += b.requestedSize;
            ++g.count;
            if (b.size > g.largestBytes) {
                g.largestBytes = b.size;
                g.largest = b.allocation;
            }
        }
        std::vector<std::pair<uint32_t, Group>> sorted(byGroup.begin(), byGroup.end());
        std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
            return a.second.bytes != b.second.bytes ? a.second.bytes > b.second.bytes : a.first < b.first;
        });

        Insight head;
        head.kind = InsightKind::Peak;
        head.device = c.device;
        head.index = peak.index;
        head.bytes = peak.bytes;
        head.count = int64_t(state.allocations.size());
        if (!sorted.empty()) {
            head.allocation = sorted.front().second.largest;
            c.setStacks(head, sorted.front().first);
        }
        head.title = replay.entryCount() == 0
            ? "In the snapshot: " + size(peak.bytes) + " allocated (device " + std::to_string(c.device)
                + "; no trace recorded, so no peak over time)"
            : "Peak: " + size(peak.bytes) + " allocated at entry " + std::to_string(peak.index) + " of "
                + std::to_string(replay.entryCount()) + " (device " + std::to_string(c.device) + ")";
        head.detail = "allocated " + size(series.allocated[at]) + ", active " + size(series.active[at]) + ", reserved "
            + size(series.reserved[at]) + " in " + std::to_string(state.segments.size())
            + " segments; the most reserved at any time: " + size(replay.peakReserved().bytes) + " at entry "
            + std::to_string(replay.peakReserved().index) + "\n";
        c.out.push_back(std::move(head));

        for (size_t i = 0; i < sorted.size() && i < c.options.topConsumers; ++i) {
            const Group& g = sorted[i].second;
            Insight it;
            it.kind = InsightKind::TopConsumer;
            it.device = c.device;
            it.index = peak.index;
            it.allocation = g.largest;
            c.setStacks(it, sorted[i].first);
            it.bytes = g.bytes;
            it.count = g.count;
            it.requested = g.requested;
            it.share = peak.bytes > 0 ? double(g.bytes) / double(peak.bytes) : 0.0;
            it.title = percent(it.share) + " of the peak: " + size(g.bytes) + " in "
                + plural(g.count, "block", "blocks") + " from " + c.label(it);
            it.detail = c.text(it);
            c.out.push_back(std::move(it));
        }

        // Fragmentation at the peak: reserved bytes that back no active block.
        const ByteCount reserved = series.reserved[at], active = series.active[at];
        Insight f;
        f.kind = InsightKind::Fragmentation;
        f.device = c.device;
        f.index = peak.index;
        f.bytes = reserved - active;
        f.share = reserved > 0 ? double(reserved - active) / double(reserved) : 0.0;
        f.title = "At the peak, " + size(reserved - active) + " of " + size(reserved) + " reserved (" + percent(f.share)
            + ") held no tensor; the largest free block was " + size(largestInactive(state));
        f.detail = "reserved - active = " + std::to_string(reserved) + " - " + std::to_string(active) + " = "
            + std::to_string(reserved - active) + " B in " + std::to_string(state.segments.size()) + " segments.\n";
        if (f.share >= 0.25 && reserved - active >= (ByteCount(64) << 20))
            f.detail += fragmentationAdvice(settingsOf(c.s));
        c.out.push_back(std::move(f));
    }

    void oomInsights(DeviceContext& c)
    {
        const Trace& trace = c.s.deviceTraces[size_t(c.device)];
        const std::vector<int64_t> ooms = oomEntries(trace);
        if (ooms.empty())
            return;
        const ReplaySeries& series = c.replay.series();
        const Settings settings = settingsOf(c.s);
        size_t inPieces = 0, capped = 0, full = 0;
        for (size_t k = 0; k < ooms.size(); ++k) {
            const int64_t entry = ooms[k] - c.replay.firstEntry();
            if (entry < 0)
                continue;
            const TraceEntry& e = trace[size_t(ooms[k])];
            const size_t at = size_t(std::min<int64_t>(entry + 1, c.replay.entryCount()));
            const ByteCount request = e.size, rounded = estimatedBlockSize(e.size), deviceFree = e.addr;
            const ByteCount reserved = series.reserved[at], active = series.active[at];
            const ByteCount freeCached = reserved - active, largest = c.replay.largestFreeAt(int64_t(at));
            // The allocator gives up only after freeing its cached free segments and retrying
            // (CUDACachingAllocator.cpp malloc: release_cached_blocks, then the OOM trace entry), so what is
            // reserved but free at the OOM lies in segments that also hold live blocks.
            enum class Cause { Pieces, Cap, Full } cause;
            if (freeCached >= rounded && largest < rounded)
                cause = Cause::Pieces;
            else if (deviceFree >= rounded)
                cause = Cause::Cap;
            else
                cause = Cause::Full;
            (cause == Cause::Pieces ? inPieces : cause == Cause::Cap ? capped : full)++;
            if (k >= c.options.maxOoms)
                continue;
            Insight it;
            it.kind = InsightKind::Oom;
            it.device = c.device;
            it.index = int64_t(at);
            it.stack = e.stack;
            it.bytes = request;
            it.requested = request;
            // No allocation: the item is about the request that failed, which made none (a viewer shows the OOM
            // entry at `index`, its stack being `stack`).
            // The cause first (a narrow list shows the start), then the request and where it came from.
            const std::string where = "OOM " + std::to_string(k + 1) + " of " + std::to_string(ooms.size()) + ", entry "
                + std::to_string(ooms[k]) + ": ";
            it.forwardStack = c.s.forwardStack(e);
            const std::string what = "; " + size(request) + " requested from " + c.label(it);
            auto exact = [](ByteCount b) { return size(b) + " (" + std::to_string(b) + " B)"; };
            const std::string numbers = "requested " + exact(request) + ", a block of at least "
                + std::to_string(rounded) + " B; reserved " + exact(reserved) + ", active " + exact(active)
                + ", reserved but free " + exact(freeCached) + ", largest free block " + exact(largest)
                + "; free on the device " + exact(deviceFree) + " (the entry's device_free).\n";
            switch (cause) {
            case Cause::Pieces:
                it.title = where + "the memory was there but in pieces (" + size(freeCached)
                    + " reserved and free, the largest free block " + size(largest) + ")" + what;
                it.detail = numbers + fragmentationAdvice(settings);
                break;
            case Cause::Cap:
                it.title = where + "the process hit its memory cap, not the device (" + size(deviceFree)
                    + " free on the device, " + size(reserved) + " reserved)" + what;
                it.detail = numbers
                    + "The device had the bytes: the cap is torch.cuda.set_per_process_memory_fraction (the "
                      "allocator refuses to reserve past fraction x device memory; a snapshot does not record it). "
                      "Raise the fraction, or lower the peak.\n";
                if (freeCached >= rounded)
                    it.detail += fragmentationAdvice(settings);
                break;
            case Cause::Full:
                it.title = where + "the device was full (" + size(deviceFree) + " free on it, " + size(reserved)
                    + " reserved by this process)" + what;
                it.detail = numbers
                    + "Nothing cached could serve it: lower the peak (smaller batches, activation checkpointing, "
                      "freeing tensors earlier) or find what else uses the device.\n";
                break;
            }
            it.detail += c.text(it);
            c.out.push_back(std::move(it));
        }
        if (ooms.size() > c.options.maxOoms) {
            Insight it;
            it.kind = InsightKind::Oom;
            it.device = c.device;
            it.index = ooms[c.options.maxOoms] - c.replay.firstEntry() + 1;
            it.count = int64_t(ooms.size() - c.options.maxOoms);
            it.title = "All " + std::to_string(ooms.size()) + " OOMs: " + std::to_string(inPieces)
                + " with the memory there but in pieces, " + std::to_string(capped) + " at the process's cap, "
                + std::to_string(full) + " with the device full";
            it.detail = "Go > Next OOM steps through them.\n";
            c.out.push_back(std::move(it));
        }
    }

    // The family of a record_function name: the name without a trailing number ("step_3" -> "step_").
    std::string familyOf(const std::string& name)
    {
        size_t end = name.size();
        while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9')
            --end;
        return name.substr(0, end);
    }

    bool containsStep(const std::string& name)
    {
        std::string lower = name;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char ch) { return char(std::tolower(ch)); });
        return lower.find("step") != std::string::npos;
    }

    // Live block bytes, requested bytes and counts per stack group at state `index`, and the newest allocation.
    struct LiveGroup {
        ByteCount bytes = 0, requested = 0;
        int64_t count = 0;
        AllocationId newest = NoAllocation;
    };
    std::unordered_map<uint32_t, LiveGroup> liveByGroup(DeviceContext& c, int64_t index)
    {
        std::unordered_map<uint32_t, LiveGroup> out;
        for (AllocationId id : c.replay.liveAt(index)) {
            const Allocation& a = c.replay.allocation(id);
            LiveGroup& g = out[c.groupOf(a)];
            g.bytes += a.size;
            g.requested += a.requestedSize;
            ++g.count;
            if (g.newest == NoAllocation || a.allocIndex > c.replay.allocation(g.newest).allocIndex)
                g.newest = id;
        }
        return out;
    }

    void leakInsights(DeviceContext& c)
    {
        // Steps: the most repeated family of closed record_function ranges (names that differ only in a trailing
        // number count as one), at least 3; ties go to a family named like a step, then to the earlier one.
        std::vector<AnnotationRange> ranges;
        for (AnnotationRange& r : annotationRanges(c.s, c.device))
            if (r.closed && !isCompilerAnnotation(r.name))
                ranges.push_back(std::move(r));
        std::map<std::string, std::vector<int64_t>> families; // family -> END state indices
        std::vector<std::string> order;
        for (const AnnotationRange& r : ranges) {
            auto& ends = families[familyOf(r.name)];
            if (ends.empty())
                order.push_back(familyOf(r.name));
            ends.push_back(r.end);
        }
        std::string best;
        for (const std::string& f : order) {
            const size_t n = families[f].size();
            if (n < 3)
                continue;
            if (best.empty() || n > families[best].size()
                || (n == families[best].size() && containsStep(f) && !containsStep(best)))
                best = f;
        }
        if (!best.empty()) {
            std::vector<int64_t> points = families[best];
            std::sort(points.begin(), points.end());
            points.erase(std::unique(points.begin(), points.end()), points.end());
            if (points.size() >= 3) {
                std::vector<std::unordered_map<uint32_t, LiveGroup>> samples;
                for (int64_t p : points)
                    samples.push_back(liveByGroup(c, std::min(p, c.replay.entryCount())));
                struct Suspect {
                    uint32_t group;
                    ByteCount growth, requestedGrowth;
                    int64_t countGrowth;
                    int rises;
                };
                std::vector<Suspect> suspects;
                const ByteCount peakBytes = c.replay.peakAllocated().bytes;
                for (const auto& [group, last] : samples.back()) {
                    int rises = 0;
                    bool falls = false;
                    ByteCount previous = -1;
                    for (const auto& sample : samples) {
                        auto it = sample.find(group);
                        const ByteCount b = it == sample.end() ? 0 : it->second.bytes;
                        if (previous >= 0 && b > previous)
                            ++rises;
                        if (previous >= 0 && b < previous)
                            falls = true;
                        previous = b;
                    }
                    auto first = samples.front().find(group);
                    const LiveGroup f = first == samples.front().end() ? LiveGroup {} : first->second;
                    // Grows step over step: never shrinks, rises in at least two steps and a third of them (a
                    // leak may grow every other step, as diff_after's does), by at least 0.1 % of the peak.
                    const int steps = int(samples.size()) - 1;
                    const ByteCount growth = last.bytes - f.bytes;
                    if (!falls && rises >= 2 && rises * 3 >= steps && growth > 0 && growth * 1000 >= peakBytes)
                        suspects.push_back(
                            { group, last.bytes - f.bytes, last.requested - f.requested, last.count - f.count, rises });
                }
                std::sort(suspects.begin(), suspects.end(), [](const Suspect& a, const Suspect& b) {
                    return a.growth != b.growth ? a.growth > b.growth : a.group < b.group;
                });
                // "step_N" for numbered names, else the name itself.
                const bool numbered = std::any_of(ranges.begin(), ranges.end(), [&](const AnnotationRange& r) {
                    return r.name != best && familyOf(r.name) == best;
                });
                const std::string name = numbered ? best + "N" : best;
                for (size_t i = 0; i < suspects.size() && i < c.options.maxLeaks; ++i) {
                    const Suspect& sp = suspects[i];
                    const LiveGroup& last = samples.back().at(sp.group);
                    Insight it;
                    it.kind = InsightKind::LeakSuspect;
                    it.device = c.device;
                    it.index = std::min(points.back(), c.replay.entryCount());
                    it.allocation = last.newest;
                    c.setStacks(it, sp.group);
                    it.bytes = sp.growth;
                    it.count = sp.countGrowth;
                    it.requested = sp.requestedGrowth;
                    const int steps = int(points.size()) - 1;
                    it.title = "Grows step over step: " + signedSize(sp.growth) + " in "
                        + plural(sp.countGrowth, "block", "blocks") + " over " + std::to_string(steps) + " '" + name
                        + "' steps (" + signedSize(sp.growth / steps) + " a step) from " + c.label(it);
                    it.detail = "Live at the end of each '" + name + "' range (" + std::to_string(points.size())
                        + " of them): rose in " + std::to_string(sp.rises) + " of " + std::to_string(steps)
                        + " steps, never fell; " + size(last.bytes) + " in " + plural(last.count, "block", "blocks")
                        + " at the last one. The newest is selected.\n" + c.text(it);
                    c.out.push_back(std::move(it));
                }
                return;
            }
        }
        // No steps to compare: blocks allocated in the second half of the trace and still alive at its end.
        const int64_t n = c.replay.entryCount();
        if (n < 16)
            return;
        std::unordered_map<uint32_t, LiveGroup> late;
        for (AllocationId id : c.replay.liveAt(n)) {
            const Allocation& a = c.replay.allocation(id);
            if (a.allocIndex < n / 2)
                continue;
            LiveGroup& g = late[c.groupOf(a)];
            g.bytes += a.size;
            g.requested += a.requestedSize;
            ++g.count;
            if (g.newest == NoAllocation || a.allocIndex > c.replay.allocation(g.newest).allocIndex)
                g.newest = id;
        }
        std::vector<std::pair<uint32_t, LiveGroup>> sorted(late.begin(), late.end());
        std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
            return a.second.bytes != b.second.bytes ? a.second.bytes > b.second.bytes : a.first < b.first;
        });
        const ByteCount peak = c.replay.peakAllocated().bytes;
        for (size_t i = 0; i < sorted.size() && i < c.options.maxLeaks; ++i) {
            const LiveGroup& g = sorted[i].second;
            if (g.bytes * 100 < peak) // under 1 % of the peak: not worth a line
                break;
            Insight it;
            it.kind = InsightKind::LateSurvivor;
            it.device = c.device;
            it.index = n;
            it.allocation = g.newest;
            c.setStacks(it, sorted[i].first);
            it.bytes = g.bytes;
            it.count = g.count;
            it.requested = g.requested;
            it.title = "Allocated late and never freed: " + size(g.bytes) + " in " + plural(g.count, "block", "blocks")
                + " from " + c.label(it);
            it.detail = "Allocated after entry " + std::to_string(n / 2)
                + " (the second half of the trace) and alive at "
                + "its end: a leak, or a cache that fills up. The trace has no repeated record_function ranges to "
                + "compare step by step.\n" + c.text(it);
            c.out.push_back(std::move(it));
        }
    }

    void pendingInsights(DeviceContext& c)
    {
        const Trace& trace = c.s.deviceTraces[size_t(c.device)];
        const int64_t n = c.replay.entryCount(), first = c.replay.firstEntry();
        struct Stall {
            ByteCount bytes = 0;
            int64_t count = 0, longestUs = -1, longestEntries = 0;
            AllocationId worst = NoAllocation;
            int64_t worstIndex = 0;
        };
        std::unordered_map<uint32_t, Stall> byGroup;
        const auto& all = c.replay.allocations();
        for (size_t k = 0; k < all.size(); ++k) {
            const Allocation& a = all[k];
            // Pending: free_requested before free_completed with entries between (PyTorch writes the two together
            // when no other stream uses the block, CUDACachingAllocator.cpp free / process_events).
            if (a.freeRequestedIndex < 0 || a.freeCompletedIndex - a.freeRequestedIndex <= 1)
                continue;
            const int64_t entries = a.freeCompletedIndex - a.freeRequestedIndex;
            const int64_t us = timeAt(trace, first + std::min<int64_t>(a.freeCompletedIndex, n - 1))
                - timeAt(trace, first + a.freeRequestedIndex);
            Stall& s = byGroup[c.groupOf(a)];
            s.bytes += a.size;
            ++s.count;
            if (us > s.longestUs || (us == s.longestUs && entries > s.longestEntries)) {
                s.longestUs = us;
                s.longestEntries = entries;
                s.worst = AllocationId(uint32_t(k));
                s.worstIndex = a.freeRequestedIndex + 1;
            }
        }
        if (byGroup.empty())
            return;
        // The moment the most bytes waited: active - allocated is the pending-free bytes.
        const ReplaySeries& series = c.replay.series();
        ByteCount most = 0;
        size_t mostAt = 0;
        for (size_t i = 0; i < series.size(); ++i)
            if (series.active[i] - series.allocated[i] > most) {
                most = series.active[i] - series.allocated[i];
                mostAt = i;
            }
        std::vector<std::pair<uint32_t, Stall>> sorted(byGroup.begin(), byGroup.end());
        std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
            const double wa = double(a.second.bytes) * double(std::max<int64_t>(1, a.second.longestUs));
            const double wb = double(b.second.bytes) * double(std::max<int64_t>(1, b.second.longestUs));
            return wa != wb ? wa > wb : a.first < b.first;
        });
        int64_t total = 0;
        for (const auto& [g, s] : sorted)
            total += s.count;
        Insight head;
        head.kind = InsightKind::PendingFree;
        head.device = c.device;
        head.index = int64_t(mostAt);
        head.bytes = most;
        head.count = total;
        // Select the largest block waiting at that moment.
        ByteCount largestPending = -1;
        for (const ReplayBlock& b : c.replay.stateAt(int64_t(mostAt)).blocks)
            if (b.state == BlockState::ActivePendingFree && b.size > largestPending) {
                largestPending = b.size;
                head.allocation = b.allocation;
                head.stack = b.stack;
            }
        head.title = "Up to " + size(most) + " freed but still in use on other streams at entry "
            + std::to_string(mostAt) + " (" + plural(total, "block", "blocks") + " waited in all)";
        head.detail = "record_stream keeps a freed block from being reused until the streams it was recorded on have "
                      "finished with it (free_requested now, free_completed later: CUDACachingAllocator.cpp "
                      "insert_events / process_events). Memory waiting so cannot serve new requests.\n";
        c.out.push_back(std::move(head));
        for (size_t i = 0; i < sorted.size() && i < c.options.maxStalls; ++i) {
            const Stall& s = sorted[i].second;
            Insight it;
            it.kind = InsightKind::PendingFree;
            it.device = c.device;
            it.index = s.worstIndex;
            it.allocation = s.worst;
            c.setStacks(it, sorted[i].first);
            it.bytes = s.bytes;
            it.count = s.count;
            char ms[32];
            std::snprintf(ms, sizeof ms, "%.3f ms", double(std::max<int64_t>(0, s.longestUs)) / 1000.0);
            it.title = "Waited up to " + std::string(ms) + " (" + std::to_string(s.longestEntries)
                + " entries): " + plural(s.count, "block", "blocks") + ", " + size(s.bytes) + ", from " + c.label(it);
            it.detail = "The longest wait is selected, at its free_requested.\n" + c.text(it);
            c.out.push_back(std::move(it));
        }
    }

} // namespace

std::string stackLabel(const Snapshot& s, StackId stack, bool frameFilter)
{
    if (s.stackSize(stack) == 0)
        return "<no stack recorded>";
    if (frameFilter) {
        // The site, then what allocated there: "train.py:44:step via functional.py:1443:dropout".
        const auto [site, what] = siteAndWhat(s, stack);
        std::string out = siteText(s, s.frame(s.stackBegin(stack)[site]));
        if (what >= 0)
            out += " via " + displayFrame(s, s.frame(s.stackBegin(stack)[what]));
        return out;
    }
    const std::vector<FrameId> frames = shownFrames(s, stack, frameFilter);
    // The two innermost frames say what allocated (nn.Module's call plumbing skipped), the innermost frame of the
    // user's own code says where in the program.
    auto plumbing = [&](FrameId f) {
        const std::string_view name = s.str(s.frame(f).name);
        return name == "_call_impl" || name == "_wrapped_call_impl";
    };
    std::string out;
    size_t taken = 0;
    bool userShown = false;
    for (FrameId f : frames) {
        if (taken == 2)
            break;
        if (plumbing(f))
            continue;
        out += (taken ? " <- " : "") + displayFrame(s, s.frame(f));
        userShown |= !isLibraryFrame(s.str(s.frame(f).filename));
        ++taken;
    }
    if (!userShown)
        for (FrameId f : frames)
            if (!isLibraryFrame(s.str(s.frame(f).filename))) {
                out += (out.empty() ? "" : " ... ") + displayFrame(s, s.frame(f));
                break;
            }
    return out.empty() ? displayFrame(s, s.frame(frames.front())) : out;
}

std::string insightLabel(const Snapshot& s, const Insight& it, bool frameFilter)
{
    if (it.forwardStack == EmptyStack)
        return stackLabel(s, it.stack, frameFilter);
    // A backward allocation: its own site (the engine's node, or nothing with Python-only stacks), then the forward
    // line that made the node, as PyTorch's viewer shows forward_frames below a backward allocation's frames.
    const std::string forward = "the backward of " + stackLabel(s, it.forwardStack, frameFilter);
    return s.stackSize(it.stack) == 0 ? forward : stackLabel(s, it.stack, frameFilter) + ", " + forward;
}

std::string insightStackText(const Snapshot& s, const Insight& it, const InsightOptions& options)
{
    std::string out = stackText(s, it.stack, options);
    if (it.forwardStack != EmptyStack)
        out += "  in the backward of (the forward pass, from the trace's forward_frames):\n"
            + stackText(s, it.forwardStack, options);
    return out;
}

Insights computeInsights(const Snapshot& snapshot, std::span<const Replay> replays, const InsightOptions& options)
{
    Insights out;
    StackGroups groups(snapshot, options.frameFilter);
    for (const Replay& replay : replays) {
        const int device = replay.device();
        if (replay.entryCount() == 0 && replay.allocations().empty())
            continue;
        DeviceContext c { snapshot, replay, options, groups, device, out.items };
        peakInsights(c);
        if (size_t(device) < snapshot.deviceTraces.size() && replay.entryCount() > 0) {
            oomInsights(c);
            leakInsights(c);
            pendingInsights(c);
        }
    }
    return out;
}

Insights computeDiffInsights(const DiffResult& result, const InsightOptions& options)
{
    Insights out;
    if (!result.ok() || result.totals.empty() || !result.frames)
        return out;
    const Snapshot& t = *result.frames;
    const DiffMetrics& d = result.totals.front().delta;
    const DiffMetrics &a = result.totals.front().a, &b = result.totals.front().b;
    Insight head;
    head.kind = InsightKind::Growth;
    head.bytes = d.active;
    head.count = d.allocations;
    head.title = "Active memory " + std::string(d.active >= 0 ? "grew" : "shrank") + " by " + size(std::abs(d.active))
        + " (" + size(a.active) + " -> " + size(b.active) + "), reserved " + signedSize(d.reserved) + ", "
        + plural(std::abs(d.allocations), "allocation", "allocations") + (d.allocations >= 0 ? " more" : " fewer");
    head.detail = "fragmentation (reserved - active) " + signedSize(d.fragmentation) + ", largest free block "
        + signedSize(d.largestFree) + "; segments only in B: " + std::to_string(result.segments.onlyB.count) + " ("
        + size(result.segments.onlyB.bytes) + "), only in A: " + std::to_string(result.segments.onlyA.count) + " ("
        + size(result.segments.onlyA.bytes) + ")\n";
    if (result.sameTrace)
        head.detail += "Same trace: " + std::to_string(result.lifetimes.newAllocations.count) + " new allocations ("
            + size(result.lifetimes.newAllocations.bytes) + "), " + std::to_string(result.lifetimes.freed.count)
            + " freed (" + size(result.lifetimes.freed.bytes) + ")\n";
    out.items.push_back(std::move(head));

    // The stacks that grew most; "one more block of one size each step" when a by-size row explains the growth.
    size_t shown = 0;
    for (const DiffStackRow& row : result.byStack) {
        if (row.deltaBytes <= 0 || shown >= options.topConsumers)
            break;
        Insight it;
        it.kind = InsightKind::Growth;
        it.stack = row.stack;
        it.bytes = row.deltaBytes;
        it.count = row.deltaCount;
        it.requested = row.requestedB - row.requestedA;
        it.share = d.active > 0 ? double(row.deltaBytes) / double(d.active) : 0.0;
        it.title = signedSize(row.deltaBytes) + " in " + (row.deltaCount > 0 ? "+" : "")
            + plural(row.deltaCount, "block", "blocks") + " from " + stackLabel(t, row.stack, options.frameFilter);
        it.detail = "A: " + size(row.bytesA) + " in " + std::to_string(row.countA) + ", B: " + size(row.bytesB) + " in "
            + std::to_string(row.countB) + ".\n";
        for (const DiffStackRow& s : result.byStackAndSize)
            if (s.stack == row.stack && s.deltaCount >= 2 && s.deltaBytes == row.deltaBytes)
                it.detail += "All of it is " + std::to_string(s.deltaCount) + " more blocks of " + size(s.size)
                    + ": the same tensor kept once more each time (a list that grows, a cache, a graph kept alive).\n";
        it.detail += stackText(t, row.stack, options);
        out.items.push_back(std::move(it));
        ++shown;
    }
    return out;
}

std::string insightsText(const Insights& insights)
{
    std::string out;
    if (!insights.source.empty())
        out += insights.source + "\n";
    if (insights.items.empty())
        return out + "  nothing to say: no trace, no allocations\n";
    InsightKind last = InsightKind::Count;
    for (const Insight& it : insights.items) {
        if (it.kind != last) {
            out += "\n";
            last = it.kind;
        }
        out += "* " + it.title + "\n";
        if (it.index >= 0)
            out += "    (entry " + std::to_string(it.index) + ", device " + std::to_string(it.device) + ")\n";
        size_t begin = 0;
        while (begin < it.detail.size()) {
            size_t end = it.detail.find('\n', begin);
            if (end == std::string::npos)
                end = it.detail.size();
            out += "    " + it.detail.substr(begin, end - begin) + "\n";
            begin = end + 1;
        }
    }
    return out;
}

namespace {
    void jsonString(std::string& out, std::string_view text)
    {
        // RFC 8259: '"', '\\' and control characters escaped; other bytes (UTF-8) as they are.
        out += '"';
        for (unsigned char ch : text) {
            if (ch == '"' || ch == '\\') {
                out += '\\';
                out += char(ch);
            } else if (ch == '\n') {
                out += "\\n";
            } else if (ch < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", ch);
                out += buf;
            } else {
                out += char(ch);
            }
        }
        out += '"';
    }
} // namespace

std::string insightsJson(const Insights& insights, const Snapshot& frames, const InsightOptions& options)
{
    std::string out = "{\n  \"format\": \"memscope-insights\",\n  \"version\": 1,\n  \"source\": ";
    jsonString(out, insights.source);
    out += ",\n  \"items\": [";
    for (size_t i = 0; i < insights.items.size(); ++i) {
        const Insight& it = insights.items[i];
        out += i ? ",\n    {" : "\n    {";
        out += "\"kind\": ";
        jsonString(out, insightKindName(it.kind));
        out += ", \"device\": " + std::to_string(it.device)
            + ", \"index\": " + (it.index >= 0 ? std::to_string(it.index) : std::string("null")) + ", \"allocation\": "
            + (it.allocation != NoAllocation ? std::to_string(raw(it.allocation)) : std::string("null"))
            + ", \"bytes\": " + std::to_string(it.bytes) + ", \"count\": " + std::to_string(it.count)
            + ", \"requested\": " + std::to_string(it.requested);
        char share[32];
        std::snprintf(share, sizeof share, "%.6f", it.share);
        out += std::string(", \"share\": ") + share + ", \"title\": ";
        jsonString(out, it.title);
        out += ", \"detail\": ";
        jsonString(out, it.detail);
        out += ", \"frames\": [";
        const std::vector<FrameId> shown = shownFrames(frames, it.stack, options.frameFilter);
        for (size_t f = 0; f < shown.size(); ++f) {
            if (f)
                out += ", ";
            jsonString(out, displayFrame(frames, frames.frame(shown[f])));
        }
        out += "]";
        if (it.forwardStack != EmptyStack) {
            // A backward allocation's forward pass (Insight::forwardStack), innermost first as "frames".
            out += ", \"forward_frames\": [";
            const std::vector<FrameId> forward = shownFrames(frames, it.forwardStack, options.frameFilter);
            for (size_t f = 0; f < forward.size(); ++f) {
                if (f)
                    out += ", ";
                jsonString(out, displayFrame(frames, frames.frame(forward[f])));
            }
            out += "]";
        }
        out += "}";
    }
    out += insights.items.empty() ? "]\n}\n" : "\n  ]\n}\n";
    return out;
}

} // namespace memscope::report
