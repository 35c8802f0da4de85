// Reports of a memory diff (diffreport.h): text, the documented JSON, folded stacks.
#include "report/diffreport.h"

#include "model/framefilter.h"
#include "report/memoryviz.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>

namespace memscope::report {

using namespace memscope::model;

namespace {

    std::string size(ByteCount bytes) { return report::formatSize(double(bytes)); }

    std::string signedSize(ByteCount bytes) { return (bytes > 0 ? "+" : "") + size(bytes); }

    std::string signedInt(int64_t n) { return (n > 0 ? "+" : "") + std::to_string(n); }

    std::string hex(int64_t v)
    {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%" PRIx64, uint64_t(v));
        return buf;
    }

    std::string pad(std::string s, size_t width, bool left = false)
    {
        if (s.size() >= width)
            return s;
        return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
    }

    std::string metricName(DiffGrowthMetric m) { return std::string(diffGrowthMetricName(m)); }

    std::string groupingName(DiffGrouping g)
    {
        return g == DiffGrouping::StackAndSize ? "stack+size" : g == DiffGrouping::Segment ? "segment" : "stack";
    }

    std::string poolText(std::pair<int64_t, int64_t> p)
    {
        return "(" + std::to_string(p.first) + ", " + std::to_string(p.second) + ")";
    }

    std::string streamText(int64_t stream) { return stream == 0 ? "0 (default)" : hex(stream); }

    std::string scopeText(const DiffTotals& t)
    {
        switch (t.scope) {
        case DiffScope::All:
            return "all devices";
        case DiffScope::Device:
            return "device " + std::to_string(t.device);
        case DiffScope::Pool:
            return "device " + std::to_string(t.device) + ", pool " + poolText(t.poolId);
        case DiffScope::Stream:
            return "device " + std::to_string(t.device) + ", stream " + streamText(t.stream);
        }
        return {};
    }

    std::string sideText(const DiffSideInfo& s, const char* fallback)
    {
        std::string out = s.name.empty() ? std::string(fallback) : s.name;
        if (s.index == EndOfTrace)
            out += ", final state";
        else
            out += ", state " + std::to_string(s.index) + " of " + std::to_string(s.entryCount) + " (device "
                + std::to_string(s.traceDevice) + "'s trace)";
        out += s.device == AllDevices ? ", all devices" : ", device " + std::to_string(s.device);
        return out;
    }

    // The frames of a stack of the diff's table as the folded format writes them: outermost first, filtered,
    // "basename:line:name" (_memory_viz._frame_fmt); PyTorch's "<non-python>" for an empty stack.
    std::vector<std::string> shownFrames(const DiffResult& r, StackId stack, bool outermostFirst)
    {
        const Snapshot& t = *r.frames;
        std::vector<std::string> out;
        for (const FrameId* f = t.stackBegin(stack); f != t.stackEnd(stack); ++f) {
            const Frame& fr = t.frame(*f);
            if (r.options.frameFilter && !model::keepFrame(t.str(fr.name), t.str(fr.filename)))
                continue;
            out.push_back(report::formatFrame(t, fr));
        }
        if (out.empty())
            out.push_back(t.stackSize(stack) == 0 ? "<non-python>" : "<all frames hidden>");
        if (outermostFirst)
            std::reverse(out.begin(), out.end());
        return out;
    }

    std::string foldedStack(const DiffResult& r, const DiffStackRow& row, bool withSize)
    {
        std::string out;
        for (const std::string& f : shownFrames(r, row.stack, true)) {
            if (!out.empty())
                out += ';';
            out += f;
        }
        if (withSize)
            out += ";<" + std::to_string(row.size) + " B>";
        return out;
    }

    const std::vector<DiffStackRow>& rowsOf(const DiffResult& r, DiffGrouping by)
    {
        return by == DiffGrouping::StackAndSize ? r.byStackAndSize : r.byStack;
    }

