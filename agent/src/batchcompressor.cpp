// BatchCompressor (batchcompressor.h): LZ4's block API with a caller-owned state (LZ4_compress_fast_extState).
#include "batchcompressor.h"

#include <lz4.h>

namespace memscope::agent {

void BatchCompressor::reserve(size_t maxRecords)
{
    m_packed.resize(size_t(LZ4_compressBound(int(maxRecords * sizeof(wire::EventRecord)))));
    m_state.resize(size_t(LZ4_sizeofState()));
}

bool BatchCompressor::compress(const wire::EventRecord* records, size_t count)
{
    const size_t rawBytes = count * sizeof(wire::EventRecord);
    m_rawBytes += rawBytes;
    const int packed = LZ4_compress_fast_extState(m_state.data(), reinterpret_cast<const char*>(records),
                                                  m_packed.data(), int(rawBytes), int(m_packed.size()), 1);
    const bool smaller = packed > 0 && size_t(packed) < rawBytes;
    m_packedSize = smaller ? size_t(packed) : 0;
    return smaller;
}

} // namespace memscope::agent
