// The stacking engine of the memory timelines. See timeline.h.
#include "model/timeline.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace memscope::model {

namespace {

    // First position in items.byEnd whose item ends at or after `state`.
    size_t firstEndingAtOrAfter(const TimelineItems& items, int64_t state)
    {
        const auto it = std::partition_point(items.endByEnd.begin(), items.endByEnd.end(),
                                             [&](TraceIndex e) { return e < state; });
        return size_t(it - items.endByEnd.begin());
    }

    // First item whose begin is at or after `state`.
    size_t firstBeginningAtOrAfter(const TimelineItems& items, int64_t state)
    {
        const auto it
            = std::partition_point(items.begin.begin(), items.begin.end(), [&](TraceIndex b) { return b < state; });
        return size_t(it - items.begin.begin());
    }

    // An item whose end is not after its begin is never live (only in inconsistent input); it is never stacked.
    bool everLive(const TimelineItems& items, TimelineItem k) { return items.begin[k] < items.end[k]; }

} // namespace

void TimelineItems::finish()
{
    if (count() < size_t(entryCount) / 8) {
        // Few items over a long trace (segment pieces): a comparison sort beats buckets for every entry.
        byEnd.resize(count());
        for (TimelineItem k = 0; k < count(); ++k)
            byEnd[k] = k;
        std::stable_sort(byEnd.begin(), byEnd.end(), [&](TimelineItem a, TimelineItem b) { return end[a] < end[b]; });
    } else {
        // Counting sort by end: ends lie in [-1, entryCount].
        const size_t buckets = size_t(entryCount) + 3;
        std::vector<uint32_t> start(buckets + 1, 0);
        auto key = [&](TimelineItem k) { return size_t(std::clamp<int64_t>(int64_t(end[k]) + 1, 0, entryCount + 1)); };
        for (TimelineItem k = 0; k < count(); ++k)
            ++start[key(k) + 1];
        for (size_t b = 0; b < buckets; ++b)
            start[b + 1] += start[b];
        byEnd.assign(count(), 0);
        for (TimelineItem k = 0; k < count(); ++k)
            byEnd[start[key(k)]++] = k;
    }
    endByEnd.resize(count());
    for (size_t i = 0; i < count(); ++i)
        endByEnd[i] = end[byEnd[i]];
    byPending.clear();
    for (TimelineItem k = 0; k < count(); ++k)
        if (pendingFrom[k] < end[k])
            byPending.push_back(k);
    std::stable_sort(byPending.begin(), byPending.end(),
                     [&](TimelineItem a, TimelineItem b) { return pendingFrom[a] < pendingFrom[b]; });
    pendingByPending.resize(byPending.size());
    for (size_t i = 0; i < byPending.size(); ++i)
        pendingByPending[i] = pendingFrom[byPending[i]];
}

void TimelineItems::setHugePages(bool on)
{
    begin.setHugePages(on);
    end.setHugePages(on);
    size.setHugePages(on);
    pendingFrom.setHugePages(on);
    byEnd.setHugePages(on);
    endByEnd.setHugePages(on);
}

TimelineItems TimelineItems::fromAllocations(const Replay& replay)
{
    const auto& allocs = replay.allocations();
    return fromAllocations(std::span<const Allocation>(allocs.data(), allocs.size()), replay.entryCount());
}

TimelineItems TimelineItems::fromAllocations(std::span<const Allocation> allocs, int64_t entryCount,
                                             const std::atomic<bool>* stop, bool hugePages)
{
    TimelineItems items;
    items.entryCount = entryCount;
    items.setHugePages(hugePages);
    items.begin.reserve(allocs.size());
    items.end.reserve(allocs.size());
    items.size.reserve(allocs.size());
    items.pendingFrom.reserve(allocs.size());
    constexpr size_t StopCheck = size_t(1) << 20; // allocations between two looks at `stop`
    for (size_t i = 0; i < allocs.size(); ++i) {
        if (stop && i % StopCheck == 0 && stop->load(std::memory_order_relaxed))
            return items;
        const Allocation& a = allocs[i];
        items.begin.push_back(a.allocIndex);
        items.end.push_back(a.freeCompletedIndex);
        items.size.push_back(a.size);
        // Pending (active_pending_free) iff live and state > freeRequestedIndex. Not when free_completed follows
        // its free_requested directly: MemoryViz.js (annotate_snapshot) elides that pair into one `free`, and the
        // one state in between is no record_stream delay worth a red mark.
        items.pendingFrom.push_back(a.freeRequestedIndex + 1 < a.freeCompletedIndex ? a.freeRequestedIndex : INT32_MAX);
    }
    items.finish();
    return items;
}