    void textStackRows(std::string& out, const DiffResult& r, const DiffReportOptions& o, bool growth)
    {
        const bool sized = o.by == DiffGrouping::StackAndSize;
        const auto& rows = rowsOf(r, o.by);
        const char* unit = sized ? "stack and size" : "call stack";
        size_t n = 0;
        ByteCount bytes = 0;
        int64_t count = 0;
        for (const DiffStackRow& row : rows)
            if (growth ? row.deltaBytes > 0 : row.deltaBytes < 0) {
                ++n;
                bytes += row.deltaBytes;
                count += row.deltaCount;
            }
        const size_t shown = o.top == 0 ? n : std::min(n, o.top);
        out += growth ? "top growth by " : "top shrink by ";
        out += unit;
        if (n == 0) {
            out += ": none\n";
            return;
        }
        out += ": " + std::to_string(n) + (sized ? (n == 1 ? " row " : " rows ") : (n == 1 ? " stack " : " stacks "))
            + (growth ? "grew" : "shrank") + " by " + signedSize(bytes) + " (" + signedInt(bytes) + " B) in "
            + signedInt(count) + " allocations";
        out += shown < n ? ", the first " + std::to_string(shown) + " shown\n" : "\n";
        size_t k = 0;
        for (const DiffStackRow& row : rows) {
            if (!(growth ? row.deltaBytes > 0 : row.deltaBytes < 0))
                continue;
            if (k == shown)
                break;
            ++k;
            std::string line = "  " + pad(signedSize(row.deltaBytes), 10) + " (" + signedInt(row.deltaBytes) + " B)  "
                + signedInt(row.deltaCount) + " allocs";
            if (sized)
                line += " of " + size(row.size);
            line += "   A: " + size(row.bytesA) + " in " + std::to_string(row.countA) + "   B: " + size(row.bytesB)
                + " in " + std::to_string(row.countB);
            if (r.sameTrace)
                line += "   (" + std::to_string(row.newCount) + " new, " + std::to_string(row.freedCount) + " freed)";
            out += line + "\n";
            const std::vector<std::string> frames = shownFrames(r, row.stack, false);
            const size_t limit = o.maxFrames == 0 ? frames.size() : std::min(frames.size(), o.maxFrames);
            for (size_t f = 0; f < limit; ++f)
                out += "        " + frames[f] + "\n";
            if (limit < frames.size())
                out += "        ... " + std::to_string(frames.size() - limit) + " more frames\n";
        }
    }

    void textSegments(std::string& out, const DiffResult& r, const DiffReportOptions& o)
    {
        struct Group {
            DiffSegmentStatus status;
            const char* title;
        };
        for (const Group g : { Group { DiffSegmentStatus::OnlyB, "segments only in B" },
                               Group { DiffSegmentStatus::OnlyA, "segments only in A" },
                               Group { DiffSegmentStatus::Both, "segments in both whose active bytes changed" } }) {
            std::vector<const DiffSegment*> list;
            for (const DiffSegment& s : r.segmentList)
                if (s.status == g.status && (g.status != DiffSegmentStatus::Both || s.deltaActive() != 0))
                    list.push_back(&s);
            const size_t shown = o.top == 0 ? list.size() : std::min(list.size(), o.top);
            out += std::string(g.title) + ": ";
            if (list.empty()) {
                out += "none\n";
                continue;
            }
            out += std::to_string(shown) + " of " + std::to_string(list.size()) + "\n";
            for (size_t i = 0; i < shown; ++i) {
                const DiffSegment& s = *list[i];
                std::string line = "  device " + std::to_string(s.device) + "  " + hex(s.address) + "  "
                    + pad(size(s.size), 9) + "  stream " + streamText(s.stream) + "  pool " + poolText(s.poolId);
                if (s.isExpandable)
                    line += "  expandable";
                if (s.status == DiffSegmentStatus::OnlyA)
                    line += "  active " + size(s.activeA) + " in " + std::to_string(s.allocationsA);
                else if (s.status == DiffSegmentStatus::OnlyB)
                    line += "  active " + size(s.activeB) + " in " + std::to_string(s.allocationsB);
                else
                    line += "  active " + signedSize(s.deltaActive()) + " (A: " + size(s.activeA) + " in "
                        + std::to_string(s.allocationsA) + ", B: " + size(s.activeB) + " in "
                        + std::to_string(s.allocationsB) + ")";
                out += line + "\n";
            }
        }
    }

    // A tiny JSON writer: objects and arrays with two-space indentation, commas handled, keys in call order.
    class Json {
    public:
        std::string out;

        void beginObject(const char* key = nullptr) { open(key, '{'); }
        void endObject() { close('}'); }
        void beginArray(const char* key = nullptr) { open(key, '['); }
        void endArray() { close(']'); }
        void value(const char* key, int64_t v) { item(key, std::to_string(v)); }
        void value(const char* key, int v) { item(key, std::to_string(v)); }
        void value(const char* key, size_t v) { item(key, std::to_string(v)); }
        void value(const char* key, bool v) { item(key, v ? "true" : "false"); }
        void value(const char* key, model::LineNumber v) { item(key, v.toString()); }
        void value(const char* key, const std::string& v) { item(key, quote(v)); }
        void value(const char* key, const char* v) { item(key, quote(v)); }
        void null(const char* key) { item(key, "null"); }
        void pool(const char* key, std::pair<int64_t, int64_t> p)
        {
            item(key, "[" + std::to_string(p.first) + ", " + std::to_string(p.second) + "]");
        }

