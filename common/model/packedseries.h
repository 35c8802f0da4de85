// PackedSeries: a long series of 64-bit values that changes little from one value to the next (a Replay's bytes
// allocated, active, reserved, ... at every state index), stored in a third or less of 8 bytes a value, every value
// read back exactly.
//
// Values go in blocks of BlockSize. A sealed block keeps its minimum and each value's difference from it, shifted
// right by the trailing zero bits all of its differences share (block sizes are multiples of 512 B) and stored in
// the fewest bytes (0, 1, 2, 4 or 8) that hold the largest; a flat run costs nothing but its block header. The
// values of the last, unsealed block are kept as they are. Reading one is a few instructions (no decoding of
// neighbours); read() copies a range out, a block at a time.
//
// Appends only (push_back), as a replay grows its series; the arrays grow without copying (GrowingArray). Not
// thread-safe for writing; any number of threads may read one that nobody appends to.
#pragma once

#include "model/growingarray.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>

namespace memscope::model {

class PackedSeries {
public:
    static constexpr size_t BlockSize = 128;
    using value_type = int64_t;

    // Reads values by index; random access, dereferences to a value (not a reference).
    class const_iterator {
    public:
        using iterator_category = std::random_access_iterator_tag;
        using value_type = int64_t;
        using difference_type = ptrdiff_t;
        using pointer = void;
        using reference = int64_t;

        const_iterator() = default;
        const_iterator(const PackedSeries* series, size_t i)
            : m_series(series)
            , m_i(i)
        {
        }
        int64_t operator*() const { return (*m_series)[m_i]; }
        int64_t operator[](difference_type k) const { return (*m_series)[size_t(difference_type(m_i) + k)]; }
        const_iterator& operator++()
        {
            ++m_i;
            return *this;
        }
        const_iterator operator++(int)
        {
            const_iterator old = *this;
            ++m_i;
            return old;
        }
        const_iterator& operator--()
        {
            --m_i;
            return *this;
        }
        const_iterator operator--(int)
        {
            const_iterator old = *this;
            --m_i;
            return old;
        }
        const_iterator& operator+=(difference_type k)
        {
            m_i = size_t(difference_type(m_i) + k);
            return *this;
        }
        const_iterator& operator-=(difference_type k) { return *this += -k; }
        friend const_iterator operator+(const_iterator it, difference_type k) { return it += k; }
        friend const_iterator operator+(difference_type k, const_iterator it) { return it += k; }
        friend const_iterator operator-(const_iterator it, difference_type k) { return it -= k; }
        friend difference_type operator-(const const_iterator& a, const const_iterator& b)
        {
            return difference_type(a.m_i) - difference_type(b.m_i);
        }
        friend bool operator==(const const_iterator& a, const const_iterator& b) { return a.m_i == b.m_i; }
        friend auto operator<=>(const const_iterator& a, const const_iterator& b) { return a.m_i <=> b.m_i; }

    private:
        const PackedSeries* m_series = nullptr;
        size_t m_i = 0;
    };

    size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    const_iterator begin() const { return { this, 0 }; }
    const_iterator end() const { return { this, m_size }; }

    int64_t operator[](size_t i) const
    {
        const size_t b = i / BlockSize, k = i % BlockSize;
        if (b == m_blocks.size())
            return m_tail[k];
        const Block& block = m_blocks[b];
        const uint8_t* p = m_bytes.data() + block.offset;
        uint64_t d = 0;
        switch (block.width) {
        case 0:
            break;
        case 1:
            d = p[k];
            break;
        case 2: {
            uint16_t v;
            std::memcpy(&v, p + 2 * k, 2);
            d = v;
            break;
        }
        case 4: {
            uint32_t v;
            std::memcpy(&v, p + 4 * k, 4);
            d = v;
            break;
        }
        default:
            std::memcpy(&d, p + 8 * k, 8);
            break;
        }
        return int64_t(uint64_t(block.base) + (d << block.shift));
    }
    int64_t front() const { return (*this)[0]; }
    int64_t back() const { return (*this)[m_size - 1]; }

    // out[0 .. count) := values [first, first + count), which must exist.
    void read(size_t first, size_t count, int64_t* out) const
    {
        while (count > 0) {
            const size_t b = first / BlockSize, k = first % BlockSize;
            const size_t n = std::min(count, BlockSize - k);
            if (b == m_blocks.size()) {
                std::copy_n(m_tail.data() + k, n, out);
            } else {
                const Block& block = m_blocks[b];
                const uint8_t* p = m_bytes.data() + block.offset;
                switch (block.width) {
                case 0:
                    std::fill_n(out, n, block.base);
                    break;
                case 1:
                    unpack<uint8_t>(block, p, k, n, out);
                    break;
                case 2:
                    unpack<uint16_t>(block, p, k, n, out);
                    break;
                case 4:
                    unpack<uint32_t>(block, p, k, n, out);
                    break;
                default:
                    unpack<uint64_t>(block, p, k, n, out);
                    break;
                }
            }
            first += n;
            count -= n;
            out += n;
        }
    }