TimelineItems TimelineItems::fromSegments(const Replay& replay)
{
    return fromSegments(replay.segmentPieces(), replay.entryCount());
}

TimelineItems TimelineItems::fromSegments(std::span<const SegmentPiece> pieces, int64_t entryCount)
{
    TimelineItems items;
    items.entryCount = entryCount;
    for (const SegmentPiece& p : pieces) {
        items.begin.push_back(p.beginIndex);
        items.end.push_back(p.endIndex);
        items.size.push_back(p.size);
        items.pendingFrom.push_back(INT32_MAX);
    }
    items.finish();
    return items;
}

namespace {

    // extendAllocations / extendSegments: `fill(k)` (re)writes item k's fields from the grown replay.
    template <typename Fill> void extendItems(TimelineItems& items, int64_t entryCount, size_t count, Fill fill)
    {
        const TraceIndex oldEnd = TraceIndex(items.entryCount);
        const TraceIndex newEnd = TraceIndex(entryCount);
        const size_t oldCount = items.count();
        // The items alive at the old end are the last run of byEnd (end == old entry count), in index order.
        const size_t open = size_t(std::lower_bound(items.endByEnd.begin(), items.endByEnd.end(), oldEnd)
                                   - items.endByEnd.begin());
        std::vector<TimelineItem> wereOpen(items.byEnd.begin() + ptrdiff_t(open), items.byEnd.end());
        items.byEnd.resize(open);
        items.endByEnd.resize(open);
        items.begin.resize(count);
        items.end.resize(count);
        items.size.resize(count);
        items.pendingFrom.resize(count);
        // Every changed item ends at or after the old end, every kept one before it, so byEnd stays what finish()
        // makes (a stable sort by end) by appending the changed ones in (end, index) order: those that ended since
        // (few: the frees among the new entries) sorted, then those still alive at the new end, which are in index
        // order already (the ones alive before, in index order, then the new ones). O(changed), plus a sort of the
        // ended ones: a live timeline grows by a few thousand entries at a time onto millions of items.
        std::vector<TimelineItem> ended, stillOpen, changed;
        stillOpen.reserve(wereOpen.size());
        auto place = [&](TimelineItem k) {
            fill(k);
            (items.end[k] < newEnd ? ended : stillOpen).push_back(k);
            changed.push_back(k);
        };
        for (TimelineItem k : wereOpen)
            place(k);
        for (size_t k = oldCount; k < count; ++k)
            place(TimelineItem(k));
        items.entryCount = entryCount;
        std::sort(ended.begin(), ended.end(), [&](TimelineItem a, TimelineItem b) {
            return items.end[a] != items.end[b] ? items.end[a] < items.end[b] : a < b;
        });
        for (const auto* part : { &ended, &stillOpen })
            for (TimelineItem k : *part) {
                items.byEnd.push_back(k);
                items.endByEnd.push_back(items.end[k]);
            }
        // Pending items: few (record_stream); rebuilt from those kept plus the changed ones. O(changed log changed),
        // never O(items).
        std::erase_if(items.byPending, [&](TimelineItem k) {
            return std::binary_search(changed.begin(), changed.end(), k);
        });
        for (TimelineItem k : changed)
            if (items.pendingFrom[k] < items.end[k])
                items.byPending.push_back(k);
        std::stable_sort(items.byPending.begin(), items.byPending.end(), [&](TimelineItem a, TimelineItem b) {
            return items.pendingFrom[a] != items.pendingFrom[b] ? items.pendingFrom[a] < items.pendingFrom[b] : a < b;
        });
        items.pendingByPending.resize(items.byPending.size());
        for (size_t i = 0; i < items.byPending.size(); ++i)
            items.pendingByPending[i] = items.pendingFrom[items.byPending[i]];
        // Items that are extended keep growing (a live document's timeline, on the GUI thread): the next pages of
        // their arrays are faulted in on another thread meanwhile (model/prefault.h).
        constexpr size_t Ahead = size_t(1) << 16;
        items.begin.prefaultAhead(Ahead);
        items.end.prefaultAhead(Ahead);
        items.size.prefaultAhead(Ahead);
        items.pendingFrom.prefaultAhead(Ahead);
        items.byEnd.prefaultAhead(Ahead);
        items.endByEnd.prefaultAhead(Ahead);
    }

} // namespace

