// AddressMap: DeviceAddr -> uint32_t, a flat hash map for the hot loops that follow every trace entry (the builder's
// address versions, the replay's live blocks). Open addressing, linear probing, backward-shift deletion: no heap
// allocation per operation and about 3x faster than std::unordered_map here. Not thread-safe; one owner.
#pragma once

#include "model/snapshot.h"

#include <bit>
#include <cstdint>
#include <vector>

namespace memscope::model {

// DeviceAddr -> uint32_t, open addressing with linear probing and backward-shift deletion: the blocks live at
// the current point of the backward pass, with no heap allocation per event.
class AddressMap {
public:
    static constexpr uint32_t None = UINT32_MAX; // what find() returns for an absent key

    explicit AddressMap(size_t expected)
    {
        size_t capacity = 16;
        while (capacity < expected * 2)
            capacity *= 2;
        rehash(capacity);
    }

    uint32_t find(DeviceAddr key) const
    {
        if (key == Empty) [[unlikely]]
            return m_emptyKeyValue;
        for (size_t i = home(key);; i = (i + 1) & m_mask) {
            if (m_keys[i] == key)
                return m_values[i];
            if (m_keys[i] == Empty)
                return None;
        }
    }

    // Asks the cache for the slot where a lookup of `key` starts: a loop over millions of entries whose map has left
    // the cache calls it for an entry some way ahead, so that its own lookup finds the line there. Always inlined: a
    // function that only prefetches has no effect GCC must keep, and g++ 12 deletes the calls it does not inline.
    [[gnu::always_inline]] void prefetch(DeviceAddr key) const
    {
        const size_t i = home(key);
        __builtin_prefetch(m_keys.data() + i);
        __builtin_prefetch(m_values.data() + i);
    }

    // The key must be absent.
    void insert(DeviceAddr key, uint32_t value)
    {
        if (key == Empty) [[unlikely]] {
            m_emptyKeyValue = value;
            return;
        }
        if ((m_size + 1) * 2 > m_keys.size())
            rehash(m_keys.size() * 2);
        size_t i = home(key);
        while (m_keys[i] != Empty)
            i = (i + 1) & m_mask;
        m_keys[i] = key;
        m_values[i] = value;
        ++m_size;
    }

    // Replaces the value of a present key; does nothing when the key is absent.
    void assign(DeviceAddr key, uint32_t value)
    {
        if (key == Empty) [[unlikely]] {
            if (m_emptyKeyValue != None)
                m_emptyKeyValue = value;
            return;
        }
        for (size_t i = home(key);; i = (i + 1) & m_mask) {
            if (m_keys[i] == key) {
                m_values[i] = value;
                return;
            }
            if (m_keys[i] == Empty)
                return;
        }
    }

    void erase(DeviceAddr key)
    {
        if (key == Empty) [[unlikely]] {
            m_emptyKeyValue = None;
            return;
        }
        size_t i = home(key);
        while (m_keys[i] != key) {
            if (m_keys[i] == Empty)
                return;
            i = (i + 1) & m_mask;
        }
        // Shift later members of the probe run back into the hole so lookups need no tombstones.
        for (size_t j = (i + 1) & m_mask; m_keys[j] != Empty; j = (j + 1) & m_mask) {
            if (((j - home(m_keys[j])) & m_mask) >= ((j - i) & m_mask)) {
                m_keys[i] = m_keys[j];
                m_values[i] = m_values[j];
                i = j;
            }
        }
        m_keys[i] = Empty;
        --m_size;
    }

    template <typename F> void forEach(F&& f) const
    {
        if (m_emptyKeyValue != None)
            f(Empty, m_emptyKeyValue);
        for (size_t i = 0; i < m_keys.size(); ++i)
            if (m_keys[i] != Empty)
                f(m_keys[i], m_values[i]);
    }

private:
    // Marks an empty slot. It is a DeviceAddr like any other (an address of 2^63 or more in a file reads as a
    // negative one), so that key lives outside the table, in m_emptyKeyValue.
    static constexpr DeviceAddr Empty = INT64_MIN;

    size_t home(DeviceAddr key) const { return size_t((uint64_t(key) * 0x9E3779B97F4A7C15ull) >> m_shift); }

    void rehash(size_t capacity)
    {
        std::vector<DeviceAddr> keys(capacity, Empty);
        std::vector<uint32_t> values(capacity, None);
        keys.swap(m_keys);
        values.swap(m_values);
        m_mask = capacity - 1;
        m_shift = 64 - std::countr_zero(capacity);
        m_size = 0;
        for (size_t i = 0; i < keys.size(); ++i)
            if (keys[i] != Empty)
                insert(keys[i], values[i]);
    }

    std::vector<DeviceAddr> m_keys;
    std::vector<uint32_t> m_values;
    size_t m_mask = 0;
    int m_shift = 0;
    size_t m_size = 0;
    uint32_t m_emptyKeyValue = None; // the value of the key Empty; None: absent
};

} // namespace memscope::model
