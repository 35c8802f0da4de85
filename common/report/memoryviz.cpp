// PyTorch-identical text reports. See memoryviz.h.
//
// Every function here mirrors one function of torch/cuda/_memory_viz.py (PyTorch 2.11), including its quirks,
// because the point is byte-for-byte parity with the reference outputs: e.g. trace()'s "TOTAL MEM" reuses the
// loop counter of `enumerate`, and names freed by `del` are never recycled (its free-list test compares a name
// with address keys, so it never matches).
#include "report/memoryviz.h"

#include "model/framefilter.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memscope::report {

using namespace memscope::model;

namespace {

// Python's floor division for the segsum page arithmetic (operands may be negative for empty ranges).
int64_t floorDiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        --q;
    return q;
}

void appendInt(std::string& out, int64_t v)
{
    char buf[24];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, p);
}

// Python's repr() of a float: the shortest string that round-trips, fixed notation for decimal exponents in
// [-4, 16), scientific otherwise (CPython Python/pystrtod.c, float_repr_style 'short').
std::string pythonFloatRepr(double v)
{
    if (std::isnan(v))
        return "nan";
    if (std::isinf(v))
        return v < 0 ? "-inf" : "inf";
    char buf[64];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string sci(buf, p); // e.g. "-1.2345e+02"
    const size_t e = sci.find('e');
    std::string mantissa = sci.substr(0, e);
    const int exponent = std::stoi(sci.substr(e + 1));
    const bool negative = mantissa[0] == '-';
    if (negative)
        mantissa.erase(0, 1);
    std::string digits;
    for (char c : mantissa)
        if (c != '.')
            digits += c;
    std::string out = negative ? "-" : "";
    if (exponent >= -4 && exponent < 16) {
        if (exponent < 0) {
            out += "0.";
            out.append(static_cast<size_t>(-exponent - 1), '0');
            out += digits;
        } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
            out += digits;
            out.append(static_cast<size_t>(exponent) + 1 - digits.size(), '0');
            out += ".0";
        } else {
            out += digits.substr(0, static_cast<size_t>(exponent) + 1);
            out += '.';
            out += digits.substr(static_cast<size_t>(exponent) + 1);
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
        out += '.';
        out += digits.substr(1);
    }
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
    return out;
}

std::string valueRepr(const Value& v)
{
    switch (v.kind) {
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.boolean ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.integer);
    case Value::Kind::UInt: return std::to_string(v.unsignedInteger);
    case Value::Kind::Float: return pythonFloatRepr(v.real);
    case Value::Kind::String: return pythonRepr(v.text);
    case Value::Kind::List:
    case Value::Kind::Tuple: {
        const bool tuple = v.kind == Value::Kind::Tuple;
        std::string out = tuple ? "(" : "[";
        for (size_t i = 0; i < v.items.size(); ++i) {
            if (i)
                out += ", ";
            out += valueRepr(v.items[i]);
        }
        if (tuple && v.items.size() == 1)
            out += ',';
        out += tuple ? ")" : "]";
        return out;
    }
    case Value::Kind::Dict: {
        std::string out = "{";
        for (size_t i = 0; i < v.entries.size(); ++i) {
            if (i)
                out += ", ";
            out += pythonRepr(v.entries[i].first);
            out += ": ";
            out += valueRepr(v.entries[i].second);
        }
        return out + "}";
    }
    }
    return "None";
}

std::string stackRepr(const Snapshot& s, StackId stack)
{
    std::string out = "[";
    for (const FrameId* f = s.stackBegin(stack); f != s.stackEnd(stack); ++f) {
        if (f != s.stackBegin(stack))
            out += ", ";
        const Frame& fr = s.frame(*f);
        out += "{'name': " + pythonRepr(s.str(fr.name)) + ", 'filename': " + pythonRepr(s.str(fr.filename))
            + ", 'line': " + fr.line.toString() + "}";
    }
    return out + "]";
}

