// GrowingArray<T>: a contiguous array of trivially copyable values, with std::vector's interface, that grows
// without copying its elements once it is large.
//
// Live attach appends millions of trace entries, series values and allocations a second to arrays that views read
// between appends. A std::vector copies all of its elements when it outgrows its capacity: at a few million
// entries that is hundreds of MB copied (and as many fresh pages faulted in) in one GUI event, a stall of a few
// hundred milliseconds (bench_live). From MappedBytes on, a GrowingArray keeps its elements in an anonymous
// mapping of its own and grows it with mremap(2), which moves page tables rather than bytes; pages beyond the size
// cost no memory until written. Below that it lives on the heap (realloc), so small arrays cost no mapping each.
//
// Elements stay contiguous, so a GrowingArray converts to std::span and works with every std algorithm. Like a
// std::vector, growing invalidates pointers into it. Not thread-safe; the owner's rules apply.
#pragma once

#include "model/prefault.h"
#include "model/processmemory.h"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include <sys/mman.h>

namespace memscope::model {

template <typename T>
class GrowingArray {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                  "GrowingArray moves its elements as bytes");

public:
    using value_type = T;
    using size_type = size_t;
    using difference_type = ptrdiff_t;
    using reference = T&;
    using const_reference = const T&;
    using pointer = T*;
    using const_pointer = const T*;
    using iterator = T*;
    using const_iterator = const T*;
    using reverse_iterator = std::reverse_iterator<iterator>;
    using const_reverse_iterator = std::reverse_iterator<const_iterator>;

    // From this many bytes of capacity on, the elements live in a mapping of their own (a multiple of
    // MappingGranule, so that the kernel may back it with transparent huge pages).
    static constexpr size_t MappedBytes = size_t(1) << 20;
    static constexpr size_t MappingGranule = size_t(2) << 20;

    GrowingArray() = default;
    explicit GrowingArray(size_t n) { resize(n); }
    GrowingArray(size_t n, const T& value) { assign(n, value); }
    GrowingArray(std::initializer_list<T> values) { append(values.begin(), values.end()); }
    template <std::input_iterator It>
    GrowingArray(It first, It last)
    {
        append(first, last);
    }
    GrowingArray(const GrowingArray& other) { append(other.begin(), other.end()); }
    GrowingArray(GrowingArray&& other) noexcept { swap(other); }
    GrowingArray& operator=(const GrowingArray& other)
    {
        if (this != &other) {
            clear();
            append(other.begin(), other.end());
        }
        return *this;
    }
    GrowingArray& operator=(GrowingArray&& other) noexcept
    {
        GrowingArray(std::move(other)).swap(*this);
        return *this;
    }
    GrowingArray& operator=(std::initializer_list<T> values)
    {
        clear();
        append(values.begin(), values.end());
        return *this;
    }
    ~GrowingArray() { release(); }

    void swap(GrowingArray& other) noexcept
    {
        std::swap(m_data, other.m_data);
        std::swap(m_size, other.m_size);
        std::swap(m_capacity, other.m_capacity);
        std::swap(m_mappedBytes, other.m_mappedBytes);
        std::swap(m_hugePages, other.m_hugePages);
        std::swap(m_prefaulted, other.m_prefaulted);
    }
    friend void swap(GrowingArray& a, GrowingArray& b) noexcept { a.swap(b); }

    iterator begin() { return m_data; }
    iterator end() { return m_data + m_size; }
    const_iterator begin() const { return m_data; }
    const_iterator end() const { return m_data + m_size; }
    const_iterator cbegin() const { return m_data; }
    const_iterator cend() const { return m_data + m_size; }
    reverse_iterator rbegin() { return reverse_iterator(end()); }
    reverse_iterator rend() { return reverse_iterator(begin()); }
    const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
    const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

