// BatchCompressor: LZ4 for event batches (docs/protocol.md, "Compressed batches"; MEMSCOPE_COMPRESS): the records
// of a batch become one LZ4 block (the block format, lz4's doc/lz4_Block_format.md), with LZ4's state and output
// buffer allocated once, when the publisher thread starts, so that compressing allocates nothing. Publisher
// thread only.
#pragma once

#include "wire/protocol.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memscope::agent {

class BatchCompressor {
public:
    // Buffers for batches of up to `maxRecords` records.
    void reserve(size_t maxRecords);
    // Compresses `count` records (counted in rawBytes); true when that made them smaller, and then data()/size()
    // are the block. Incompressible records are sent as they are.
    bool compress(const wire::EventRecord* records, size_t count);
    // `bytes` of payload went out for the records last compressed (the block, or the records as they are).
    void countSent(size_t bytes) { m_sentBytes += bytes; }
    const char* data() const { return m_packed.data(); }
    size_t size() const { return m_packedSize; }

    uint64_t rawBytes() const { return m_rawBytes; } // record bytes given to compress()
    uint64_t sentBytes() const { return m_sentBytes; } // bytes of payload that went out for them

private:
    std::vector<char> m_packed; // LZ4's output: LZ4_compressBound(a whole batch)
    std::vector<char> m_state; // LZ4_sizeofState() bytes, so that LZ4 allocates nothing
    size_t m_packedSize = 0;
    uint64_t m_rawBytes = 0;
    uint64_t m_sentBytes = 0;
};

} // namespace memscope::agent