// _memory_viz._block_extra / _block_extra_legacy: the frames and the size a block accounts for.
std::pair<StackId, ByteCount> blockExtra(const Snapshot& s, const Block& b, bool& hasFrames)
{
    if (b.hasFrames) {
        hasFrames = true;
        return { b.stack, b.hasRequestedSize ? b.requestedSize : b.size };
    }
    if (b.hasHistory && b.historyCount > 0) {
        const HistoryItem& h = s.history[b.historyBegin];
        hasFrames = h.hasFrames;
        return { h.stack, h.realSize };
    }
    hasFrames = false;
    return { EmptyStack, b.hasRequestedSize ? b.requestedSize : b.size };
}

// _memory_viz._write_blocks' frames_fragment: frames outermost first, filtered, ';'-joined.
void appendFramesFragment(std::string& out, const Snapshot& s, StackId stack)
{
    if (s.stackSize(stack) == 0) {
        out += "<non-python>";
        return;
    }
    bool first = true;
    for (const FrameId* f = s.stackEnd(stack); f != s.stackBegin(stack);) {
        const Frame& fr = s.frame(*--f);
        if (!model::keepFrame(s.str(fr.name), s.str(fr.filename)))
            continue;
        if (!first)
            out += ';';
        first = false;
        out += formatFrame(s, fr);
    }
}

void writeBlocks(std::string& out, const Snapshot& s, std::string_view prefix, const Segment& seg)
{
    for (uint32_t i = 0; i < seg.blockCount; ++i) {
        const Block& b = s.blocks[seg.blockBegin + i];
        const std::string_view state = s.str(b.stateName);
        ByteCount accounted = 0;
        if (!b.hasHistory) {
            bool hasFrames = false;
            auto [stack, size] = blockExtra(s, b, hasFrames);
            accounted = size;
            out += prefix;
            out += ';';
            out += state;
            out += ';';
            appendFramesFragment(out, s, stack);
            out += ' ';
            appendInt(out, size);
            out += '\n';
        } else {
            for (uint32_t h = 0; h < b.historyCount; ++h) {
                const HistoryItem& item = s.history[b.historyBegin + h];
                accounted += item.realSize;
                out += prefix;
                out += ';';
                out += state;
                out += ';';
                if (item.hasFrames)
                    appendFramesFragment(out, s, item.stack);
                else
                    out += "<no-context>";
                out += ' ';
                appendInt(out, item.realSize);
                out += '\n';
            }
        }
        const ByteCount gaps = b.size - accounted;
        if (gaps != 0) {
            out += prefix;
            out += ';';
            out += state;
            out += ";<gaps> ";
            appendInt(out, gaps);
            out += '\n';
        }
    }
}

std::string segmentPrefix(const Segment& seg)
{
    return "stream_" + std::to_string(seg.stream) + ";seg_" + std::to_string(seg.address);
}

} // namespace

std::string formatSize(double num)
{
    // _memory_viz._format_size: divide by 1024 until below it; "%3.1f" as Python's format() rounds (correctly
    // rounded from the binary value, as glibc's printf).
    static constexpr const char* Units[] = { "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi" };
    char buf[64];
    for (const char* unit : Units) {
        if (std::fabs(num) < 1024.0) {
            std::snprintf(buf, sizeof buf, "%3.1f%sB", num, unit);
            return buf;
        }
        num /= 1024.0;
    }
    std::snprintf(buf, sizeof buf, "%.1fYiB", num);
    return buf;
}

std::string formatFrame(const Snapshot& s, const Frame& frame, bool fullFilename)
{
    std::string_view file = s.str(frame.filename);
    if (!fullFilename) {
        const size_t slash = file.rfind('/');
        if (slash != std::string_view::npos)
            file.remove_prefix(slash + 1);
    }
    std::string out;
    out.reserve(file.size() + 24 + s.str(frame.name).size());
    out += file;
    out += ':';
    char line[24];
    out.append(line, frame.line.toChars(line, line + sizeof line)); // 2^64 - 1 stays 18446744073709551615
    out += ':';
    out += s.str(frame.name);
    return out;
}

