// Load warnings: names, the one-line text per kind. See loadwarning.h.
#include "model/loadwarning.h"

#include <cstdio>

namespace memscope::model {

namespace {

    // "how many, of what" for each kind, singular and plural.
    struct Phrase {
        std::string_view kindName, one, many;
    };
    constexpr Phrase Phrases[] = {
        { "lost-integer", "1 integer did not fit its field and was left out",
          " integers did not fit their fields and were left out" },
        { "negative-size", "1 negative size", " negative sizes" },
        { "block-larger-than-segment", "1 block is larger than its segment", " blocks are larger than their segments" },
        { "blocks-do-not-tile", "1 segment is not tiled exactly by its blocks",
          " segments are not tiled exactly by their blocks" },
        { "segment-totals", "1 segment's allocated, active or requested size disagrees with its blocks",
          " segments' allocated, active or requested sizes disagree with their blocks" },
        { "overlapping-segments", "1 segment overlaps another segment of its device",
          " segments overlap other segments of their device" },
        { "negative-trace-size", "1 trace entry has a negative size", " trace entries have negative sizes" },
        { "trace-does-not-replay", "1 place where the trace does not replay to the final state",
          " places where the trace does not replay to the final state" },
    };
    static_assert(std::size(Phrases) == size_t(LoadWarning::Kind::Count));

} // namespace

std::string_view warningKindName(LoadWarning::Kind kind)
{
    return kind < LoadWarning::Kind::Count ? Phrases[size_t(kind)].kindName : std::string_view("?");
}

std::string warningLine(std::string_view file, const LoadWarning& warning)
{
    std::string out(file.empty() ? std::string_view("<input>") : file);
    out += ": warning: ";
    out += warning.message;
    return out;
}

std::string hexAddress(int64_t address)
{
    char buf[24];
    std::snprintf(buf, sizeof buf, address < 0 ? "-0x%llx" : "0x%llx",
                  static_cast<unsigned long long>(address < 0 ? 0 - static_cast<uint64_t>(address) : address));
    return buf;
}

bool WarningCollector::empty() const
{
    for (const Slot& slot : m_slots)
        if (slot.count)
            return false;
    return true;
}

void WarningCollector::appendTo(std::vector<LoadWarning>& out) const
{
    for (size_t k = 0; k < m_slots.size(); ++k) {
        const Slot& slot = m_slots[k];
        if (slot.count == 0)
            continue;
        LoadWarning w;
        w.kind = LoadWarning::Kind(k);
        w.count = slot.count;
        w.message
            = slot.count == 1 ? std::string(Phrases[k].one) : std::to_string(slot.count) + std::string(Phrases[k].many);
        if (!slot.first.empty())
            w.message += ", first: " + slot.first;
        out.push_back(std::move(w));
    }
}

} // namespace memscope::model
