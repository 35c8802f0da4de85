// encodePerfetto(): a snapshot's timeline as Chrome trace-event JSON, the format both ui.perfetto.dev and
// chrome://tracing open (Google's "Trace Event Format" document: the JSON Object Format with a traceEvents array;
// counter events "C", nestable async events "b"/"e", instant events "i", metadata events "M"). docs/perfetto.md
// says what each device's process holds. Every device is replayed (model/replay.h) for its allocated and reserved
// bytes after each trace entry and for each allocation's lifetime. Reentrant: one call per thread, shares nothing.
#include "io/jsontext.h"
#include "io/snapshotio.h"
#include "model/framefilter.h"
#include "model/replay.h"
#include "report/memoryviz.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memscope::io {

using namespace memscope::model;

namespace {

class PerfettoEncoder {
public:
    explicit PerfettoEncoder(const Snapshot& s)
        : m_s(s)
        , m_stackArgs(s.stackCount())
        , m_stackNames(s.stackCount())
        , m_stackDone(s.stackCount(), false)
    {
    }

    std::string encode()
    {
        m_out.reserve(1 << 20);
        m_out += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"writer\":\"memscope\",\"source\":\"PyTorch memory "
                 "snapshot\"},\"traceEvents\":[";
        for (int d = 0; d < m_s.deviceCount(); ++d)
            device(d);
        annotations();
        m_out += "\n]}\n";
        return std::move(m_out);
    }

private:
    // --- Text --------------------------------------------------------------------------------------------------------

    void integer(int64_t v)
    {
        char buf[24];
        const auto r = std::to_chars(buf, buf + sizeof buf, v);
        m_out.append(buf, r.ptr);
    }
    void text(std::string_view t) { appendJsonString(m_out, t); }
    // Starts an event: "\n{" after a comma when it is not the first, then the fields every event has.
    void begin(char phase, std::string_view name, int pid, int64_t tid, int64_t ts)
    {
        m_out += m_first ? "\n{\"ph\":\"" : ",\n{\"ph\":\"";
        m_first = false;
        m_out += phase;
        m_out += "\",\"name\":";
        text(name);
        m_out += ",\"pid\":";
        integer(pid);
        m_out += ",\"tid\":";
        integer(tid);
        m_out += ",\"ts\":";
        integer(ts);
    }

    // The stack as a JSON array of "file:line:name" strings (innermost first, every frame the file has) and the
    // name of its first frame that PyTorch's frame filter keeps (report::formatFrame, model::keepFrame), made once
    // per stack.
    void prepareStack(StackId id)
    {
        const uint32_t k = raw(id);
        if (m_stackDone[k])
            return;
        m_stackDone[k] = true;
        std::string& args = m_stackArgs[k];
        args += '[';
        const FrameId* frames = m_s.stackBegin(id);
        const uint32_t depth = m_s.stackSize(id);
        for (uint32_t i = 0; i < depth; ++i) {
            const Frame& f = m_s.frame(frames[i]);
            const std::string shown = report::formatFrame(m_s, f);
            if (i)
                args += ',';
            appendJsonString(args, shown);
            if (m_stackNames[k].empty() && model::keepFrame(m_s.str(f.name), m_s.str(f.filename)))
                m_stackNames[k] = shown;
        }
        args += ']';
        if (m_stackNames[k].empty() && depth > 0)
            m_stackNames[k] = report::formatFrame(m_s, m_s.frame(frames[0]));
    }

    // --- Events ------------------------------------------------------------------------------------------------------