std::string displayFrame(const Snapshot& s, const Frame& frame)
{
    std::string_view file = s.str(frame.filename);
    if (file.empty() || file == "??") {
        // A native frame the unwinder found no file for: its function, without the parameter list.
        std::string_view name = s.str(frame.name);
        if (const size_t paren = name.find('('); paren != std::string_view::npos && paren > 0)
            name = name.substr(0, paren);
        return std::string(name);
    }
    const size_t slash = file.find_last_of("/\\");
    if (slash != std::string_view::npos)
        file.remove_prefix(slash + 1);
    std::string out(file);
    out += ':';
    char line[24];
    out.append(line, frame.line.toChars(line, line + sizeof line));
    out += ':';
    out += s.str(frame.name);
    return out;
}

std::string pythonRepr(std::string_view text)
{
    // CPython unicode_repr: single quotes unless the text has ' and no ".
    const bool hasSingle = text.find('\'') != std::string_view::npos;
    const bool hasDouble = text.find('"') != std::string_view::npos;
    const char quote = hasSingle && !hasDouble ? '"' : '\'';
    std::string out(1, quote);
    for (unsigned char c : text) {
        if (c == quote || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c); // UTF-8 passes through: printable non-ASCII is shown as is
        }
    }
    out += quote;
    return out;
}

std::string pythonRepr(const Snapshot& s, const TraceEntry& e)
{
    std::string out = "{";
    const EntryForm& form = s.form(e);
    const auto& keys = s.layouts.get(form.layout);
    bool first = true;
    for (StringId keyId : keys) {
        const std::string_view key = s.str(keyId);
        std::string value;
        if (key == "action")
            value = pythonRepr(s.str(form.actionName));
        else if (key == "addr" || key == "device_free")
            value = std::to_string(e.addr);
        else if (key == "size")
            value = std::to_string(e.size);
        else if (key == "stream")
            value = std::to_string(form.stream);
        else if (key == "time_us")
            value = std::to_string(e.timeUs);
        else if (key == "compile_context")
            value = pythonRepr(s.str(form.compileContext));
        else if (key == "user_metadata")
            value = pythonRepr(s.str(form.userMetadata));
        else if (key == "frames")
            value = stackRepr(s, e.stack);
        else if (form.extraIndex != UINT32_MAX) {
            for (const auto& [k, v] : s.extras[form.extraIndex])
                if (k == key)
                    value = valueRepr(v);
        }
        if (!first)
            out += ", ";
        first = false;
        out += pythonRepr(key);
        out += ": ";
        out += value;
    }
    return out + "}";
}

std::string segmentsFolded(const Snapshot& s)
{
    std::string out;
    for (const Segment& seg : s.segments)
        writeBlocks(out, s, segmentPrefix(seg), seg);
    return out;
}

std::string memoryFolded(const Snapshot& s)
{
    std::string out;
    for (const Segment& seg : s.segments)
        writeBlocks(out, s, "stream_" + std::to_string(seg.stream), seg);
    return out;
}

std::string compareFolded(const Snapshot& before, const Snapshot& after)
{
    // Segments match by (address, total_size), as _memory_viz.compare's _seg_key.
    using Key = std::pair<DeviceAddr, ByteCount>;
    std::set<Key> beforeKeys, afterKeys;
    for (const Segment& seg : before.segments)
        beforeKeys.emplace(seg.address, seg.totalSize);
    for (const Segment& seg : after.segments)
        afterKeys.emplace(seg.address, seg.totalSize);
    std::string out;
    for (const Segment& seg : before.segments)
        if (!afterKeys.count({ seg.address, seg.totalSize }))
            writeBlocks(out, before, "only_before;" + segmentPrefix(seg), seg);
    for (const Segment& seg : after.segments)
        if (!beforeKeys.count({ seg.address, seg.totalSize }))
            writeBlocks(out, after, "only_after;" + segmentPrefix(seg), seg);
    return out;
}