void TimelineItems::extendAllocations(const Replay& replay)
{
    const auto& allocs = replay.allocations();
    extendItems(*this, replay.entryCount(), allocs.size(), [&](TimelineItem k) {
        const Allocation& a = allocs[k];
        begin[k] = a.allocIndex;
        end[k] = a.freeCompletedIndex;
        size[k] = a.size;
        pendingFrom[k] = a.freeRequestedIndex + 1 < a.freeCompletedIndex ? a.freeRequestedIndex : INT32_MAX;
    });
}

void TimelineItems::extendSegments(const Replay& replay)
{
    const auto& pieces = replay.segmentPieces();
    extendItems(*this, replay.entryCount(), pieces.size(), [&](TimelineItem k) {
        const SegmentPiece& p = pieces[k];
        begin[k] = p.beginIndex;
        end[k] = p.endIndex;
        size[k] = p.size;
        pendingFrom[k] = INT32_MAX;
    });
}

namespace {

    // pieceOfAllocations' sweep over the allocations from `out.size()` on, in begin order: `byEnd` the pieces that may
    // still end, by end (then index); `live` (by address) the pieces live at the first one's alloc index, and
    // `nextBegin` the first piece not looked at yet (pieces are by begin order).
    void sweepAllocations(const Replay& replay, std::span<const uint32_t> byEnd, size_t nextBegin,
                          std::map<DeviceAddr, uint32_t>& live, std::vector<TimelineItem>& out)
    {
        const auto& allocs = replay.allocations();
        const auto& pieces = replay.segmentPieces();
        size_t nextEnd = 0;
        for (size_t a = out.size(); a < allocs.size(); ++a) {
            const TraceIndex at = allocs[a].allocIndex;
            while (nextEnd < byEnd.size() && pieces[byEnd[nextEnd]].endIndex <= at) {
                const uint32_t p = byEnd[nextEnd++];
                const auto it = live.find(pieces[p].address);
                if (it != live.end() && it->second == p)
                    live.erase(it);
            }
            while (nextBegin < pieces.size() && pieces[nextBegin].beginIndex <= at) {
                const uint32_t p = uint32_t(nextBegin++);
                if (pieces[p].endIndex > at)
                    live[pieces[p].address] = p;
            }
            TimelineItem holder = NoTimelineItem;
            auto it = live.upper_bound(allocs[a].address);
            if (it != live.begin()) {
                --it;
                if (allocs[a].address < it->first + pieces[it->second].size)
                    holder = it->second;
            }
            out.push_back(holder);
        }
    }

} // namespace

std::vector<TimelineItem> pieceOfAllocations(const Replay& replay)
{
    const auto& pieces = replay.segmentPieces();
    std::vector<TimelineItem> out;
    out.reserve(replay.allocations().size());
    std::vector<uint32_t> byEnd(pieces.size());
    for (uint32_t p = 0; p < pieces.size(); ++p)
        byEnd[p] = p;
    std::stable_sort(byEnd.begin(), byEnd.end(),
                     [&](uint32_t a, uint32_t b) { return pieces[a].endIndex < pieces[b].endIndex; });
    // Sweep the allocations in begin order with the pieces live at each one's first state (allocIndex + 1): those
    // with beginIndex <= allocIndex < endIndex.
    std::map<DeviceAddr, uint32_t> live; // by address
    sweepAllocations(replay, byEnd, 0, live, out);
    return out;
}