    size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    size_t capacity() const { return m_capacity; }
    T* data() { return m_data; }
    const T* data() const { return m_data; }
    // Asks for transparent huge pages for the mapping (where the system allows them): far fewer page faults when
    // an array is filled at once (a parse tree: 27k faults for big_trace with 4 KiB pages, a few dozen with 2 MiB
    // ones), but each fault then clears 2 MiB at once, which stalls an array that grows while someone waits: off by
    // default (a live document's arrays: bench_live's longest GUI stall went from 0.3-0.7 s to under 0.1 s). Applies
    // to the mapping there is (pages already present stay as they are) and to every later one.
    // Nothing where they do not pay (model/processmemory.h, hugePagesPay()).
    void setHugePages(bool on)
    {
        on = on && hugePagesPay();
        if (on == m_hugePages)
            return;
        m_hugePages = on;
        if (m_mappedBytes > 0)
            madvise(m_data, m_mappedBytes, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE); // a hint: failure is harmless
    }

    // Has the pages of the next `elements` elements past the size (within the capacity) made present by the
    // prefault thread (model/prefault.h), so that the appends that write them do not stop on page faults. For an
    // array that keeps growing while someone waits (a live document's); nothing for one on the heap.
    void prefaultAhead(size_t elements)
    {
        if (m_mappedBytes == 0)
            return;
        const size_t want = std::min(m_capacity, m_size + elements);
        const size_t from = std::max(m_prefaulted, m_size);
        if (want <= from)
            return;
        prefaultAsync(m_data + from, (want - from) * sizeof(T));
        m_prefaulted = want;
    }

    // Whether the elements live in a mapping of their own (tests, memory accounting).
    bool isMapped() const { return m_mappedBytes > 0; }
    // Memory it holds: its heap block, or the part of its mapping written so far (the rest costs nothing until
    // written).
    size_t memoryBytes() const { return m_mappedBytes > 0 ? m_size * sizeof(T) : m_capacity * sizeof(T); }

    T& operator[](size_t i)
    {
        assert(i < m_size);
        return m_data[i];
    }
    const T& operator[](size_t i) const
    {
        assert(i < m_size);
        return m_data[i];
    }
    T& front() { return (*this)[0]; }
    const T& front() const { return (*this)[0]; }
    T& back() { return (*this)[m_size - 1]; }
    const T& back() const { return (*this)[m_size - 1]; }

    void reserve(size_t n)
    {
        if (n > m_capacity)
            reallocate(n);
    }
    void clear() { m_size = 0; } // keeps the storage, as std::vector::clear
    void shrink_to_fit()
    {
        if (m_size == 0)
            release();
    }

    void push_back(const T& value)
    {
        if (m_size == m_capacity) {
            const T copy = value; // `value` may live in this array
            grow(m_size + 1);
            m_data[m_size++] = copy;
            return;
        }
        m_data[m_size++] = value;
    }
    template <typename... Args>
    T& emplace_back(Args&&... args)
    {
        if (m_size == m_capacity) {
            T made(std::forward<Args>(args)...);
            grow(m_size + 1);
            return m_data[m_size++] = made;
        }
        return *new (m_data + m_size++) T(std::forward<Args>(args)...);
    }
    void pop_back()
    {
        assert(m_size > 0);
        --m_size;
    }

    template <std::input_iterator It>
    void append(It first, It last)
    {
        if constexpr (std::contiguous_iterator<It>) {
            const size_t n = size_t(last - first);
            if (n == 0)
                return;
            const T* src = std::to_address(first);
            if (m_size + n > m_capacity) {
                if (src >= m_data && src < m_data + m_size) { // appending a part of itself
                    const size_t offset = size_t(src - m_data);
                    grow(m_size + n);
                    src = m_data + offset;
                } else {
                    grow(m_size + n);
                }
            }
            std::memmove(m_data + m_size, src, n * sizeof(T));
            m_size += n;
        } else {
            for (; first != last; ++first)
                push_back(*first);
        }
    }

