// ValueTree storage. See valuetree.h.
#include "io/valuetree.h"

#include <bit>
#include <cstring>

namespace memscope::io {

void ValueTree::reserveFor(uint64_t bytes)
{
    // Filled at once from the input: huge pages fault far less (GrowingArray::setHugePages).
    m_nodes.setHugePages(true);
    m_children.setHugePages(true);
    m_chunks.setHugePages(true);
    m_nodes.reserve(bytes / 11 + 16);
    m_children.reserve(bytes / 4 + 16);
    m_chunks.reserve(bytes / 70 + 16);
}

NodeId ValueTree::addFloat(double v)
{
    return push(NodeType::Float, 0, std::bit_cast<uint64_t>(v));
}

double ValueTree::real(NodeId n) const
{
    const Node& node = m_nodes[n];
    if (node.type == NodeType::Float)
        return std::bit_cast<double>(node.b);
    if (node.type == NodeType::UInt)
        return static_cast<double>(node.b);
    return static_cast<double>(static_cast<int64_t>(node.b));
}

NodeId ValueTree::addInputString(NodeType type, uint64_t offset, uint32_t length)
{
    return push(type, length, offset);
}

NodeId ValueTree::addOwnedString(NodeType type, std::string_view text)
{
    const uint64_t offset = m_pool.size();
    m_pool.append(text);
    NodeId id = push(type, static_cast<uint32_t>(text.size()), offset);
    m_nodes[id].owned = 1;
    return id;
}

std::string_view ValueTree::string(NodeId n) const
{
    const Node& node = m_nodes[n];
    if (node.type != NodeType::String && node.type != NodeType::Bytes)
        return {};
    if (node.owned)
        return std::string_view(m_pool.data() + node.b, node.a);
    return std::string_view(reinterpret_cast<const char*>(m_input.data()) + node.b, node.a);
}

bool ValueTree::append(NodeId node, std::span<const NodeId> children)
{
    if (node >= m_nodes.size() || !isContainer(node))
        return false;
    if (children.empty())
        return true;
    Node& n = m_nodes[node];
    const uint32_t count = static_cast<uint32_t>(n.b >> 32);
    const uint32_t last = static_cast<uint32_t>(n.b);
    const uint32_t begin = static_cast<uint32_t>(m_children.size());
    m_children.append(children.begin(), children.end());
    // Extend the last chunk in place when it ends where the new children start (the usual APPENDS batches).
    if (last != NoChunk && m_chunks[last].begin + m_chunks[last].count == begin) {
        m_chunks[last].count += static_cast<uint32_t>(children.size());
    } else {
        const uint32_t chunk = static_cast<uint32_t>(m_chunks.size());
        m_chunks.push_back(Chunk { begin, static_cast<uint32_t>(children.size()), NoChunk });
        if (last == NoChunk)
            n.a = chunk;
        else
            m_chunks[last].next = chunk;
        n.b = pack(count, chunk);
    }
    n.b = pack(count + static_cast<uint32_t>(children.size()), static_cast<uint32_t>(n.b));
    return true;
}

NodeId ValueTree::find(NodeId dict, std::string_view key) const
{
    if (dict >= m_nodes.size() || type(dict) != NodeType::Dict)
        return NoNode;
    NodeId result = NoNode;
    forEachItem(dict, [&](NodeId k, NodeId v) {
        if (type(k) == NodeType::String && string(k) == key)
            result = v; // the last one wins, as in a Python dict built by SETITEMS
    });
    return result;
}

size_t ValueTree::memoryUsage() const
{
    return m_nodes.memoryBytes() + m_chunks.memoryBytes() + m_children.memoryBytes() + m_pool.capacity();
}

} // namespace memscope::io