void extendPieceOfAllocations(const Replay& replay, const TimelineItems& pieceItems, std::vector<TimelineItem>& out)
{
    const auto& allocs = replay.allocations();
    const auto& pieces = replay.segmentPieces();
    if (out.size() >= allocs.size())
        return;
    // The sweep resumed at the first new allocation: the pieces live there begin at or before it and end after it,
    // found by end among the few that end that late (pieceItems.byEnd: by end, then index, as the sweep's order).
    const TraceIndex start = allocs[out.size()].allocIndex;
    const size_t stillOpen = firstEndingAtOrAfter(pieceItems, int64_t(start) + 1);
    const std::span<const uint32_t> byEnd(pieceItems.byEnd.data() + stillOpen,
                                          pieceItems.byEnd.data() + pieceItems.byEnd.size());
    std::vector<uint32_t> open;
    for (uint32_t p : byEnd)
        if (pieces[p].beginIndex <= start)
            open.push_back(p);
    std::sort(open.begin(), open.end()); // in begin order, as the sweep adds them
    std::map<DeviceAddr, uint32_t> live;
    for (uint32_t p : open)
        live[pieces[p].address] = p;
    sweepAllocations(replay, byEnd, firstBeginningAtOrAfter(pieceItems, int64_t(start) + 1), live, out);
}

void sampleColumns(const TimelineItems& items, std::span<const uint8_t> visible, std::span<const int64_t> lo,
                   std::span<const int64_t> hi, TimelineColumns& out, size_t firstColumn)
{
    const size_t columns = std::min(lo.size(), hi.size());
    const size_t known = out.walk.empty() ? 0 : out.walk.size() - 1; // columns of the earlier call
    firstColumn = std::min({ firstColumn, columns, known });
    out.state.resize(columns);
    out.total.resize(columns);
    out.maxTotal = 0;
    for (size_t x = 0; x < firstColumn; ++x)
        out.maxTotal = std::max(out.maxTotal, out.total[x]);
    if (columns == 0) {
        out.walk.clear();
        return;
    }
    if (firstColumn == columns) { // nothing changed; the walk after the last column is where column `columns` began
        out.walk.resize(columns + 1);
        return;
    }
    const int64_t n = items.entryCount;
    // What each item adds to the total while live: its size, or 0 when hidden or never live, so the walk below tests
    // nothing. Without filters, and with every item live at some point (only inconsistent input has one that is
    // not), that is the items' sizes as they are: no array of its own (36 MB for 4.5 M items, in every thread that
    // samples them, written before the first picture). Otherwise the values go in out.scratch; resuming, those of the
    // items known before are what they were: only the new ones are computed (an item that was live at the old end
    // keeps its begin and its size; its end only moves later). Whether every item is ever live is asked of the new
    // ones only, too.
    bool sizesAsIs = visible.empty() && (firstColumn == 0 || out.sizesAsIs);
    for (TimelineItem k = firstColumn > 0 ? TimelineItem(std::min(out.itemsSeen, items.count())) : 0;
         sizesAsIs && k < items.count(); ++k)
        sizesAsIs = everLive(items, k);
    const ByteCount* effective = items.size.data();
    if (sizesAsIs) {
        out.scratch = GrowingArray<ByteCount>(); // (not `= {}`: the initializer-list assignment keeps the memory)
    } else {
        GrowingArray<ByteCount>& values = out.scratch;
        const TimelineItem knownItems = firstColumn > 0 ? TimelineItem(std::min(values.size(), items.count())) : 0;
        // Every new value is written below. In 2 MiB pages: a first sampling of 4.5 M items (36 MB, on the GUI
        // thread) spent ~0.1 s in 4 KiB faults. A live timeline's grows into a new 2 MiB page once per 262 k items, a
        // few ms (bench_live at 1 M events/s: the GUI's longest stall 114-131 ms against 159-265 ms before, paints as
        // many).
        values.setHugePages(true);
        values.resizeForOverwrite(items.count());
        for (TimelineItem k = knownItems; k < items.count(); ++k)
            values[k] = (visible.empty() || visible[k]) && everLive(items, k) ? items.size[k] : 0;
        effective = values.data();
    }
    out.sizesAsIs = sizesAsIs;
    out.itemsSeen = items.count();

    int64_t s;
    size_t nextAdd, nextRemove;
    ByteCount total = 0;
    if (firstColumn > 0) {
        const TimelineColumns::Walk& w = out.walk[firstColumn];
        s = w.state;
        nextAdd = w.nextAdd;
        nextRemove = w.nextRemove;
        total = w.total;
    } else {
        out.walk.clear();
        s = std::clamp<int64_t>(lo[0], 0, n);
        nextAdd = firstBeginningAtOrAfter(items, s);
        nextRemove = firstEndingAtOrAfter(items, s);
        for (TimelineItem k = 0; k < nextAdd; ++k)
            if (items.end[k] >= s)
                total += effective[k];
    }
    const TraceIndex* const begins = items.begin.data();
    const TraceIndex* const ends = items.endByEnd.data();
    const TimelineItem* const byEnd = items.byEnd.data();
    const size_t count = items.count();

    // Applies entry s: the state moves from s to s + 1.
    auto step = [&] {
        while (nextRemove < count && ends[nextRemove] == s)
            total -= effective[byEnd[nextRemove++]];
        while (nextAdd < count && begins[nextAdd] == s)
            total += effective[nextAdd++];
        ++s;
    };

    out.walk.resize(columns + 1);
    for (size_t x = firstColumn; x < columns; ++x) {
        out.walk[x] = { s, nextAdd, nextRemove, total };
        const int64_t first = std::clamp<int64_t>(lo[x], 0, n);
        const int64_t last = std::clamp<int64_t>(hi[x], first + 1, n + 1); // exclusive
        while (s < first)
            step();
        ByteCount best = total;
        int64_t bestState = s;
        while (s + 1 < last) {
            step();
            if (total > best) {
                best = total;
                bestState = s;
            }
        }
        out.state[x] = bestState;
        out.total[x] = best;
        out.maxTotal = std::max(out.maxTotal, best);
    }
    out.walk[columns] = { s, nextAdd, nextRemove, total };
}

