// Stack capture and interning (stacks.h). The walk reads [fp] (the caller's frame pointer) and [fp + 8] (the
// return address), the frame record layout of both the x86-64 System V ABI and AArch64 AAPCS64.
#include "stacks.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::agent {
namespace {

    struct ThreadStack {
        uintptr_t high = 0; // one past the highest byte of the thread's stack; 0: not known yet
        bool known = false;
    };
    thread_local ThreadStack t_stack;

    void learnStack() noexcept
    {
        t_stack.known = true;
        pthread_attr_t attr;
        if (pthread_getattr_np(pthread_self(), &attr) != 0)
            return;
        void* low = nullptr;
        size_t size = 0;
        if (pthread_attr_getstack(&attr, &low, &size) == 0)
            t_stack.high = reinterpret_cast<uintptr_t>(low) + size;
        pthread_attr_destroy(&attr);
    }

    uint64_t hashFrames(const uintptr_t* frames, unsigned count) noexcept
    {
        uint64_t h = 0x9e3779b97f4a7c15ull ^ count;
        for (unsigned i = 0; i < count; ++i) {
            h ^= frames[i];
            h *= 0xff51afd7ed558ccdull;
            h ^= h >> 32;
        }
        return h | 1; // never 0
    }

} // namespace

StackSettings parseStackSettings(const char* text)
{
    StackSettings s;
    if (!text || !*text)
        return s;
    if (std::strcmp(text, "python") == 0) {
        s.python = true;
        return s;
    }
    if (std::strcmp(text, "all") == 0) {
        s.python = true;
        s.nativeDepth = MaxStackDepth;
        return s;
    }
    char* end = nullptr;
    const unsigned long n = std::strtoul(text, &end, 10);
    if (!end || *end != '\0')
        return s;
    s.nativeDepth = n > MaxStackDepth ? MaxStackDepth : unsigned(n);
    return s;
}

StackSettings stackSettingsFromEnvironment() { return parseStackSettings(std::getenv("MEMSCOPE_STACKS")); }

CodeSpan agentCodeSpan()
{
    struct Search {
        uintptr_t address;
        bool executable = false; // the object holding `address` is the program itself
        CodeSpan span;
    } search { reinterpret_cast<uintptr_t>(&agentCodeSpan), false, {} };
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
            auto& s = *static_cast<Search*>(data);
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const ElfW(Phdr)& h = info->dlpi_phdr[i];
                if (h.p_type != PT_LOAD || !(h.p_flags & PF_X))
                    continue;
                const uintptr_t begin = info->dlpi_addr + h.p_vaddr, end = begin + h.p_memsz;
                if (s.address >= begin && s.address < end) {
                    // The first object dl_iterate_phdr reports is the program (an empty name).
                    s.executable = info->dlpi_name == nullptr || info->dlpi_name[0] == '\0';
                    s.span = CodeSpan { begin, end };
                    return 1;
                }
            }
            return 0;
        },
        &search);
    return search.executable ? CodeSpan {} : search.span;
}

void primeStackCapture() noexcept
{
    if (!t_stack.known)
        learnStack();
}

__attribute__((noinline)) unsigned captureStack(uintptr_t* out, unsigned maxDepth) noexcept
{
    if (!t_stack.known)
        learnStack();
    auto fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    const uintptr_t low = fp;
    // Unknown bounds: at most 8 MiB above here (a thread's default stack), still only following upward links.
    const uintptr_t high = t_stack.high ? t_stack.high : fp + (uintptr_t(8) << 20);
    unsigned n = 0;
    while (n < maxDepth) {
        if (fp < low || fp > high - 2 * sizeof(uintptr_t) || (fp & (sizeof(uintptr_t) - 1)) != 0)
            break;
        const auto* frame = reinterpret_cast<const uintptr_t*>(fp);
        const uintptr_t next = frame[0];
        const uintptr_t ret = frame[1];
        if (ret < 4096)
            break;
        out[n++] = ret;
        if (next <= fp)
            break;
        fp = next;
    }
    return n;
}

StackTable::StackTable(uint32_t idBase, size_t maxStacks, size_t maxFrames)
    : m_idBase(idBase)
    , m_maxStacks(maxStacks)
    , m_maxFrames(maxFrames)
    , m_slotMask(std::bit_ceil(maxStacks * 2) - 1)
    , m_slots(new Slot[m_slotMask + 1]())
    , m_entries(new Entry[maxStacks]())
    , m_frames(new uintptr_t[maxFrames]())
{
}