        static std::string quote(std::string_view s)
        {
            // RFC 8259: '"', '\\' and control characters escaped; other bytes (UTF-8) as they are.
            std::string q = "\"";
            for (unsigned char c : s) {
                switch (c) {
                case '"':
                    q += "\\\"";
                    break;
                case '\\':
                    q += "\\\\";
                    break;
                case '\n':
                    q += "\\n";
                    break;
                case '\r':
                    q += "\\r";
                    break;
                case '\t':
                    q += "\\t";
                    break;
                default:
                    if (c < 0x20) {
                        char buf[8];
                        std::snprintf(buf, sizeof buf, "\\u%04x", c);
                        q += buf;
                    } else {
                        q += char(c);
                    }
                }
            }
            return q + "\"";
        }

    private:
        void prefix(const char* key)
        {
            if (!m_first.empty()) {
                if (!m_first.back())
                    out += ',';
                m_first.back() = false;
                out += '\n';
                out.append(2 * m_first.size(), ' ');
            }
            if (key) {
                out += quote(key);
                out += ": ";
            }
        }
        void item(const char* key, const std::string& text)
        {
            prefix(key);
            out += text;
        }
        void open(const char* key, char bracket)
        {
            prefix(key);
            out += bracket;
            m_first.push_back(true);
        }
        void close(char bracket)
        {
            const bool empty = m_first.back();
            m_first.pop_back();
            if (!empty) {
                out += '\n';
                out.append(2 * m_first.size(), ' ');
            }
            out += bracket;
            if (m_first.empty())
                out += '\n';
        }
        std::vector<bool> m_first;
    };

    void jsonMetrics(Json& j, const char* key, const DiffMetrics& m)
    {
        j.beginObject(key);
        j.value("reserved", m.reserved);
        j.value("allocated", m.allocated);
        j.value("active", m.active);
        j.value("requested", m.requested);
        j.value("largest_free", m.largestFree);
        j.value("fragmentation", m.fragmentation);
        j.value("segments", m.segments);
        j.value("allocations", m.allocations);
        j.endObject();
    }

    void jsonCountBytes(Json& j, const char* key, const DiffCountBytes& c)
    {
        j.beginObject(key);
        j.value("count", c.count);
        j.value("bytes", c.bytes);
        j.endObject();
    }

    void jsonSide(Json& j, const char* key, const DiffSideInfo& s)
    {
        j.beginObject(key);
        j.value("name", s.name);
        if (s.device == AllDevices)
            j.value("device", "all");
        else
            j.value("device", s.device);
        if (s.index == EndOfTrace) {
            j.null("index");
            j.null("trace_device");
            j.null("entries");
        } else {
            j.value("index", s.index);
            j.value("trace_device", s.traceDevice);
            j.value("entries", s.entryCount);
        }
        j.endObject();
    }