void TimelineStack::bind(const TimelineItems* items, std::span<const uint8_t> visible, std::span<const uint32_t> colors)
{
    m_items = items;
    m_visible = visible;
    m_colors = colors;
    // Only read for stacked items, which add() has written: no need to clear it. Filled on a rendering thread, in
    // 2 MiB pages: 4 KiB faults were most of a first render's (4.5 M items: 18 MB per rendering thread).
    m_itemSlot.setHugePages(true);
    m_itemSlot.resizeForOverwrite(items ? items->count() : 0);
    clear(0);
}

void TimelineStack::pushSlot(Slot slot, uint32_t item)
{
    const uint32_t id = uint32_t(m_slotIndex.size());
    m_slotIndex.push_back(uint32_t(m_slots.size()));
    m_slotParent.push_back(id);
    m_slots.push_back(slot);
    m_slotItems.push_back(item);
    m_slotIds.push_back(id);
}

void TimelineStack::setColours(ByteCount tallBytes, uint32_t neutral, uint32_t pending)
{
    if (tallBytes == m_tall && neutral == m_neutral && pending == m_pending)
        return;
    const bool restack = tallBytes != m_tall && !m_slots.empty();
    m_tall = tallBytes;
    m_neutral = neutral;
    m_pending = pending;
    if (restack) {
        reset(m_state);
        return;
    }
    for (size_t i = 0; i < m_slots.size(); ++i)
        m_slots[i].color = (m_slotItems[i] & RunFlag) ? m_neutral : colourOf(m_slotItems[i]);
}

bool TimelineStack::isStacked(TimelineItem k) const
{
    return (m_visible.empty() || m_visible[k]) && m_items->size[k] > 0 && everLive(*m_items, k);
}