    void device(int d)
    {
        const Replay replay = Replay::build(m_s, d);
        static const Trace NoTrace;
        const Trace& trace = d < int(m_s.deviceTraces.size()) ? m_s.deviceTraces[size_t(d)] : NoTrace;
        const int64_t n = replay.entryCount();
        const int64_t first = replay.firstEntry();
        // A trace without times (every time_us 0: hand-made or very old files) is laid out one microsecond per
        // entry, so its slices still have lengths.
        bool timed = false;
        for (int64_t j = 0; j < n && !timed; ++j)
            timed = trace[size_t(first + j)].timeUs != 0;
        auto time = [&](int64_t j) -> int64_t {
            if (n == 0)
                return 0;
            j = std::clamp<int64_t>(j, 0, n - 1);
            return timed ? trace[size_t(first + j)].timeUs : j;
        };

        const std::string process = "cuda:" + std::to_string(d);
        begin('M', "process_name", d, 0, 0);
        m_out += ",\"args\":{\"name\":";
        text(process);
        m_out += "}}";
        begin('M', "process_sort_index", d, 0, 0);
        m_out += ",\"args\":{\"sort_index\":";
        integer(d);
        m_out += "}}";

        // Counters: the state before the first entry, then the state after each entry at that entry's time (only
        // where a value changed). Every state index is covered, so each counter's maximum is the replay's peak.
        const ReplaySeries& series = replay.series();
        ByteCount lastAllocated = -1, lastReserved = -1;
        auto counters = [&](int64_t ts, size_t state) {
            const ByteCount allocated = series.allocated[state], reserved = series.reserved[state];
            if (allocated != lastAllocated) {
                begin('C', "allocated", d, 0, ts);
                m_out += ",\"args\":{\"bytes\":";
                integer(allocated);
                m_out += "}}";
                lastAllocated = allocated;
            }
            if (reserved != lastReserved) {
                begin('C', "reserved", d, 0, ts);
                m_out += ",\"args\":{\"bytes\":";
                integer(reserved);
                m_out += "}}";
                lastReserved = reserved;
            }
        };
        if (series.size() > 0)
            counters(time(0), 0);
        for (int64_t j = 0; j < n && size_t(j + 1) < series.size(); ++j)
            counters(time(j), size_t(j + 1));

        // The final segments of this device by address, for the stream of allocations the trace never mentions.
        std::vector<const Segment*> segments;
        for (const Segment& seg : m_s.segments) {
            if (seg.device == d)
                segments.push_back(&seg);
        }
        std::sort(segments.begin(), segments.end(),
                  [](const Segment* a, const Segment* b) { return a->address < b->address; });
        auto streamOf = [&](const Allocation& a) -> int64_t {
            for (TraceIndex j : { a.allocIndex, a.freeRequestedIndex, a.freeCompletedIndex }) {
                if (j >= 0 && j < n)
                    return m_s.stream(trace[size_t(first + j)]);
            }
            auto it = std::upper_bound(segments.begin(), segments.end(), a.address,
                                       [](DeviceAddr addr, const Segment* s) { return addr < s->address; });
            return it == segments.begin() ? 0 : (*std::prev(it))->stream;
        };

        // Allocations: nestable async slices (they overlap without nesting, which complete "X" events on one
        // thread may not), one id each, on the track of their stream.
        const auto& allocations = replay.allocations();
        for (size_t i = 0; i < allocations.size(); ++i) {
            const Allocation& a = allocations[i];
            prepareStack(a.stack);
            const uint32_t k = raw(a.stack);
            std::string name = report::formatSize(double(a.size));
            if (!m_stackNames[k].empty())
                name += " " + m_stackNames[k];
            const int64_t stream = streamOf(a);
            const int tid = m_s.streamNumber(stream);
            const int64_t start = a.allocIndex >= 0 ? time(a.allocIndex) : time(0);
            const int64_t end = std::max(start, time(a.freeCompletedIndex));
            char id[40];
            const auto r = std::to_chars(id, id + sizeof id, (uint64_t(uint32_t(d)) << 32) | i, 16);

            begin('b', name, d, tid, start);
            m_out += ",\"cat\":\"allocation\",\"id\":\"0x";
            m_out.append(id, r.ptr);
            m_out += "\",\"args\":{\"address\":";
            integer(a.address);
            m_out += ",\"size\":";
            integer(a.size);
            m_out += ",\"requested_size\":";
            integer(a.requestedSize);
            m_out += ",\"stream\":";
            integer(stream);
            m_out += ",\"alive_before_trace\":";
            m_out += a.allocIndex < 0 ? "true" : "false";
            m_out += ",\"alive_at_end\":";
            m_out += a.freeCompletedIndex >= n ? "true" : "false";
            m_out += ",\"stack\":";
            m_out += m_stackArgs[k];
            m_out += "}}";
            begin('e', name, d, tid, end);
            m_out += ",\"cat\":\"allocation\",\"id\":\"0x";
            m_out.append(id, r.ptr);
            m_out += "\"}";
        }

        // OOMs: process-wide instants, with the request and the free bytes the allocator saw.
        for (int64_t j = 0; j < n; ++j) {
            const TraceEntry& e = trace[size_t(first + j)];
            if (e.action != Action::Oom)
                continue;
            begin('i', "OOM: " + report::formatSize(double(e.size)) + " requested", d, 0, time(j));
            m_out += ",\"s\":\"p\",\"cat\":\"oom\",\"args\":{\"size\":";
            integer(e.size);
            m_out += ",\"device_free\":";
            integer(e.addr);
            m_out += ",\"stream\":";
            integer(m_s.stream(e));
            prepareStack(e.stack);
            m_out += ",\"stack\":";
            m_out += m_stackArgs[raw(e.stack)];
            m_out += "}}";
        }
    }