std::string segsum(const Snapshot& s)
{
    constexpr int64_t PageSize = int64_t(1024) * 1024 * 20; // _memory_viz.PAGE_SIZE
    std::string out = "Summary of segments >= " + formatSize(PageSize) + " in size\n";

    // Sorted by (total_size, active bytes); Python's sort is stable.
    auto activeBytes = [&](const Segment& seg) {
        ByteCount n = 0;
        for (uint32_t i = 0; i < seg.blockCount; ++i) {
            const Block& b = s.blocks[seg.blockBegin + i];
            if (b.state == BlockState::ActiveAllocated)
                n += b.size;
        }
        return n;
    };
    std::vector<std::pair<std::pair<ByteCount, ByteCount>, const Segment*>> order;
    order.reserve(s.segments.size());
    for (const Segment& seg : s.segments)
        order.push_back({ { seg.totalSize, activeBytes(seg) }, &seg });
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

    auto reportFree = [](ByteCount external, ByteCount internal) {
        const ByteCount total = external + internal;
        std::string r = formatSize(static_cast<double>(total));
        if (total != 0) {
            char buf[64];
            std::snprintf(buf, sizeof buf, " (%.1f%% internal)",
                          static_cast<double>(internal) / static_cast<double>(total) * 100);
            r += buf;
        }
        return r;
    };

    ByteCount totalReserved = 0, totalAllocated = 0, freeExternal = 0, freeInternal = 0;
    struct Range {
        int64_t start, size;
    };
    std::vector<Range> ranges;
    std::string occupied;
    std::vector<double> frac;
    for (const auto& [key, segPtr] : order) {
        const Segment& seg = *segPtr;
        totalReserved += seg.totalSize;
        ByteCount segExternal = 0, segInternal = 0, segAllocated = 0;
        ranges.clear();
        int64_t offset = 0;
        for (uint32_t i = 0; i < seg.blockCount; ++i) {
            const Block& b = s.blocks[seg.blockBegin + i];
            if (b.state == BlockState::ActiveAllocated) {
                bool hasFrames = false;
                const ByteCount allocated = blockExtra(s, b, hasFrames).second;
                ranges.push_back({ offset, allocated });
                segAllocated += allocated;
                segInternal += b.size - allocated;
            } else {
                segExternal += b.size;
            }
            offset += b.size;
        }
        totalAllocated += segAllocated;
        freeExternal += segExternal;
        freeInternal += segInternal;

        const int64_t pages = floorDiv(seg.totalSize - 1, PageSize) + 1;
        occupied.assign(static_cast<size_t>(std::max<int64_t>(pages, 0)), ' ');
        frac.assign(occupied.size(), 0.0);
        for (size_t i = 0; i < ranges.size(); ++i) {
            const int64_t start = ranges[i].start, finish = ranges[i].start + ranges[i].size;
            const int64_t first = floorDiv(start, PageSize), last = floorDiv(finish - 1, PageSize) + 1;
            const char mark = static_cast<char>('a' + i % 26);
            for (int64_t j = std::max<int64_t>(first, 0); j < last && j < pages; ++j) {
                const int64_t a = std::max(start, j * PageSize), b = std::min(finish, (j + 1) * PageSize);
                frac[j] += static_cast<double>(b - a) / static_cast<double>(PageSize);
                if (occupied[j] != ' ') {
                    const int digit = std::clamp(static_cast<int>(frac[j] * 10), 0, 10);
                    occupied[j] = "0123456789*"[digit];
                } else {
                    occupied[j] = mark;
                }
            }
        }
        if (seg.totalSize >= PageSize) {
            out += '[';
            out += occupied;
            out += "] ";
            out += formatSize(static_cast<double>(seg.totalSize));
            out += " allocated, ";
            out += reportFree(segExternal, segInternal);
            out += " free";
            if (seg.stream != 0) {
                out += " stream_";
                appendInt(out, seg.stream);
            }
            out += '\n';
        }
    }
    out += "segments: " + std::to_string(s.segments.size()) + '\n';
    out += "total_reserved: " + formatSize(static_cast<double>(totalReserved)) + '\n';
    out += "total_allocated: " + formatSize(static_cast<double>(totalAllocated)) + '\n';
    out += "total_free: " + reportFree(freeExternal, freeInternal) + '\n';
    // The legend _memory_viz.segsum appends (its module-level `legend` string), reproduced for parity.
    out += "\nLegend:\n"
           "    [a     ] - a segment in the allocator\n"
           "     ^-- a page "
        + formatSize(PageSize)
        + " of memory in the segment\n"
          "    a-z: pages filled with a single block's content\n"
          "    ' ': page is completely free\n"
          "    *: page if completely full with multiple blocks\n"
          "    0-9: page is partially full with tensors of multiple blocks (9 == 90% full)\n"
          "    (X% internal) - of the free memory, X% is free because we rounded the size of the allocation.\n";
    return out;
}