    void push_back(int64_t value)
    {
        m_tail[m_size % BlockSize] = value;
        if (++m_size % BlockSize == 0)
            seal();
    }
    // Every sealed block's minimum and maximum and where each first occurs (absolute indices), kept at sealing, so
    // that a min/max summary of the whole series (the overview's) costs a header per block instead of every value.
    // Block b holds values [b * BlockSize, (b + 1) * BlockSize); the values past sealedBlocks() * BlockSize (fewer
    // than BlockSize) are in no block yet.
    size_t sealedBlocks() const { return m_blocks.size(); }
    int64_t blockMin(size_t b) const { return m_blocks[b].base; }
    int64_t blockMax(size_t b) const { return m_blocks[b].max; }
    size_t blockMinIndex(size_t b) const { return b * BlockSize + m_blocks[b].minAt; }
    size_t blockMaxIndex(size_t b) const { return b * BlockSize + m_blocks[b].maxAt; }

    // Room for `n` values without growing the block headers (the packed bytes grow as they come).
    void reserve(size_t n) { m_blocks.reserve(n / BlockSize + 1); }
    // Has the pages of about the next `values` values made present by the prefault thread before the appends that
    // write them (GrowingArray::prefaultAhead; 4 bytes a value, the widest difference but the rare 8), for a series
    // that keeps growing while someone waits (a live replay's).
    void prefaultAhead(size_t values)
    {
        m_blocks.prefaultAhead(values / BlockSize + 1);
        m_bytes.prefaultAhead(values * 4);
    }
    // GrowingArray::setHugePages for both arrays: for a series filled at once (Replay::build's).
    void setHugePages(bool on)
    {
        m_blocks.setHugePages(on);
        m_bytes.setHugePages(on);
    }
    void clear()
    {
        m_blocks.clear();
        m_bytes.clear();
        m_size = 0;
    }

    // Memory it holds (headers, packed bytes, the unsealed block).
    size_t memoryBytes() const { return sizeof(*this) + m_blocks.memoryBytes() + m_bytes.memoryBytes(); }

    friend bool operator==(const PackedSeries& a, const PackedSeries& b)
    {
        if (a.size() != b.size())
            return false;
        for (size_t i = 0; i < a.size(); ++i)
            if (a[i] != b[i])
                return false;
        return true;
    }

private:
    struct Block {
        int64_t base = 0; // the block's minimum
        int64_t max = 0; // and maximum
        uint64_t offset : 40; // of its differences in m_bytes (a series of 2^31 values takes at most 2^34 bytes)
        uint64_t width : 4; // bytes per difference: 0 (all equal), 1, 2, 4 or 8
        uint64_t shift : 6; // value = base + (difference << shift)
        uint64_t minAt : 7; // the first value equal to base, and to max, within the block
        uint64_t maxAt : 7;
    };
    static_assert(sizeof(Block) == 24 && BlockSize == 128);
    static_assert(std::endian::native == std::endian::little, "a difference's low bytes are stored first");

    template <typename T> static void unpack(const Block& block, const uint8_t* p, size_t k, size_t n, int64_t* out)
    {
        for (size_t j = 0; j < n; ++j) {
            T v;
            std::memcpy(&v, p + sizeof(T) * (k + j), sizeof(T));
            out[j] = int64_t(uint64_t(block.base) + (uint64_t(v) << block.shift));
        }
    }

    template <typename T> void pack(const Block& block, uint8_t* p) const
    {
        for (size_t j = 0; j < BlockSize; ++j) {
            const T d = T((uint64_t(m_tail[j]) - uint64_t(block.base)) >> block.shift);
            std::memcpy(p + j * sizeof(T), &d, sizeof(T));
        }
    }

    // Packs the full tail into a block, in one pass to measure it and one to write it. Differences are taken in
    // uint64_t: exact for any two int64_t values. The zero bits all differences from the minimum share are those all
    // differences from the first value share (either set's differences are the other's, less one of them).
    void seal()
    {
        int64_t lo = m_tail[0], hi = m_tail[0];
        size_t loAt = 0, hiAt = 0;
        uint64_t any = 0;
        for (size_t j = 0; j < BlockSize; ++j) {
            const int64_t v = m_tail[j];
            if (v < lo) {
                lo = v;
                loAt = j;
            }
            if (v > hi) {
                hi = v;
                hiAt = j;
            }
            any |= uint64_t(v) - uint64_t(m_tail[0]);
        }
        Block block;
        block.base = lo;
        block.max = hi;
        block.minAt = loAt;
        block.maxAt = hiAt;
        block.offset = m_bytes.size();
        block.shift = any == 0 ? 0 : unsigned(std::countr_zero(any));
        const uint64_t largest = (uint64_t(hi) - uint64_t(lo)) >> block.shift;
        block.width = largest == 0  ? 0
            : largest <= UINT8_MAX  ? 1
            : largest <= UINT16_MAX ? 2
            : largest <= UINT32_MAX ? 4
                                    : 8;
        if (block.width > 0) {
            const size_t at = m_bytes.size();
            m_bytes.resizeForOverwrite(at + BlockSize * block.width); // pack() writes every byte
            uint8_t* p = m_bytes.data() + at;
            switch (block.width) {
            case 1:
                pack<uint8_t>(block, p);
                break;
            case 2:
                pack<uint16_t>(block, p);
                break;
            case 4:
                pack<uint32_t>(block, p);
                break;
            default:
                pack<uint64_t>(block, p);
                break;
            }
        }
        m_blocks.push_back(block);
    }

    GrowingArray<Block> m_blocks;
    GrowingArray<uint8_t> m_bytes;
    std::array<int64_t, BlockSize> m_tail {};
    size_t m_size = 0;
};

} // namespace memscope::model