uint32_t TimelineStack::colourOf(TimelineItem k) const
{
    if (m_state > m_items->pendingFrom[k])
        return m_pending;
    return m_colors.empty() ? 0u : m_colors[k];
}

void TimelineStack::add(TimelineItem k)
{
    if (!isStacked(k))
        return;
    const ByteCount size = m_items->size[k];
    ++m_live;
    m_total += size;
    if (size < m_tall) {
        // A thin item joins the run at the top, or starts one.
        if (!m_slots.empty() && (m_slotItems.back() & RunFlag) && m_slots.back().size > 0) {
            m_slots.back().size += size;
            m_slotItems.back() = k | RunFlag;
        } else {
            pushSlot(Slot { size, m_neutral }, k | RunFlag);
        }
    } else {
        pushSlot(Slot { size, colourOf(k) }, k);
    }
    m_itemSlot[k] = m_slotIds.back();
}

size_t TimelineStack::slotOf(TimelineItem k) const
{
    uint32_t id = m_itemSlot[k];
    uint32_t root = id;
    while (m_slotParent[root] != root)
        root = m_slotParent[root];
    while (m_slotParent[id] != root) { // path compression: chains stay short
        const uint32_t next = m_slotParent[id];
        m_slotParent[id] = root;
        id = next;
    }
    return m_slotIndex[root];
}

void TimelineStack::remove(TimelineItem k)
{
    // Stacked items are exactly the stacked-kind ones that began before the current state (an item that begins
    // and ends within one advance is never added), so no per-item record is needed.
    if (!isStacked(k) || m_items->begin[k] >= m_state)
        return;
    const size_t i = slotOf(k);
    const ByteCount size = m_items->size[k];
    m_slots[i].size -= size;
    if (m_slots[i].size == 0)
        ++m_dead;
    --m_live;
    m_total -= size;
}

void TimelineStack::compact()
{
    // Drop empty slots and merge runs that became neighbours.
    // Drop empty slots and merge runs that became neighbours (the merged run's id then points at the survivor, so
    // its items still find it).
    size_t out = 0;
    for (size_t i = 0; i < m_slots.size(); ++i) {
        if (m_slots[i].size == 0)
            continue;
        if (out > 0 && (m_slotItems[i] & RunFlag) && (m_slotItems[out - 1] & RunFlag)) {
            m_slots[out - 1].size += m_slots[i].size;
            m_slotItems[out - 1] = m_slotItems[i];
            m_slotParent[m_slotIds[i]] = m_slotIds[out - 1];
            continue;
        }
        m_slots[out] = m_slots[i];
        m_slotItems[out] = m_slotItems[i];
        m_slotIds[out] = m_slotIds[i];
        m_slotIndex[m_slotIds[i]] = uint32_t(out);
        ++out;
    }
    m_slots.resize(out);
    m_slotItems.resize(out);
    m_slotIds.resize(out);
    m_dead = 0;
}

void TimelineStack::clear(int64_t state)
{
    m_slots.clear();
    m_slotItems.clear();
    m_slotIds.clear();
    m_slotIndex.clear();
    m_slotParent.clear();
    m_dead = 0;
    m_live = 0;
    m_total = 0;
    m_state = m_items ? std::clamp<int64_t>(state, 0, m_items->entryCount) : 0;
    m_nextAdd = m_items ? firstBeginningAtOrAfter(*m_items, m_state) : 0;
    m_nextRemove = m_items ? firstEndingAtOrAfter(*m_items, m_state) : 0;
    m_nextPending = m_items
        ? size_t(std::partition_point(m_items->pendingByPending.begin(), m_items->pendingByPending.end(),
                                      [&](TraceIndex p) { return p < m_state; })
                 - m_items->pendingByPending.begin())
        : 0;
}

void TimelineStack::reset(int64_t state)
{
    clear(state);
    if (!m_items)
        return;
    for (TimelineItem k = 0; k < m_nextAdd; ++k)
        if (m_items->end[k] >= m_state)
            add(k);
}

