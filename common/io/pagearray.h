// A growable array of trivially copyable values in anonymous memory that asks the kernel for transparent huge
// pages. Loading a large snapshot fills tens of MB of parse tree; with 4 KiB pages most of that time went to page
// faults (measured: 27k faults for big_trace). Huge pages cut that to a few dozen, and growing uses mremap, which
// moves page tables instead of copying. Single-threaded, like the ValueTree that owns it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include <sys/mman.h>

namespace memscope::io {

template <typename T>
class PageArray {
    static_assert(std::is_trivially_copyable_v<T>);

public:
    PageArray() = default;
    PageArray(const PageArray&) = delete;
    PageArray& operator=(const PageArray&) = delete;
    ~PageArray()
    {
        if (m_data)
            munmap(m_data, m_capacity * sizeof(T));
    }

    void reserve(size_t n)
    {
        if (n > m_capacity)
            grow(n);
    }
    void push_back(const T& v)
    {
        if (m_size == m_capacity)
            grow(m_capacity ? m_capacity * 2 : 4096);
        m_data[m_size++] = v;
    }
    template <typename It>
    void append(It begin, It end)
    {
        const size_t n = static_cast<size_t>(end - begin);
        if (m_size + n > m_capacity)
            grow(std::max(m_size + n, m_capacity * 2));
        std::memcpy(m_data + m_size, &*begin, n * sizeof(T));
        m_size += n;
    }
    T& operator[](size_t i) { return m_data[i]; }
    const T& operator[](size_t i) const { return m_data[i]; }
    T& back() { return m_data[m_size - 1]; }
    size_t size() const { return m_size; }
    size_t capacity() const { return m_capacity; }
    bool empty() const { return m_size == 0; }
    T* data() { return m_data; }
    const T* data() const { return m_data; }

private:
    static constexpr size_t HugePage = size_t(2) << 20;
    void grow(size_t n)
    {
        size_t bytes = (n * sizeof(T) + HugePage - 1) / HugePage * HugePage;
        void* p;
        if (!m_data) {
            p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        } else {
            p = mremap(m_data, m_capacity * sizeof(T), bytes, MREMAP_MAYMOVE);
        }
        if (p == MAP_FAILED)
            throw std::bad_alloc();
        madvise(p, bytes, MADV_HUGEPAGE);
        m_data = static_cast<T*>(p);
        m_capacity = bytes / sizeof(T);
    }

    T* m_data = nullptr;
    size_t m_size = 0;
    size_t m_capacity = 0;
};

} // namespace memscope::io