    void jsonFrames(Json& j, const DiffResult& r, StackId stack)
    {
        const Snapshot& t = *r.frames;
        j.beginArray("frames");
        for (const FrameId* f = t.stackBegin(stack); f != t.stackEnd(stack); ++f) {
            const Frame& fr = t.frame(*f);
            if (r.options.frameFilter && !model::keepFrame(t.str(fr.name), t.str(fr.filename)))
                continue;
            j.beginObject();
            j.value("name", std::string(t.str(fr.name)));
            j.value("filename", std::string(t.str(fr.filename)));
            j.value("line", fr.line);
            j.endObject();
        }
        j.endArray();
    }

} // namespace

std::string diffText(const DiffResult& r, const DiffReportOptions& o)
{
    if (!r.ok())
        return r.error + "\n";
    std::string out;
    out += "memory diff, B - A\n";
    out += "  A: " + sideText(r.a, "A") + "\n";
    out += "  B: " + sideText(r.b, "B") + "\n\n";

    const DiffTotals& all = r.totals.front();
    out += pad("", 22) + pad("A", 14) + pad("B", 14) + pad("B - A", 14) + "\n";
    auto bytesLine = [&](const char* name, ByteCount DiffMetrics::*field) {
        out += "  " + pad(name, 20, true) + pad(size(all.a.*field), 14) + pad(size(all.b.*field), 14)
            + pad(signedSize(all.delta.*field), 14) + "\n";
    };
    auto countLine = [&](const char* name, int64_t DiffMetrics::*field) {
        out += "  " + pad(name, 20, true) + pad(std::to_string(all.a.*field), 14)
            + pad(std::to_string(all.b.*field), 14) + pad(signedInt(all.delta.*field), 14) + "\n";
    };
    bytesLine("reserved", &DiffMetrics::reserved);
    bytesLine("allocated", &DiffMetrics::allocated);
    bytesLine("active", &DiffMetrics::active);
    bytesLine("requested", &DiffMetrics::requested);
    bytesLine("largest free block", &DiffMetrics::largestFree);
    bytesLine("fragmentation", &DiffMetrics::fragmentation);
    countLine("segments", &DiffMetrics::segments);
    countLine("allocations", &DiffMetrics::allocations);
    out += "  (fragmentation: reserved bytes backing no active block)\n\n";

    std::vector<const DiffTotals*> changed;
    for (size_t i = 1; i < r.totals.size(); ++i)
        if (r.totals[i].delta != DiffMetrics {})
            changed.push_back(&r.totals[i]);
    out += "by device, pool and stream (B - A): ";
    if (changed.empty()) {
        out += "no change\n\n";
    } else {
        out += std::to_string(changed.size()) + " of " + std::to_string(r.totals.size() - 1) + " scopes changed\n";
        out += "  " + pad("scope", 34, true) + pad("reserved", 12) + pad("allocated", 12) + pad("active", 12)
            + pad("largest free", 14) + pad("allocs", 8) + "\n";
        for (const DiffTotals* t : changed)
            out += "  " + pad(scopeText(*t), 34, true) + pad(signedSize(t->delta.reserved), 12)
                + pad(signedSize(t->delta.allocated), 12) + pad(signedSize(t->delta.active), 12)
                + pad(signedSize(t->delta.largestFree), 14) + pad(signedInt(t->delta.allocations), 8) + "\n";
        out += "\n";
    }

    const DiffSegmentSummary& s = r.segments;
    out += "segments (matched by device, address and size): " + std::to_string(s.both.count) + " in both ("
        + size(s.both.bytes) + ", " + std::to_string(s.bothChanged) + " with other blocks), "
        + std::to_string(s.onlyA.count) + " only in A (" + size(s.onlyA.bytes) + "), " + std::to_string(s.onlyB.count)
        + " only in B (" + size(s.onlyB.bytes) + ")\n";
    if (r.sameTrace) {
        const DiffLifetimes& l = r.lifetimes;
        out += "allocations (same trace, exact): " + std::to_string(l.newAllocations.count) + " new ("
            + size(l.newAllocations.bytes) + "), " + std::to_string(l.freed.count) + " freed (" + size(l.freed.bytes)
            + "), " + std::to_string(l.surviving.count) + " surviving (" + size(l.surviving.bytes) + ")\n";
    }
    out += "\n";

    if (o.by == DiffGrouping::Segment) {
        textSegments(out, r, o);
    } else {
        textStackRows(out, r, o, true);
        out += "\n";
        textStackRows(out, r, o, false);
    }
    return out;
}

std::string diffJson(const DiffResult& r, const DiffReportOptions& o)
{
    Json j;
    j.beginObject();
    j.value("format", "memscope-diff");
    j.value("version", 1);
    if (!r.ok()) {
        j.value("error", r.error);
        j.endObject();
        return j.out;
    }
    jsonSide(j, "a", r.a);
    jsonSide(j, "b", r.b);
    j.value("same_trace", r.sameTrace);
    j.value("frame_filter", r.options.frameFilter);
    j.beginObject("growth");
    j.value("metric", metricName(o.growthMetric));
    j.value("bytes", diffGrowth(r, o.growthMetric));
    j.endObject();

    j.beginArray("totals");
    for (const DiffTotals& t : r.totals) {
        j.beginObject();
        static constexpr const char* ScopeNames[] = { "all", "device", "pool", "stream" };
        j.value("scope", ScopeNames[int(t.scope)]);
        if (t.scope == DiffScope::All)
            j.null("device");
        else
            j.value("device", int64_t(t.device));
        if (t.scope == DiffScope::Pool)
            j.pool("pool", t.poolId);
        else
            j.null("pool");
        if (t.scope == DiffScope::Stream)
            j.value("stream", t.stream);
        else
            j.null("stream");
        jsonMetrics(j, "a", t.a);
        jsonMetrics(j, "b", t.b);
        jsonMetrics(j, "delta", t.delta);
        j.endObject();
    }
    j.endArray();

    j.beginObject("segments");
    jsonCountBytes(j, "only_a", r.segments.onlyA);
    jsonCountBytes(j, "only_b", r.segments.onlyB);
    jsonCountBytes(j, "both", r.segments.both);
    j.value("both_changed", r.segments.bothChanged);
    j.endObject();

    if (r.sameTrace) {
        j.beginObject("lifetimes");
        jsonCountBytes(j, "new", r.lifetimes.newAllocations);
        jsonCountBytes(j, "freed", r.lifetimes.freed);
        jsonCountBytes(j, "surviving", r.lifetimes.surviving);
        j.endObject();
    } else {
        j.null("lifetimes");
    }

    j.value("by", groupingName(o.by));
    if (o.by == DiffGrouping::Segment) {
        const size_t shown = o.top == 0 ? r.segmentList.size() : std::min(r.segmentList.size(), o.top);
        j.value("row_count", r.segmentList.size());
        j.beginArray("rows");
        static constexpr const char* StatusNames[] = { "only_a", "only_b", "both" };
        for (size_t i = 0; i < shown; ++i) {
            const DiffSegment& s = r.segmentList[i];
            j.beginObject();
            j.value("status", StatusNames[int(s.status)]);
            j.value("device", int64_t(s.device));
            j.value("address", s.address);
            j.value("size", s.size);
            j.value("stream", s.stream);
            j.pool("pool", s.poolId);
            j.value("expandable", s.isExpandable);
            j.beginObject("a");
            j.value("allocated", s.allocatedA);
            j.value("active", s.activeA);
            j.value("allocations", s.allocationsA);
            j.endObject();
            j.beginObject("b");
            j.value("allocated", s.allocatedB);
            j.value("active", s.activeB);
            j.value("allocations", s.allocationsB);
            j.endObject();
            j.beginObject("delta");
            j.value("allocated", s.allocatedB - s.allocatedA);
            j.value("active", s.deltaActive());
            j.value("allocations", s.allocationsB - s.allocationsA);
            j.endObject();
            j.endObject();
        }
        j.endArray();
    } else {
        const bool sized = o.by == DiffGrouping::StackAndSize;
        const auto& rows = rowsOf(r, o.by);
        const size_t shown = o.top == 0 ? rows.size() : std::min(rows.size(), o.top);
        j.value("row_count", rows.size());
        j.beginArray("rows");
        for (size_t i = 0; i < shown; ++i) {
            const DiffStackRow& row = rows[i];
            j.beginObject();
            j.value("folded", foldedStack(r, row, false));
            jsonFrames(j, r, row.stack);
            if (sized)
                j.value("size", row.size);
            j.beginObject("a");
            j.value("bytes", row.bytesA);
            j.value("count", row.countA);
            j.value("requested", row.requestedA);
            j.endObject();
            j.beginObject("b");
            j.value("bytes", row.bytesB);
            j.value("count", row.countB);
            j.value("requested", row.requestedB);
            j.endObject();
            j.beginObject("delta");
            j.value("bytes", row.deltaBytes);
            j.value("count", row.deltaCount);
            j.endObject();
            if (r.sameTrace) {
                j.beginObject("new");
                j.value("count", row.newCount);
                j.value("bytes", row.newBytes);
                j.endObject();
                j.beginObject("freed");
                j.value("count", row.freedCount);
                j.value("bytes", row.freedBytes);
                j.endObject();
            }
            j.endObject();
        }
        j.endArray();
    }
    j.endObject();
    return j.out;
}

std::string diffFolded(const DiffResult& r, const DiffReportOptions& o)
{
    if (!r.ok() || o.by == DiffGrouping::Segment)
        return {};
    const bool sized = o.by == DiffGrouping::StackAndSize;
    std::string out;
    size_t lines = 0;
    for (const DiffStackRow& row : rowsOf(r, o.by)) {
        if (row.deltaBytes == 0)
            continue;
        if (o.top != 0 && lines == o.top)
            break;
        out += foldedStack(r, row, sized) + " " + std::to_string(row.deltaBytes) + "\n";
        ++lines;
    }
    return out;
}

std::string diffFoldedTwoColumn(const DiffResult& r, const DiffReportOptions& o)
{
    if (!r.ok() || o.by == DiffGrouping::Segment)
        return {};
    const bool sized = o.by == DiffGrouping::StackAndSize;
    std::string out;
    size_t lines = 0;
    for (const DiffStackRow& row : rowsOf(r, o.by)) {
        if (o.top != 0 && lines == o.top)
            break;
        out += foldedStack(r, row, sized) + " " + std::to_string(row.bytesA) + " " + std::to_string(row.bytesB) + "\n";
        ++lines;
    }
    return out;
}

// ---- Command line ----

} // namespace memscope::report