void TimelineStack::reset(int64_t state, std::span<const TimelineItem> live)
{
    clear(state);
    if (!m_items)
        return;
    // Stack them in item order, which appending keeps. m_scratch keeps its capacity between calls.
    m_scratch.assign(live.begin(), live.end());
    std::sort(m_scratch.begin(), m_scratch.end());
    m_scratch.erase(std::unique(m_scratch.begin(), m_scratch.end()), m_scratch.end());
    for (TimelineItem k : m_scratch)
        if (k < m_items->count() && m_items->liveAt(k, m_state))
            add(k);
}

void TimelineStack::advanceTo(int64_t state)
{
    if (!m_items)
        return;
    state = std::clamp<int64_t>(state, 0, m_items->entryCount);
    if (state <= m_state)
        return;
    const TimelineItems& items = *m_items;
    // Every removal before every addition: an item that begins and ends in between is then never stacked (its
    // removal finds it not begun yet, and its addition is skipped because it has already ended).
    while (m_nextRemove < items.byEnd.size() && items.endByEnd[m_nextRemove] < state)
        remove(items.byEnd[m_nextRemove++]);
    m_state = state; // additions take their colour at the new state
    while (m_nextAdd < items.count() && items.begin[m_nextAdd] < state) {
        const TimelineItem k = TimelineItem(m_nextAdd++);
        if (items.end[k] >= state)
            add(k);
    }
    // Items whose free was requested in between turn pending (an O(log) recolouring, rather than a test per item
    // per column). Thin items stay in their neutral run.
    while (m_nextPending < items.byPending.size() && items.pendingByPending[m_nextPending] < state) {
        const TimelineItem k = items.byPending[m_nextPending++];
        if (!items.liveAt(k, state) || !isStacked(k) || items.size[k] < m_tall)
            continue;
        m_slots[slotOf(k)].color = m_pending;
    }
    // Compact once empty slots make up an eighth: every column walks every slot, so few tombstones pay for the
    // O(slots) compaction (amortised O(1) per removal).
    if (m_dead > m_slots.size() / 8 + 16)
        compact();
}

ByteCount TimelineStack::offsetOf(TimelineItem item) const
{
    if (!m_items || item >= m_items->count() || !isStacked(item) || !m_items->liveAt(item, m_state))
        return -1;
    const size_t i = slotOf(item);
    if (m_slotItems[i] != item)
        return -1; // in a run
    ByteCount offset = 0;
    for (size_t j = 0; j < i; ++j)
        offset += m_slots[j].size;
    return offset;
}

TimelineItem TimelineStack::itemAt(ByteCount bytes, ByteCount* offset) const
{
    if (bytes < 0)
        return NoTimelineItem;
    ByteCount below = 0;
    for (size_t i = 0; i < m_slots.size(); ++i) {
        const ByteCount size = m_slots[i].size;
        if (size > 0 && bytes < below + size) {
            if (m_slotItems[i] & RunFlag)
                return NoTimelineItem;
            if (offset)
                *offset = below;
            return m_slotItems[i];
        }
        below += size;
    }
    return NoTimelineItem;
}

TimelineRows::TimelineRows(double bytesPerPixel, int height)
    : m_scale(uint64_t(std::ldexp(1.0, Shift) / std::max(bytesPerPixel, 1.0 / 128))) // < 2^63
    , m_height(uint64_t(std::max(height, 0)))
{
}

ByteCount tallBytes(const TimelineRaster& raster)
{
    // An item is "tall" (drawn in its own colour) when it spans at least one pixel row.
    return ByteCount(std::ceil(std::max(raster.bytesPerPixel, 0.0)));
}

