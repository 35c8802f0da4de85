// A compact, read-only tree of the plain values a pickle or JSON document holds (None, bools, ints, floats,
// strings, lists, tuples, dicts), stored in flat arrays: the intermediate form between a reader and the
// SnapshotBuilder. Shared objects (pickle memo references) are one node referenced from several places, so node
// identity can be used to intern frames and stacks in O(1). Strings point into the input buffer where possible.
//
// Integers: Int holds any value in [-2^63, 2^63), UInt one in [2^63, 2^64) (a C uint64_t/size_t PyTorch wrote as
// is: torch.compile's frame lines are size_t(-1)), and BigInt stands for a value a 64-bit field cannot hold (wider
// than 64 bits, or below -2^63): it keeps only the byte offset where the reader met it, so the SnapshotBuilder can
// leave that one field out and say where, instead of refusing the whole file.
//
// One ValueTree belongs to one load; it is built by one thread and then only read.
#pragma once

#include "model/growingarray.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::io {

using NodeId = uint32_t;
constexpr NodeId NoNode = std::numeric_limits<NodeId>::max();

enum class NodeType : uint8_t { None, Bool, Int, UInt, BigInt, Float, String, Bytes, List, Tuple, Dict };

class ValueTree {
public:
    explicit ValueTree(std::span<const uint8_t> input = {})
        : m_input(input)
    {
    }

    // Building. reserveFor() sizes the arrays for an input of `bytes` bytes, so a large load does not pay for
    // repeated reallocation (measured on real snapshots: about one node per 12 input bytes).
    void reserveFor(uint64_t bytes);
    NodeId addNone() { return push(NodeType::None, 0, 0); }
    NodeId addBool(bool v) { return push(NodeType::Bool, 0, v ? 1 : 0); }
    NodeId addInt(int64_t v) { return push(NodeType::Int, 0, static_cast<uint64_t>(v)); }
    // A value in [0, 2^64): an Int node below 2^63, a UInt node from there on.
    NodeId addUnsigned(uint64_t v) { return push(v >> 63 ? NodeType::UInt : NodeType::Int, 0, v); }
    // An integer no 64-bit field can hold, met at byte `offset` of the input.
    NodeId addBigInt(uint64_t offset) { return push(NodeType::BigInt, 0, offset); }
    NodeId addFloat(double v);
    // A string that lies in the input buffer at [offset, offset + length).
    NodeId addInputString(NodeType type, uint64_t offset, uint32_t length);
    // A string that had to be decoded (escapes): copied into the tree's own pool.
    NodeId addOwnedString(NodeType type, std::string_view text);
    NodeId addContainer(NodeType type) { return push(type, NoChunk, pack(0, NoChunk)); }
    // Appends children (for a dict: key, value, key, value, ...) to a container. Returns false if `node` is not one.
    bool append(NodeId node, std::span<const NodeId> children);

    // Reading
    size_t size() const { return m_nodes.size(); }
    NodeType type(NodeId n) const { return m_nodes[n].type; }
    bool isContainer(NodeId n) const { return type(n) >= NodeType::List; }
    // Int and Bool nodes: the value. (A UInt node's value is unsignedInteger(); integer() of it is meaningless.)
    int64_t integer(NodeId n) const { return static_cast<int64_t>(m_nodes[n].b); }
    // UInt nodes: the value (also Int nodes holding a value >= 0).
    uint64_t unsignedInteger(NodeId n) const { return m_nodes[n].b; }
    // BigInt nodes: the byte offset of the integer in the input.
    uint64_t bigIntOffset(NodeId n) const { return m_nodes[n].b; }
    bool boolean(NodeId n) const { return m_nodes[n].b != 0; }
    double real(NodeId n) const;
    std::string_view string(NodeId n) const;
    // Number of children (a dict counts key and value separately).
    uint32_t childCount(NodeId n) const { return static_cast<uint32_t>(m_nodes[n].b >> 32); }

    // Iterates the children of a container in order, calling f(NodeId) for each.
    template <typename F>
    void forEachChild(NodeId n, F&& f) const
    {
        for (uint32_t c = m_nodes[n].a; c != NoChunk; c = m_chunks[c].next) {
            const Chunk& chunk = m_chunks[c];
            for (uint32_t i = 0; i < chunk.count; ++i)
                f(m_children[chunk.begin + i]);
        }
    }
    // Iterates a dict's items as f(keyNode, valueNode).
    template <typename F>
    void forEachItem(NodeId n, F&& f) const
    {
        NodeId key = NoNode;
        forEachChild(n, [&](NodeId child) {
            if (key == NoNode) {
                key = child;
            } else {
                f(key, child);
                key = NoNode;
            }
        });
    }
    // Calls f(NodeId) once for every child of every container (a node held by two containers comes twice).
    template <typename F>
    void forEachReference(F&& f) const
    {
        for (NodeId c : m_children)
            f(c);
    }
    // The value of a string key in a dict, or NoNode.
    NodeId find(NodeId dict, std::string_view key) const;

    size_t memoryUsage() const;

private:
    static constexpr uint32_t NoChunk = std::numeric_limits<uint32_t>::max();
    struct Node {
        NodeType type;
        uint8_t owned = 0; // String/Bytes: text lies in m_pool rather than the input
        uint32_t a; // container: first chunk; string: length
        uint64_t b; // container: count << 32 | last chunk; scalars: value; string: offset
    };
    static_assert(sizeof(Node) == 16);
    struct Chunk {
        uint32_t begin;
        uint32_t count;
        uint32_t next;
    };
    static uint64_t pack(uint32_t count, uint32_t last) { return (uint64_t(count) << 32) | last; }
    NodeId push(NodeType type, uint32_t a, uint64_t b)
    {
        m_nodes.push_back(Node { type, 0, a, b });
        return static_cast<NodeId>(m_nodes.size() - 1);
    }

    std::span<const uint8_t> m_input;
    model::GrowingArray<Node> m_nodes;
    model::GrowingArray<Chunk> m_chunks;
    model::GrowingArray<NodeId> m_children;
    std::string m_pool;
};

} // namespace memscope::io
