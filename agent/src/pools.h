// Allocation-free-after-warm-up containers for the allocator's hot path: a free list of fixed-size nodes that backs
// the ordered block pools (std::set nodes) and the Block objects themselves, and an open-addressing map from device
// pointer to block. Memory is taken from the heap in chunks and only given back when the container dies, so a
// steady malloc/free cycle never calls the system allocator. Not thread-safe: each device allocator owns its own
// and uses them under its lock.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace memscope::agent {

// Hands out `SlotSize`-byte slots from 64 KiB chunks; freed slots go on a free list.
class NodeArena {
public:
    static constexpr size_t SlotSize = 64;
    static constexpr size_t SlotAlign = 16;

    NodeArena() = default;
    NodeArena(const NodeArena&) = delete;
    NodeArena& operator=(const NodeArena&) = delete;
    ~NodeArena()
    {
        for (void* c : m_chunks)
            ::operator delete(c, std::align_val_t(SlotAlign));
    }

    void* allocate()
    {
        if (m_free) {
            FreeSlot* s = m_free;
            m_free = s->next;
            return s;
        }
        if (m_bumpLeft == 0)
            grow();
        void* p = m_bump;
        m_bump += SlotSize;
        --m_bumpLeft;
        return p;
    }

    void deallocate(void* p)
    {
        auto* s = static_cast<FreeSlot*>(p);
        s->next = m_free;
        m_free = s;
    }

private:
    struct FreeSlot {
        FreeSlot* next;
    };
    static constexpr size_t ChunkSlots = 1024;

    void grow()
    {
        void* c = ::operator new(SlotSize* ChunkSlots, std::align_val_t(SlotAlign));
        m_chunks.push_back(c);
        m_bump = static_cast<char*>(c);
        m_bumpLeft = ChunkSlots;
    }

    FreeSlot* m_free = nullptr;
    char* m_bump = nullptr;
    size_t m_bumpLeft = 0;
    std::vector<void*> m_chunks;
};

// A standard allocator over a NodeArena, for node-based containers (one element per allocation).
template <class T> class NodeAllocator {
public:
    using value_type = T;

    explicit NodeAllocator(NodeArena* arena) noexcept
        : m_arena(arena)
    {
    }
    template <class U>
    NodeAllocator(const NodeAllocator<U>& other) noexcept // NOLINT: rebinding must be implicit
        : m_arena(other.arena())
    {
    }

    T* allocate(size_t n)
    {
        static_assert(sizeof(T) <= NodeArena::SlotSize && alignof(T) <= NodeArena::SlotAlign,
                      "container node does not fit an arena slot");
        if (n != 1)
            return static_cast<T*>(::operator new(n * sizeof(T)));
        return static_cast<T*>(m_arena->allocate());
    }
    void deallocate(T* p, size_t n) noexcept
    {
        if (n != 1)
            ::operator delete(p);
        else
            m_arena->deallocate(p);
    }

    NodeArena* arena() const noexcept { return m_arena; }
    template <class U> bool operator==(const NodeAllocator<U>& o) const noexcept { return m_arena == o.arena(); }

private:
    NodeArena* m_arena;
};

// Objects of type T recycled through a free list (constructed on take, destroyed on give).
template <class T> class ObjectPool {
public:
    ObjectPool() = default;
    ObjectPool(const ObjectPool&) = delete;
    ObjectPool& operator=(const ObjectPool&) = delete;
    ~ObjectPool()
    {
        for (void* c : m_chunks)
            ::operator delete(c, std::align_val_t(alignof(Slot)));
    }

    template <class... Args> T* make(Args&&... args)
    {
        void* p;
        if (m_free) {
            Slot* s = m_free;
            m_free = s->next;
            p = s;
        } else {
            if (m_bumpLeft == 0)
                grow();
            p = m_bump++;
            --m_bumpLeft;
        }
        return new (p) T(std::forward<Args>(args)...);
    }

    void destroy(T* t)
    {
        t->~T();
        Slot* s = reinterpret_cast<Slot*>(t);
        s->next = m_free;
        m_free = s;
    }

private:
    union Slot {
        Slot* next;
        alignas(T) unsigned char storage[sizeof(T)];
    };
    static constexpr size_t ChunkSlots = 256;

    void grow()
    {
        m_bump = static_cast<Slot*>(::operator new(sizeof(Slot) * ChunkSlots, std::align_val_t(alignof(Slot))));
        m_chunks.push_back(m_bump);
        m_bumpLeft = ChunkSlots;
    }

    Slot* m_free = nullptr;
    Slot* m_bump = nullptr;
    size_t m_bumpLeft = 0;
    std::vector<void*> m_chunks;
};

// Device pointer -> value, open addressing with linear probing and backward-shift deletion. Key 0 is reserved
// (never a device pointer). Grows (the only allocation) when half full.
template <class V> class PtrMap {
public:
    PtrMap() { rehash(256); }

    V* find(uintptr_t key)
    {
        for (size_t i = slotOf(key);; i = (i + 1) & m_mask) {
            Entry& e = m_entries[i];
            if (e.key == key)
                return &e.value;
            if (e.key == 0)
                return nullptr;
        }
    }

    // Inserts or overwrites.
    void insert(uintptr_t key, V value)
    {
        if ((m_size + 1) * 2 > m_entries.size())
            rehash(m_entries.size() * 2);
        for (size_t i = slotOf(key);; i = (i + 1) & m_mask) {
            Entry& e = m_entries[i];
            if (e.key == key) {
                e.value = value;
                return;
            }
            if (e.key == 0) {
                e.key = key;
                e.value = value;
                ++m_size;
                return;
            }
        }
    }

    bool erase(uintptr_t key)
    {
        size_t i = slotOf(key);
        while (true) {
            if (m_entries[i].key == key)
                break;
            if (m_entries[i].key == 0)
                return false;
            i = (i + 1) & m_mask;
        }
        // Backward shift: pull later members of the probe run into the hole so lookups never see a gap.
        size_t hole = i;
        for (size_t j = (i + 1) & m_mask; m_entries[j].key != 0; j = (j + 1) & m_mask) {
            const size_t home = slotOf(m_entries[j].key);
            // Movable when its home is not cyclically inside (hole, j]: it probed past the hole to get here.
            if (((j - home) & m_mask) >= ((j - hole) & m_mask)) {
                m_entries[hole] = m_entries[j];
                hole = j;
            }
        }
        m_entries[hole].key = 0;
        --m_size;
        return true;
    }

    size_t size() const { return m_size; }

    template <class F> void forEach(F&& f) const
    {
        for (const Entry& e : m_entries) {
            if (e.key != 0)
                f(e.key, e.value);
        }
    }

private:
    struct Entry {
        uintptr_t key = 0;
        V value {};
    };

    size_t slotOf(uintptr_t key) const
    {
        // Device pointers are 512-byte aligned: drop those bits, then spread with a Fibonacci multiplier.
        return static_cast<size_t>(((key >> 9) * 0x9E3779B97F4A7C15ull) >> m_shift);
    }

    void rehash(size_t capacity)
    {
        std::vector<Entry> old = std::move(m_entries);
        m_entries.assign(capacity, Entry {});
        m_mask = capacity - 1;
        m_shift = static_cast<unsigned>(64 - std::countr_zero(capacity));
        m_size = 0;
        for (const Entry& e : old) {
            if (e.key != 0)
                insert(e.key, e.value);
        }
    }

    std::vector<Entry> m_entries;
    size_t m_mask = 0;
    unsigned m_shift = 0;
    size_t m_size = 0;
};

} // namespace memscope::agent