std::string trace(const Snapshot& s)
{
    std::string out;
    for (size_t device = 0; device < s.deviceTraces.size(); ++device) {
        const auto& entries = s.deviceTraces[device];
        if (entries.empty())
            continue;
        out += "Device " + std::to_string(device) + " ----------------\n";
        out += std::to_string(entries.size()) + " entries\n";

        struct Interval {
            DeviceAddr addr;
            ByteCount size;
            std::string name;
        };
        std::vector<Interval> intervals; // every cudaMalloc seen, never removed (as _memory_viz does)
        std::unordered_map<DeviceAddr, std::string> segmentNames, allocationNames;
        uint64_t nextName = 0;
        auto newName = [&] {
            const uint64_t r = nextName / 26, m = nextName % 26;
            ++nextName;
            std::string n(1, static_cast<char>('a' + m));
            if (r)
                n += std::to_string(r);
            return n;
        };
        // _memory_viz.trace find_segment: the first cudaMalloc'd interval holding addr, else the index of a final
        // segment whose [address, address + allocated_size) holds it.
        auto findSegment = [&](DeviceAddr addr, std::string& name, DeviceAddr& base) {
            for (const Interval& iv : intervals) {
                if (addr >= iv.addr && addr < iv.addr + iv.size) {
                    name = iv.name;
                    base = iv.addr;
                    return true;
                }
            }
            for (size_t i = 0; i < s.segments.size(); ++i) {
                const Segment& seg = s.segments[i];
                if (addr >= seg.address && addr < seg.address + seg.allocatedSize) {
                    name = "seg_" + std::to_string(i);
                    base = seg.address;
                    return true;
                }
            }
            return false;
        };
        auto nameOr = [](const std::unordered_map<DeviceAddr, std::string>& names, DeviceAddr addr) {
            auto it = names.find(addr);
            return it == names.end() ? std::to_string(addr) : it->second;
        };

        int64_t count = 0;
        for (size_t index = 0; index < entries.size(); ++index) {
            const TraceEntry& e = entries[index];
            // `for count, e in enumerate(entries)`: the running total is reset to the index every iteration.
            count = static_cast<int64_t>(index);
            switch (e.action) {
            case Action::Alloc: {
                const std::string n = newName();
                std::string segName;
                DeviceAddr base = 0;
                int64_t offset = e.addr;
                if (findSegment(e.addr, segName, base))
                    offset = e.addr - base;
                else
                    segName = "MEM";
                out += n + " = " + segName + '[' + std::to_string(offset) + ':' + formatSize(double(e.size)) + "]\n";
                allocationNames[e.addr] = n;
                count += e.size;
                break;
            }
            case Action::FreeRequested:
                out += "del " + nameOr(allocationNames, e.addr) + " # " + formatSize(double(e.size)) + '\n';
                break;
            case Action::FreeCompleted:
                if (s.str(s.form(e).actionName) != "free_completed")
                    goto other; // a legacy "free" is printed as a dict by _memory_viz
                count -= e.size;
                out += "# free completed for " + nameOr(allocationNames, e.addr) + ' ' + formatSize(double(e.size))
                    + '\n';
                break;
            case Action::SegmentAlloc: {
                const std::string n = newName();
                out += n + " = cudaMalloc(" + std::to_string(e.addr) + ", " + formatSize(double(e.size)) + ")\n";
                intervals.push_back({ e.addr, e.size, n });
                segmentNames[e.addr] = n;
                break;
            }
            case Action::SegmentFree:
                out += "cudaFree(" + nameOr(segmentNames, e.addr) + ") # " + formatSize(double(e.size)) + '\n';
                break;
            case Action::Oom:
                out += "raise OutOfMemoryError # " + formatSize(double(e.size)) + " requested, "
                    + formatSize(double(e.addr)) + " free in CUDA\n";
                break;
            default:
            other:
                out += pythonRepr(s, e);
                out += '\n';
            }
        }
        // No newline: PyTorch's output runs the next "Device" header onto this line.
        out += "TOTAL MEM: " + formatSize(double(count));
    }
    return out;
}

} // namespace memscope::report
