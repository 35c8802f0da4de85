// CallTree and CallTreeBuilder: interning of call paths by (parent node, frame) in a flat open-addressing table,
// then one bottom-up pass for inclusive costs and one breadth-first pass that sorts and lays out children
// contiguously. No per-node heap allocation. See calltree.h; builders are single-threaded, trees immutable.
#include "model/calltree.h"

#include "model/framefilter.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace memscope::model {

namespace {

    // uint64 -> uint32 map with linear probing; keys are never UINT64_MAX. Grows at half load.
    class FlatMap {
    public:
        static constexpr uint64_t EmptyKey = UINT64_MAX;
        static constexpr uint32_t Missing = UINT32_MAX;

        explicit FlatMap(size_t expected = 64) { rehash(std::bit_ceil(std::max<size_t>(expected * 2, 64))); }

        uint32_t find(uint64_t key) const
        {
            for (size_t i = slot(key);; i = (i + 1) & m_mask) {
                if (m_keys[i] == key)
                    return m_values[i];
                if (m_keys[i] == EmptyKey)
                    return Missing;
            }
        }

        // The value for `key`, inserting `value` when absent; `inserted` says which.
        uint32_t findOrInsert(uint64_t key, uint32_t value, bool& inserted)
        {
            if ((m_size + 1) * 2 > m_keys.size())
                rehash(m_keys.size() * 2);
            for (size_t i = slot(key);; i = (i + 1) & m_mask) {
                if (m_keys[i] == key) {
                    inserted = false;
                    return m_values[i];
                }
                if (m_keys[i] == EmptyKey) {
                    m_keys[i] = key;
                    m_values[i] = value;
                    ++m_size;
                    inserted = true;
                    return value;
                }
            }
        }

    private:
        size_t slot(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> m_shift); }

        void rehash(size_t capacity)
        {
            std::vector<uint64_t> keys(capacity, EmptyKey);
            std::vector<uint32_t> values(capacity);
            std::swap(keys, m_keys);
            std::swap(values, m_values);
            m_mask = capacity - 1;
            m_shift = 64 - unsigned(std::countr_zero(capacity));
            for (size_t i = 0; i < keys.size(); ++i) {
                if (keys[i] == EmptyKey)
                    continue;
                size_t j = slot(keys[i]);
                while (m_keys[j] != EmptyKey)
                    j = (j + 1) & m_mask;
                m_keys[j] = keys[i];
                m_values[j] = values[i];
            }
        }

        std::vector<uint64_t> m_keys;
        std::vector<uint32_t> m_values;
        size_t m_size = 0;
        size_t m_mask = 0;
        unsigned m_shift = 0;
    };

    // The frames of `stack` from the root's child down, as the tree of `options` orders them, filtered; the pseudo
    // frames for an empty stack and for a stack whose every frame is hidden. `keep` caches keepFrame per frame
    // (0 unknown, 1 keep, 2 hide) when it has one entry per frame of the snapshot; otherwise keepFrame is asked.
    void orientedPath(const Snapshot& s, StackId stack, const CallTreeOptions& options, std::vector<uint8_t>& keep,
                      std::vector<FrameId>& out)
    {
        out.clear();
        const FrameId* begin = s.stackBegin(stack);
        const FrameId* end = s.stackEnd(stack);
        if (begin == end) {
            out.push_back(NoStackFrame);
            return;
        }
        const bool hideInternal = options.frameFilter && options.hideInternal;
        auto kept = [&](const Frame& fr) {
            return model::keepFrame(s.str(fr.name), s.str(fr.filename))
                && !(hideInternal && model::isInternalFrame(s.str(fr.name), s.str(fr.filename)));
        };
        const FrameId* site = hideInternal ? begin + model::siteIndex(s, stack) : nullptr;
        auto visit = [&](const FrameId* at) {
            const FrameId f = *at;
            if (options.frameFilter && at != site) {
                const Frame& fr = s.frame(f);
                if (keep.empty()) {
                    if (!kept(fr))
                        return;
                } else {
                    uint8_t& k = keep[raw(f)];
                    if (k == 0)
                        k = kept(fr) ? 1 : 2;
                    if (k == 2)
                        return;
                }
            }
            out.push_back(f);
        };
        // Stacks are stored innermost first (snapshot.h).
        if (options.direction == CallTreeDirection::TopDown) {
            for (const FrameId* f = end; f != begin;)
                visit(--f);
        } else {
            for (const FrameId* f = begin; f != end; ++f)
                visit(f);
        }
        if (out.empty())
            out.push_back(HiddenFramesFrame);
    }

} // namespace