    // Inserts [first, last) before `pos`; the elements from `pos` on move up.
    template <std::input_iterator It>
    iterator insert(const_iterator pos, It first, It last)
    {
        const size_t at = size_t(pos - m_data);
        const size_t before = m_size;
        append(first, last);
        std::rotate(m_data + at, m_data + before, m_data + m_size);
        return m_data + at;
    }
    iterator insert(const_iterator pos, const T& value)
    {
        const T copy = value; // `value` may live in this array
        return insert(pos, &copy, &copy + 1);
    }
    iterator erase(const_iterator first, const_iterator last)
    {
        const size_t at = size_t(first - m_data), n = size_t(last - first);
        std::memmove(m_data + at, m_data + at + n, (m_size - at - n) * sizeof(T));
        m_size -= n;
        return m_data + at;
    }
    iterator erase(const_iterator pos) { return erase(pos, pos + 1); }

    void resize(size_t n)
    {
        if (n > m_capacity)
            grow(n);
        if (n > m_size)
            std::uninitialized_value_construct(m_data + m_size, m_data + n); // one memset for plain types
        m_size = n;
    }
    // The size `n` without writing the elements added (their bytes are whatever the memory held: zeros for pages never
    // written), for a caller that overwrites every one of them, perhaps from several threads at once, before reading.
    void resizeForOverwrite(size_t n)
    {
        if (n > m_capacity)
            grow(n);
        m_size = n;
    }
    void resize(size_t n, const T& value)
    {
        const T copy = value;
        if (n > m_capacity)
            grow(n);
        std::fill(m_data + std::min(m_size, n), m_data + n, copy);
        m_size = n;
    }
    void assign(size_t n, const T& value)
    {
        const T copy = value;
        clear();
        resize(n, copy);
    }
    template <std::input_iterator It>
    void assign(It first, It last)
    {
        clear();
        append(first, last);
    }

    friend bool operator==(const GrowingArray& a, const GrowingArray& b)
    {
        return std::equal(a.begin(), a.end(), b.begin(), b.end());
    }

private:
    void grow(size_t atLeast) { reallocate(std::max({ atLeast, m_capacity * 2, size_t(16) })); }

    void reallocate(size_t n)
    {
        const size_t bytes = n * sizeof(T);
        if (bytes < MappedBytes && m_mappedBytes == 0) {
            void* p = std::realloc(static_cast<void*>(m_data), bytes);
            if (!p)
                throw std::bad_alloc();
            m_data = static_cast<T*>(p);
            m_capacity = n;
            return;
        }
        const size_t mapped = (bytes + MappingGranule - 1) / MappingGranule * MappingGranule;
        void* p;
        if (m_mappedBytes > 0) {
            p = mremap(m_data, m_mappedBytes, mapped, MREMAP_MAYMOVE);
            if (p == MAP_FAILED)
                throw std::bad_alloc();
        } else {
            p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                throw std::bad_alloc();
            if (m_size > 0)
                std::memcpy(p, static_cast<const void*>(m_data), m_size * sizeof(T));
            m_prefaulted = m_size;
            std::free(static_cast<void*>(m_data));
        }
        m_mappedBytes = mapped;
        if (m_hugePages)
            madvise(p, mapped, MADV_HUGEPAGE); // a hint: fewer page faults where the system allows it
        m_data = static_cast<T*>(p);
        m_capacity = mapped / sizeof(T);
    }

    void release()
    {
        if (m_mappedBytes > 0)
            munmap(m_data, m_mappedBytes);
        else
            std::free(static_cast<void*>(m_data));
        m_data = nullptr;
        m_size = m_capacity = m_mappedBytes = m_prefaulted = 0;
    }

    T* m_data = nullptr;
    size_t m_size = 0;
    size_t m_capacity = 0;
    size_t m_mappedBytes = 0; // length of the mapping; 0: on the heap
    bool m_hugePages = false;
    size_t m_prefaulted = 0; // elements of the mapping whose pages were asked for (prefaultAhead)
};

} // namespace memscope::model
