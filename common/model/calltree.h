// Call trees: a set of allocations (the active blocks of a ReplayState, or any list of stack + bytes + count)
// aggregated by call stack, top-down (the root's children are outermost frames, as flame graphs draw them) or
// bottom-up (the root's children are the frames that allocated). Costs are signed so that a diff ("B minus A") can
// be fed into the same tree (heaptrack's pattern: diff in the data layer, same models). A CallTree is a plain value:
// built once by CallTree::build or CallTreeBuilder (any thread, e.g. a background job), immutable afterwards and
// readable from any number of threads at once. It refers to frames by FrameId of the Snapshot it was built from.
#pragma once

#include "model/replay.h"
#include "model/snapshot.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace memscope::model {

// Index into CallTree::nodes() of one tree. Never mix ids of two trees.
enum class CallNodeId : uint32_t {};
constexpr uint32_t raw(CallNodeId id) { return static_cast<uint32_t>(id); }
constexpr CallNodeId CallTreeRoot { 0 };
constexpr CallNodeId NoCallNode { UINT32_MAX };

// Frames of nodes that stand for no frame of the snapshot: the root; the node collecting samples whose stack is
// empty (PyTorch's viewers print "<non-python>" for them: torch/cuda/_memory_viz.py _write_blocks); the node
// collecting samples whose every frame the frame filter hides. Real FrameIds never reach these values.
constexpr FrameId RootFrame { UINT32_MAX };
constexpr FrameId NoStackFrame { UINT32_MAX - 1 };
constexpr FrameId HiddenFramesFrame { UINT32_MAX - 2 };
constexpr bool isPseudoFrame(FrameId f) { return raw(f) >= UINT32_MAX - 2; }

// An opaque per-sample key kept on nodes reached by a single sample (e.g. raw(AllocationId)).
constexpr uint32_t NoSampleKey = UINT32_MAX;

enum class CallTreeDirection : uint8_t { TopDown, BottomUp };

struct CallTreeOptions {
    CallTreeDirection direction = CallTreeDirection::TopDown;
    // Drop the frames PyTorch's viewers hide (model/framefilter.h, torch/cuda/_memory_viz.py _frame_filter).
    bool frameFilter = true;
    // With frameFilter, drop every internal frame too (model::isInternalFrame) but each stack's site
    // (model::siteIndex): the tree holds the user's code and model libraries, and a bottom-up tree's roots are sites.
    bool hideInternal = false;
    bool operator==(const CallTreeOptions&) const = default;
};

// One input: `bytes` and `count` (both may be negative, for diffs) charged to the call path of `stack`.
struct CallSample {
    StackId stack = EmptyStack;
    int64_t bytes = 0;
    int64_t count = 1;
    uint32_t key = NoSampleKey;
};

// One node: a call path from the root. Inclusive costs cover every sample whose path passes through the node; self
// costs those whose path ends here, so bytes == selfBytes + Σ children's bytes (and likewise for count).
struct CallNode {
    FrameId frame = RootFrame;
    CallNodeId parent = NoCallNode; // NoCallNode for the root
    uint32_t depth = 0; // root 0
    uint32_t firstChild = 0; // children are nodes [firstChild, firstChild + childCount), by bytes descending
    uint32_t childCount = 0;
    uint32_t samples = 0; // number of samples through the node (never negative, unlike count)
    uint32_t key = NoSampleKey; // the key of one sample through the node: *the* sample's when samples == 1
    int64_t bytes = 0;
    int64_t count = 0;
    int64_t selfBytes = 0;
    int64_t selfCount = 0;
};

class CallTree {
public:
    // A tree with only a root of zero cost.
    CallTree();

    // Aggregates `samples` by the call paths of their stacks in `snapshot`. O(samples + distinct stacks × depth);
    // allocates O(nodes). Any thread.
    static CallTree build(const Snapshot& snapshot, std::span<const CallSample> samples,
                          const CallTreeOptions& options = {});

    // The active blocks of `state` (active_allocated and active_pending_free: the "live" bytes of PyTorch's
    // viewers) as samples of their block size, count 1 and key raw(allocation), appended to `out`. Blocks of
    // segments for which `keepSegment` returns false are left out (null: keep all).
    static void appendActiveBlocks(const ReplayState& state, std::vector<CallSample>& out,
                                   const std::function<bool(const ReplaySegment&)>& keepSegment = {});

    const CallTreeOptions& options() const { return m_options; }
    size_t size() const { return m_nodes.size(); } // >= 1 (the root)
    std::span<const CallNode> nodes() const { return m_nodes; }
    const CallNode& node(CallNodeId id) const { return m_nodes[raw(id)]; }
    const CallNode& root() const { return m_nodes.front(); }
    std::span<const CallNode> children(CallNodeId id) const
    {
        const CallNode& n = node(id);
        return { m_nodes.data() + n.firstChild, n.childCount };
    }
    CallNodeId childId(CallNodeId parent, uint32_t row) const { return CallNodeId { node(parent).firstChild + row }; }
    // The row of a node among its parent's children (0 for the root).
    uint32_t row(CallNodeId id) const;
    uint32_t maxDepth() const { return m_maxDepth; }

    // The child of `parent` for `frame`, or NoCallNode. O(children).
    CallNodeId findChild(CallNodeId parent, FrameId frame) const;
    // The node where a sample with `stack` (of the snapshot the tree was built from) ends, or NoCallNode.
    CallNodeId find(const Snapshot& snapshot, StackId stack) const;
    // The frames from the root's child down to `id` (empty for the root).
    std::vector<FrameId> framePath(CallNodeId id) const;
    // The node reached by following `frames` from the root, or NoCallNode.
    CallNodeId findPath(std::span<const FrameId> frames) const;

private:
    friend class CallTreeBuilder;
    CallTreeOptions m_options;
    std::vector<CallNode> m_nodes;
    uint32_t m_maxDepth = 0;
};

// Low-level construction from frame paths that are already oriented (root's child first) and filtered, e.g. a diff
// of two snapshots whose frames were mapped to one table. Not thread-safe; one builder per thread.
class CallTreeBuilder {
public:
    explicit CallTreeBuilder(const CallTreeOptions& options = {});
    ~CallTreeBuilder();
    CallTreeBuilder(const CallTreeBuilder&) = delete;
    CallTreeBuilder& operator=(const CallTreeBuilder&) = delete;

    // Interns the path and returns its last node (the root for an empty path); ids are only valid inside this
    // builder (finish() renumbers them).
    uint32_t intern(std::span<const FrameId> path);
    // Charges a sample to a node returned by intern().
    void charge(uint32_t node, int64_t bytes, int64_t count, uint32_t key = NoSampleKey);
    void add(std::span<const FrameId> path, int64_t bytes, int64_t count, uint32_t key = NoSampleKey)
    {
        charge(intern(path), bytes, count, key);
    }
    // Sums costs, sorts children by bytes descending (then count descending, then frame id) and lays the nodes out
    // breadth first so that every node's children are contiguous. The builder is empty afterwards.
    CallTree finish();

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace memscope::model