uint32_t StackTable::intern(const uintptr_t* frames, unsigned count) noexcept
{
    if (count == 0)
        return 0;
    const uint64_t h = hashFrames(frames, count);
    const size_t used = m_size.load(std::memory_order_relaxed);
    for (size_t probe = 0, i = size_t(h) & m_slotMask; probe <= m_slotMask; ++probe, i = (i + 1) & m_slotMask) {
        Slot& s = m_slots[i];
        if (s.entry == 0) {
            if (used >= m_maxStacks || m_framesUsed + count > m_maxFrames) {
                m_dropped.store(m_dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
                return 0;
            }
            std::memcpy(m_frames.get() + m_framesUsed, frames, count * sizeof(uintptr_t));
            m_entries[used] = Entry { uint32_t(m_framesUsed), count };
            m_framesUsed += count;
            s.hash = h;
            s.entry = uint32_t(used) + 1;
            m_size.store(used + 1, std::memory_order_release); // the publisher may read the entry from now on
            return m_idBase + uint32_t(used) + 1;
        }
        if (s.hash == h) {
            const Entry& e = m_entries[s.entry - 1];
            if (e.count == count && std::memcmp(m_frames.get() + e.offset, frames, count * sizeof(uintptr_t)) == 0)
                return m_idBase + s.entry;
        }
    }
    m_dropped.store(m_dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return 0;
}

ElfSymbols::~ElfSymbols()
{
    for (auto& [path, object] : m_objects)
        if (object.map)
            ::munmap(object.map, object.mapSize);
}

void ElfSymbols::load(const char* path, Object& object)
{
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st { };
    void* map = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && size_t(st.st_size) >= sizeof(Elf64_Ehdr))
        map = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED)
        return;
    object.map = map;
    object.mapSize = size_t(st.st_size);
    const auto* bytes = static_cast<const unsigned char*>(map);
    const size_t size = object.mapSize;
    Elf64_Ehdr eh;
    std::memcpy(&eh, bytes, sizeof eh);
    if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64
        || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > size
        || uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr) > size - eh.e_shoff)
        return;
    object.absolute = eh.e_type == ET_EXEC;
    auto section = [&](size_t i) {
        Elf64_Shdr sh;
        std::memcpy(&sh, bytes + eh.e_shoff + i * sizeof sh, sizeof sh);
        return sh;
    };
    for (const uint32_t wanted : { uint32_t(SHT_SYMTAB), uint32_t(SHT_DYNSYM) }) {
        for (size_t i = 0; i < eh.e_shnum; ++i) {
            const Elf64_Shdr sh = section(i);
            if (sh.sh_type != wanted || sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh.e_shnum
                || sh.sh_offset > size || sh.sh_size > size - sh.sh_offset)
                continue;
            const Elf64_Shdr str = section(sh.sh_link);
            if (str.sh_offset > size || str.sh_size > size - str.sh_offset)
                continue;
            object.strings = reinterpret_cast<const char*>(bytes + str.sh_offset);
            object.stringBytes = size_t(str.sh_size);
            for (size_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); ++k) {
                Elf64_Sym sym;
                std::memcpy(&sym, bytes + sh.sh_offset + k * sizeof sym, sizeof sym);
                if (ELF64_ST_TYPE(sym.st_info) == STT_FUNC && sym.st_value != 0 && sym.st_size != 0
                    && sym.st_name < object.stringBytes)
                    object.functions.push_back({ sym.st_value, sym.st_value + sym.st_size, sym.st_name });
            }
            std::sort(object.functions.begin(), object.functions.end(),
                      [](const Function& a, const Function& b) { return a.begin < b.begin; });
            return;
        }
    }
}

std::string ElfSymbols::find(const char* path, uintptr_t base, uintptr_t address)
{
    if (!path || !*path)
        return {};
    auto [it, inserted] = m_objects.try_emplace(path);
    if (inserted)
        load(path, it->second);
    const Object& object = it->second;
    const uint64_t value = object.absolute ? address : address - base;
    auto f = std::upper_bound(object.functions.begin(), object.functions.end(), value,
                              [](uint64_t v, const Function& fn) { return v < fn.begin; });
    if (f == object.functions.begin())
        return {};
    --f;
    if (value >= f->end)
        return {};
    const char* name = object.strings + f->name;
    return std::string(name, strnlen(name, object.stringBytes - f->name));
}

} // namespace memscope::agent