    // record_function ranges: each START paired with the next END of the same name on the same device (the newest
    // open one first, as ranges of one name nest), as async slices; an END without a START becomes an instant, a
    // START without an END lasts to the device's last annotation.
    void annotations()
    {
        std::map<std::pair<int, std::string_view>, std::vector<size_t>> open;
        std::map<int, int64_t> lastTime;
        for (const Annotation& a : m_s.annotations)
            lastTime[a.device] = std::max(lastTime[a.device], a.timeUs);
        // Ids with the top bit set, so they never meet an allocation's (device << 32 | index).
        uint64_t nextId = uint64_t(1) << 63;
        auto slice = [&](const Annotation& start, int64_t end) {
            char id[24];
            const auto r = std::to_chars(id, id + sizeof id, nextId++, 16);
            const std::string_view name = m_s.str(start.name);
            begin('b', name, start.device, 0, start.timeUs);
            m_out += ",\"cat\":\"record_function\",\"id\":\"0x";
            m_out.append(id, r.ptr);
            m_out += "\"}";
            begin('e', name, start.device, 0, std::max(start.timeUs, end));
            m_out += ",\"cat\":\"record_function\",\"id\":\"0x";
            m_out.append(id, r.ptr);
            m_out += "\"}";
        };
        for (size_t i = 0; i < m_s.annotations.size(); ++i) {
            const Annotation& a = m_s.annotations[i];
            const auto key = std::make_pair(a.device, m_s.str(a.name));
            if (a.stage == Annotation::Stage::Start) {
                open[key].push_back(i);
            } else if (a.stage == Annotation::Stage::End && !open[key].empty()) {
                slice(m_s.annotations[open[key].back()], a.timeUs);
                open[key].pop_back();
            } else {
                begin('i', m_s.str(a.name), a.device, 0, a.timeUs);
                m_out += ",\"s\":\"p\",\"cat\":\"record_function\"}";
            }
        }
        for (const auto& [key, starts] : open) {
            for (size_t i : starts)
                slice(m_s.annotations[i], lastTime[key.first]);
        }
    }

    const Snapshot& m_s;
    std::string m_out;
    bool m_first = true;
    std::vector<std::string> m_stackArgs;
    std::vector<std::string> m_stackNames;
    std::vector<bool> m_stackDone;
};

} // namespace

std::string encodePerfetto(const Snapshot& snapshot)
{
    PerfettoEncoder encoder(snapshot);
    return encoder.encode();
}

} // namespace memscope::io
