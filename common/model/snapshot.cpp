// Interning tables and small helpers of the snapshot model. See snapshot.h.
#include "model/snapshot.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace memscope::model {

namespace {
    constexpr std::string_view ActionNames[] = {
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "snapshot",
        "oom",
        "unknown",
    };
    static_assert(std::size(ActionNames) == size_t(Action::Count));
} // namespace

std::string_view actionName(Action action)
{
    return ActionNames[std::min<size_t>(size_t(action), size_t(Action::Unknown))];
}

std::string_view blockStateName(BlockState state)
{
    switch (state) {
    case BlockState::ActiveAllocated: return "active_allocated";
    case BlockState::ActivePendingFree: return "active_pending_free";
    case BlockState::Inactive: return "inactive";
    case BlockState::Unknown: break;
    }
    return "unknown";
}

std::string LineNumber::toString() const
{
    char buf[24];
    return std::string(buf, toChars(buf, buf + sizeof buf));
}

char* LineNumber::toChars(char* first, char* last) const
{
    return m_unsigned ? std::to_chars(first, last, m_bits).ptr : std::to_chars(first, last, bits()).ptr;
}

const Value* Value::find(std::string_view key) const
{
    for (const auto& [k, v] : entries) {
        if (k == key)
            return &v;
    }
    return nullptr;
}

StringTable::StringTable()
{
    intern({});
}

StringId StringTable::intern(std::string_view text)
{
    if (auto it = m_index.find(text); it != m_index.end())
        return it->second;
    // Strings live in large chunks that never move, so the views in m_strings and m_index stay valid.
    if (m_chunkUsed + text.size() > m_chunkSize || m_chunks.empty()) {
        m_chunkSize = std::max<size_t>(64 * 1024, text.size());
        m_chunks.push_back(std::make_unique<char[]>(m_chunkSize));
        m_chunkUsed = 0;
    }
    char* dst = m_chunks.back().get() + m_chunkUsed;
    if (!text.empty())
        std::memcpy(dst, text.data(), text.size());
    m_chunkUsed += text.size();
    const std::string_view stored(dst, text.size());
    const StringId id { static_cast<uint32_t>(m_strings.size()) };
    m_strings.push_back(stored);
    m_index.emplace(stored, id);
    return id;
}

LayoutTable::LayoutTable()
{
    m_layouts.emplace_back();
}

LayoutId LayoutTable::intern(const std::vector<StringId>& keys)
{
    // Few distinct layouts exist (one per key order a writer used), so a linear search from the newest is fast.
    for (size_t i = m_layouts.size(); i-- > 0;) {
        if (m_layouts[i] == keys)
            return LayoutId { static_cast<uint16_t>(i) };
    }
    if (m_layouts.size() >= UINT16_MAX)
        return LayoutId {};
    m_layouts.push_back(keys);
    return LayoutId { static_cast<uint16_t>(m_layouts.size() - 1) };
}

EntryFormTable::EntryFormTable()
{
    m_forms.emplace_back();
    m_index.emplace(EntryForm {}, DefaultForm);
}

size_t EntryFormTable::Hash::operator()(const EntryForm& f) const
{
    uint64_t h = uint64_t(f.stream) * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t(raw(f.actionName)) << 32 | raw(f.compileContext)) * 0xC2B2AE3D27D4EB4Full;
    h ^= (uint64_t(raw(f.userMetadata)) << 32 | f.extraIndex) * 0x165667B19E3779F9ull;
    h ^= uint64_t(raw(f.layout)) * 0xD6E8FEB86659FD93ull;
    return size_t(h ^ (h >> 29));
}

FormId EntryFormTable::intern(const EntryForm& form)
{
    const size_t h = Hash {}(form);
    uint32_t& recent = m_recent[h % RecentSlots];
    if (m_forms[recent] == form)
        return FormId { recent };
    auto [it, inserted] = m_index.try_emplace(form, FormId { uint32_t(m_forms.size()) });
    if (inserted)
        m_forms.push_back(form);
    recent = raw(it->second);
    return it->second;
}

int Snapshot::streamNumber(int64_t rawStream) const
{
    auto it = std::find(streams.begin(), streams.end(), rawStream);
    return it == streams.end() ? -1 : static_cast<int>(it - streams.begin());
}

size_t Snapshot::entryCount() const
{
    size_t n = 0;
    for (const auto& t : deviceTraces)
        n += t.size();
    return n;
}

int Snapshot::deviceCount() const
{
    int n = static_cast<int>(deviceTraces.size());
    for (const auto& s : segments)
        n = std::max(n, s.device + 1);
    return n;
}

size_t StackInterner::FrameKeyHash::operator()(const FrameKey& k) const
{
    uint64_t h = (uint64_t(k.name) << 32) ^ k.filename;
    h ^= (k.line.unsignedBits() + k.line.isAboveInt64()) * 0x9E3779B97F4A7C15ull;
    return std::hash<uint64_t> {}(h);
}

size_t StackInterner::StackHash::operator()(const std::vector<FrameId>& v) const
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (FrameId f : v)
        h = (h ^ raw(f)) * 0x100000001b3ull;
    return h;
}

StackInterner::StackInterner(Snapshot& snapshot)
    : m_snapshot(snapshot)
{
    for (uint32_t i = 0; i < snapshot.frames.size(); ++i) {
        const Frame& f = snapshot.frames[i];
        m_frames.emplace(FrameKey { raw(f.name), raw(f.filename), f.line }, FrameId { i });
    }
    for (uint32_t i = 0; i < snapshot.stackCount(); ++i) {
        StackId id { i };
        m_stacks.emplace(std::vector<FrameId>(snapshot.stackBegin(id), snapshot.stackEnd(id)), id);
    }
}

FrameId StackInterner::frame(StringId name, StringId filename, LineNumber line)
{
    const FrameKey key { raw(name), raw(filename), line };
    if (auto it = m_frames.find(key); it != m_frames.end())
        return it->second;
    const FrameId id { static_cast<uint32_t>(m_snapshot.frames.size()) };
    m_snapshot.frames.push_back(Frame { name, filename, line });
    m_frames.emplace(key, id);
    return id;
}

StackId StackInterner::stack(const std::vector<FrameId>& frames)
{
    if (frames.empty())
        return EmptyStack;
    if (auto it = m_stacks.find(frames); it != m_stacks.end())
        return it->second;
    const StackId id { static_cast<uint32_t>(m_snapshot.stackCount()) };
    m_snapshot.stackFrames.insert(m_snapshot.stackFrames.end(), frames.begin(), frames.end());
    m_snapshot.stackOffsets.push_back(static_cast<uint32_t>(m_snapshot.stackFrames.size()));
    m_stacks.emplace(frames, id);
    return id;
}

} // namespace memscope::model