// ---- CallTreeBuilder ----

struct CallTreeBuilder::Impl {
    struct RawNode {
        FrameId frame = RootFrame;
        uint32_t parent = UINT32_MAX;
        uint32_t depth = 0;
        uint32_t samples = 0;
        uint32_t key = NoSampleKey;
        int64_t selfBytes = 0;
        int64_t selfCount = 0;
    };
    CallTreeOptions options;
    std::vector<RawNode> nodes;
    FlatMap index; // (parent << 32 | frame) -> node

    explicit Impl(const CallTreeOptions& o)
        : options(o)
        , nodes(1)
        , index(1024)
    {
    }
};

CallTreeBuilder::CallTreeBuilder(const CallTreeOptions& options)
    : m_impl(std::make_unique<Impl>(options))
{
}

CallTreeBuilder::~CallTreeBuilder() = default;

uint32_t CallTreeBuilder::intern(std::span<const FrameId> path)
{
    auto& nodes = m_impl->nodes;
    uint32_t node = 0;
    for (FrameId f : path) {
        bool inserted = false;
        const uint64_t key = (uint64_t(node) << 32) | raw(f);
        const uint32_t child = m_impl->index.findOrInsert(key, uint32_t(nodes.size()), inserted);
        if (inserted) {
            Impl::RawNode n;
            n.frame = f;
            n.parent = node;
            n.depth = nodes[node].depth + 1;
            nodes.push_back(n);
        }
        node = child;
    }
    return node;
}

void CallTreeBuilder::charge(uint32_t node, int64_t bytes, int64_t count, uint32_t key)
{
    Impl::RawNode& n = m_impl->nodes[node];
    n.selfBytes += bytes;
    n.selfCount += count;
    ++n.samples;
    if (n.key == NoSampleKey)
        n.key = key;
}

CallTree CallTreeBuilder::finish()
{
    std::vector<Impl::RawNode> raw = std::move(m_impl->nodes);
    const CallTreeOptions options = m_impl->options;
    m_impl = std::make_unique<Impl>(options);

    const size_t n = raw.size();
    std::vector<int64_t> bytes(n), count(n);
    for (size_t i = 0; i < n; ++i) {
        bytes[i] = raw[i].selfBytes;
        count[i] = raw[i].selfCount;
    }
    // Children are created after their parent, so one backwards pass sums every subtree.
    std::vector<uint32_t> childCount(n, 0);
    for (size_t i = n; i-- > 1;) {
        Impl::RawNode& p = raw[raw[i].parent];
        bytes[raw[i].parent] += bytes[i];
        count[raw[i].parent] += count[i];
        p.samples += raw[i].samples;
        if (p.key == NoSampleKey)
            p.key = raw[i].key;
        ++childCount[raw[i].parent];
    }
    // Children of old node i: childList[childBegin[i] .. childBegin[i + 1]), sorted.
    std::vector<uint32_t> childBegin(n + 1, 0);
    for (size_t i = 0; i < n; ++i)
        childBegin[i + 1] = childBegin[i] + childCount[i];
    std::vector<uint32_t> childList(n > 0 ? n - 1 : 0);
    {
        std::vector<uint32_t> fill(childBegin.begin(), childBegin.end() - 1);
        for (size_t i = 1; i < n; ++i)
            childList[fill[raw[i].parent]++] = uint32_t(i);
    }
    auto before = [&](uint32_t a, uint32_t b) {
        if (bytes[a] != bytes[b])
            return bytes[a] > bytes[b];
        if (count[a] != count[b])
            return count[a] > count[b];
        return model::raw(raw[a].frame) < model::raw(raw[b].frame);
    };
    for (size_t i = 0; i < n; ++i)
        std::sort(childList.begin() + childBegin[i], childList.begin() + childBegin[i + 1], before);

    // Breadth-first layout: the children of every node become contiguous.
    CallTree tree;
    tree.m_options = options;
    tree.m_nodes.clear();
    tree.m_nodes.reserve(n);
    std::vector<uint32_t> order;
    order.reserve(n);
    std::vector<uint32_t> newId(n);
    order.push_back(0);
    newId[0] = 0;
    for (size_t at = 0; at < order.size(); ++at) {
        const uint32_t old = order[at];
        CallNode& out = tree.m_nodes.emplace_back();
        const Impl::RawNode& in = raw[old];
        out.frame = in.frame;
        out.parent = old == 0 ? NoCallNode : CallNodeId { newId[in.parent] };
        out.depth = in.depth;
        out.samples = in.samples;
        out.key = in.key;
        out.bytes = bytes[old];
        out.count = count[old];
        out.selfBytes = in.selfBytes;
        out.selfCount = in.selfCount;
        out.firstChild = uint32_t(order.size());
        out.childCount = childCount[old];
        for (uint32_t c = childBegin[old]; c < childBegin[old + 1]; ++c) {
            newId[childList[c]] = uint32_t(order.size());
            order.push_back(childList[c]);
        }
        tree.m_maxDepth = std::max(tree.m_maxDepth, in.depth);
    }
    assert(order.size() == n);
    return tree;
}

