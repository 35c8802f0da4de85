// Load warnings: what was wrong with a snapshot that could still be opened (a field left out, blocks that do not
// tile their segment, a trace that does not replay to the final state, ...). One LoadWarning per kind, with how many
// times it was met and the first example, so a file with a million bad entries still gives one line per kind.
// Plain value types; WarningCollector belongs to whoever fills it (one thread), the results are read from any.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::model {

struct LoadWarning {
    enum class Kind : uint8_t {
        LostInteger, // an integer the field cannot hold (io/snapshotbuilder.cpp): the field keeps its default
        NegativeSize, // a segment's or block's size or total below zero
        BlockLargerThanSegment, // a block larger than the segment that holds it
        BlocksDoNotTile, // blocks that do not tile their segment exactly (model/consistency.cpp)
        SegmentTotals, // allocated/active/requested sizes that disagree with the blocks
        OverlappingSegments, // two segments of one device share addresses
        NegativeTraceSize, // trace entries with a negative size
        TraceDoesNotReplay, // trace entries the replay could not reconcile with the final state (model/replay.h)
        Count
    };
    Kind kind = Kind::LostInteger;
    uint64_t count = 0;
    // One line, without the file: how many, then the first example ("2 segments ..., first: segment 0x7f.. ...").
    std::string message;
};

// A short stable name for a kind ("lost-integer", "blocks-do-not-tile", ...), for tests and machine output.
std::string_view warningKindName(LoadWarning::Kind kind);

// "FILE: warning: MESSAGE": the one line a front end shows for a warning.
std::string warningLine(std::string_view file, const LoadWarning& warning);

// "0x7f1234000000": an address as the warnings (and PyTorch's viewer) spell it.
std::string hexAddress(int64_t address);

// Counts problems per kind and keeps the first example of each; appendTo() makes one LoadWarning per kind met.
// The example is a callable, made into text only for the first problem of its kind (a bad file may have millions).
class WarningCollector {
public:
    template <typename Example> void add(LoadWarning::Kind kind, const Example& example, uint64_t count = 1)
    {
        Slot& slot = m_slots[size_t(kind)];
        if (slot.count == 0)
            slot.first = example();
        slot.count += count;
    }
    bool empty() const;
    uint64_t count(LoadWarning::Kind kind) const { return m_slots[size_t(kind)].count; }
    // Appends one warning per kind met, in Kind order.
    void appendTo(std::vector<LoadWarning>& out) const;

private:
    struct Slot {
        uint64_t count = 0;
        std::string first;
    };
    std::array<Slot, size_t(LoadWarning::Kind::Count)> m_slots;
};

} // namespace memscope::model