void rasterize(TimelineStack& stack, const TimelineColumns& columns, const TimelineRaster& raster,
               TimelineRasterScratch& scratch, int firstColumn, int endColumn)
{
    const int width = std::min<int>(raster.width, int(columns.state.size()));
    const int height = raster.height;
    endColumn = endColumn < 0 ? width : std::min(endColumn, width);
    firstColumn = std::max(firstColumn, 0);
    if (firstColumn >= endColumn || height <= 0 || !raster.pixels)
        return;
    const size_t h = size_t(height);
    const TimelineRows rows(raster.bytesPerPixel, height);
    stack.setColours(tallBytes(raster), raster.neutral, raster.pending);
    // Columns are painted column-major into a chunk that stays in cache, then transposed into the image.
    constexpr int Chunk = 32;
    scratch.chunk.resize(h * Chunk);
    scratch.marks.resize(h + 1);
    uint32_t* const marks = scratch.marks.data();

    for (int chunkStart = firstColumn; chunkStart < endColumn; chunkStart += Chunk) {
        const int chunkEnd = std::min(chunkStart + Chunk, endColumn);
        for (int x = chunkStart; x < chunkEnd; ++x) {
            uint32_t* column = scratch.chunk.data() + size_t(x - chunkStart) * h; // row 0 at the top
            const int64_t state = columns.state[size_t(x)];
            if (x > firstColumn && state == columns.state[size_t(x) - 1]) {
                // The previous column is the one before in the chunk, or the chunk's last one (still there).
                const uint32_t* previous = x > chunkStart ? column - h : scratch.chunk.data() + size_t(Chunk - 1) * h;
                std::copy(previous, previous + h, column);
                continue;
            }
            stack.advanceTo(state);
            // Each item marks the colour of its last row, walking down from the top so that an item with an empty
            // run (same end row as the one below it) is overwritten by the item that owns the row; marks[height]
            // takes the writes of items ending in row 0's lower half. Then each row takes the nearest mark at or
            // above it. No branch depends on the data, which matters: whether an item is tall is a coin toss. The
            // stack has already given thin items the neutral colour and pending ones the pending colour.
            std::fill(marks, marks + h + 1, 0u);
            const auto slots = stack.slots();
            ByteCount top = stack.total();
            for (size_t i = slots.size(); i-- > 0;) {
                const TimelineStack::Slot& slot = slots[i];
                const int row = rows.row(top) - 1;
                marks[size_t(row + ((row >> 31) & (height + 1)))] = slot.color | 0xff000000u; // row -1 -> height
                top -= slot.size;
            }
            uint32_t carry = raster.background;
            for (size_t r = h; r-- > 0;) {
                carry = marks[r] ? marks[r] : carry;
                column[h - 1 - r] = carry;
            }
        }
        // Transpose the chunk into the image, row by row.
        const int count = chunkEnd - chunkStart;
        for (size_t y = 0; y < h; ++y) {
            uint32_t* out = raster.pixels + ptrdiff_t(y) * raster.stride + chunkStart;
            const uint32_t* in = scratch.chunk.data() + y;
            for (int c = 0; c < count; ++c)
                out[c] = in[size_t(c) * h];
        }
    }
}

void itemOffsets(const TimelineItems& items, std::span<const uint8_t> visible, TimelineItem item,
                 std::span<const int64_t> states, std::vector<ByteCount>& out)
{
    out.assign(states.size(), -1);
    auto vis = [&](TimelineItem k) { return visible.empty() || visible[k]; };
    if (item >= items.count() || !vis(item) || !everLive(items, item))
        return;
    size_t i = 0;
    while (i < states.size() && !items.liveAt(item, states[i]))
        ++i;
    if (i == states.size())
        return;
    // Every item stacked below `item` began no later than it, so at its first shown state the bytes below it are
    // those of the earlier live items; afterwards only their removals move it down.
    const int64_t first = states[i];
    ByteCount below = 0;
    for (TimelineItem k = 0; k < item; ++k)
        if (vis(k) && items.end[k] >= first && everLive(items, k))
            below += items.size[k];
    size_t nextRemove = firstEndingAtOrAfter(items, first);
    for (; i < states.size() && items.liveAt(item, states[i]); ++i) {
        while (nextRemove < items.byEnd.size() && items.endByEnd[nextRemove] < states[i]) {
            const TimelineItem k = items.byEnd[nextRemove++];
            if (k < item && vis(k) && everLive(items, k))
                below -= items.size[k];
        }
        out[i] = below;
    }
}

} // namespace memscope::model