// ---- CallTree ----

CallTree::CallTree()
    : m_nodes(1)
{
    m_nodes.front().firstChild = 1;
}

CallTree CallTree::build(const Snapshot& snapshot, std::span<const CallSample> samples, const CallTreeOptions& options)
{
    CallTreeBuilder builder(options);
    std::vector<uint8_t> keep(options.frameFilter ? snapshot.frames.size() : 0, 0);
    std::vector<FrameId> path;
    path.reserve(64);
    // Many samples share a stack (one call site allocating in a loop): intern each stack's path once.
    FlatMap leafOfStack(std::min<size_t>(samples.size(), 1 << 16));
    for (const CallSample& sample : samples) {
        uint32_t leaf = leafOfStack.find(raw(sample.stack));
        if (leaf == FlatMap::Missing) {
            orientedPath(snapshot, sample.stack, options, keep, path);
            leaf = builder.intern(path);
            bool inserted = false;
            leafOfStack.findOrInsert(raw(sample.stack), leaf, inserted);
        }
        builder.charge(leaf, sample.bytes, sample.count, sample.key);
    }
    return builder.finish();
}

void CallTree::appendActiveBlocks(const ReplayState& state, std::vector<CallSample>& out,
                                  const std::function<bool(const ReplaySegment&)>& keepSegment)
{
    for (const ReplaySegment& seg : state.segments) {
        if (keepSegment && !keepSegment(seg))
            continue;
        for (uint32_t i = seg.blockBegin; i < seg.blockBegin + seg.blockCount; ++i) {
            const ReplayBlock& b = state.blocks[i];
            if (b.state != BlockState::ActiveAllocated && b.state != BlockState::ActivePendingFree)
                continue;
            out.push_back({ b.stack, b.size, 1, raw(b.allocation) });
        }
    }
}

uint32_t CallTree::row(CallNodeId id) const
{
    const CallNode& n = node(id);
    return n.parent == NoCallNode ? 0 : raw(id) - node(n.parent).firstChild;
}

CallNodeId CallTree::findChild(CallNodeId parent, FrameId frame) const
{
    const CallNode& p = node(parent);
    for (uint32_t c = p.firstChild; c < p.firstChild + p.childCount; ++c)
        if (m_nodes[c].frame == frame)
            return CallNodeId { c };
    return NoCallNode;
}

CallNodeId CallTree::find(const Snapshot& snapshot, StackId stack) const
{
    if (raw(stack) >= snapshot.stackCount())
        return NoCallNode;
    std::vector<uint8_t> noCache;
    std::vector<FrameId> path;
    orientedPath(snapshot, stack, m_options, noCache, path);
    return findPath(path);
}

std::vector<FrameId> CallTree::framePath(CallNodeId id) const
{
    std::vector<FrameId> out;
    for (CallNodeId n = id; n != NoCallNode && n != CallTreeRoot; n = node(n).parent)
        out.push_back(node(n).frame);
    std::reverse(out.begin(), out.end());
    return out;
}

CallNodeId CallTree::findPath(std::span<const FrameId> frames) const
{
    CallNodeId n = CallTreeRoot;
    for (FrameId f : frames) {
        n = findChild(n, f);
        if (n == NoCallNode)
            break;
    }
    return n;
}

} // namespace memscope::model
