// Tests of model::GrowingArray against std::vector as the oracle: every operation, on both sides of the switch from
// the heap to a mapping of its own (and across mremap growth), with element types that have default member values;
// and what model/prefault.h does for such arrays (pages made present ahead, pages warmed for a file's open).
#include "model/growingarray.h"
#include "model/prefault.h"
#include "model/snapshot.h"
#include "vmflags.h"

#include <QTest>

#include <algorithm>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

using memscope::model::GrowingArray;
using memscope::model::WarmPages;

namespace {

// A value with non-zero defaults, as the model's records have (TraceEntry::action, Allocation::allocIndex).
struct Record {
    int64_t a = -1;
    uint32_t b = 0xffffffffu;
    uint32_t c = 7;
    bool operator==(const Record&) const = default;
};

// Pages of [begin, begin + bytes) that are present (mincore); whole pages only.
size_t residentPages(const void* begin, size_t bytes)
{
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(begin) + bytes) & ~(page - 1);
    std::vector<unsigned char> in((end - first) / page);
    if (end <= first || mincore(reinterpret_cast<void*>(first), end - first, in.data()) != 0)
        return 0;
    return size_t(std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; }));
}

// MADV_POPULATE_WRITE is Linux 5.14; without it prefaulting and warming are off by design (prefault.h).
bool canPopulate()
{
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* probe = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED)
        return false;
    const bool supported = madvise(probe, page, 23 /* MADV_POPULATE_WRITE */) == 0;
    munmap(probe, page);
    return supported;
}

// This process's resident bytes (/proc/self/statm).
size_t residentBytes()
{
    size_t pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%zu %zu", &pages, &resident) != 2)
            resident = 0;
        std::fclose(f);
    }
    return resident * size_t(sysconf(_SC_PAGESIZE));
}

template <typename T> bool same(const GrowingArray<T>& g, const std::vector<T>& v)
{
    return g.size() == v.size() && std::equal(g.begin(), g.end(), v.begin());
}

} // namespace

class TestGrowingArray : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // The huge-page advice is tested as on a machine where it pays (model/processmemory.h: hugePagesPay() decides
    // once, on its first call).
    void initTestCase() { setenv("MEMSCOPE_HUGE_PAGES", "1", 1); }
    // Random appends, inserts, erases and resizes agree with std::vector at every step, from empty to well past
    // the size where the array moves into a mapping.
    void randomOperationsMatchVector_data();
    void randomOperationsMatchVector();
    void crossesIntoMappingKeepingContents();
    void copiesAreDeepAndMovesSteal();
    void resizeValueInitialises();
    void appendOfItsOwnElements();
    void memoryCountsWrittenPartOfMapping();
    void worksAsSpanAndWithAlgorithms();
    void prefaultMakesPagesPresentWithoutWriting();
    // WarmPages (prefault.h) makes its whole mapping present in the background, every byte zero; release() gives
    // the pages back (the range is unmapped, the resident size drops by it) and leaves nothing held.
    void warmPagesBecomePresentThenGoBack();
    // Released at once, a large warming stops within a page and gives back what it had; 0 bytes map nothing.
    void warmPagesReleasedEarlyOrEmpty();
    // release() ends the thread's pause after a page at once: with a pause a billion times as long as the page took
    // (days), it returns, the pages unmapped (waiting the pause out, the test would not end).
    void warmPagesReleaseEndsAPause();
    // How much a file's open warms: two thirds of the file, nothing below 64 MiB, at most a quarter of what the
    // machine has free.
    void warmSizeForAFile_data();
    void warmSizeForAFile();
    // setHugePages marks the mapping there is (the kernel's VmFlags of it say so) and every mapping after a growth,
    // and off again; on the heap it does nothing, and the elements stay as they were.
    void hugePagesAdviceReachesTheMapping();
    // resizeForOverwrite keeps the elements there were and makes room for the rest, which two threads then write
    // (the replay's gather does so): the array reads back what they wrote, on the heap and in a mapping.
    void resizeForOverwriteThenFillFromTwoThreads_data();
    void resizeForOverwriteThenFillFromTwoThreads();
};

void TestGrowingArray::randomOperationsMatchVector_data()
{
    QTest::addColumn<int>("steps");
    QTest::addColumn<int>("seed");
    QTest::newRow("small") << 200 << 1;
    QTest::newRow("medium") << 3000 << 2;
    QTest::newRow("large") << 20000 << 3;
}

void TestGrowingArray::randomOperationsMatchVector()
{
    QFETCH(int, steps);
    QFETCH(int, seed);
    std::mt19937_64 rng { uint64_t(seed) };
    GrowingArray<Record> g;
    std::vector<Record> v;
    bool wasMapped = false;
    for (int step = 0; step < steps; ++step) {
        const int op = int(rng() % 10);
        const Record r { int64_t(rng() % 1000), uint32_t(step), uint32_t(seed) };
        if (op < 5) {
            g.push_back(r);
            v.push_back(r);
        } else if (op == 5) {
            std::vector<Record> more(rng() % 300, r);
            g.append(more.begin(), more.end());
            v.insert(v.end(), more.begin(), more.end());
        } else if (op == 6 && !v.empty()) {
            const size_t at = rng() % (v.size() + 1);
            const Record two[2] = { r, Record {} };
            g.insert(g.begin() + at, two, two + 2);
            v.insert(v.begin() + ptrdiff_t(at), two, two + 2);
        } else if (op == 7 && !v.empty()) {
            const size_t at = rng() % v.size();
            const size_t n = std::min<size_t>(rng() % 5, v.size() - at);
            g.erase(g.begin() + at, g.begin() + at + n);
            v.erase(v.begin() + ptrdiff_t(at), v.begin() + ptrdiff_t(at + n));
        } else if (op == 8) {
            const size_t n = v.size() + rng() % 64;
            g.resize(n);
            v.resize(n);
        } else if (!v.empty()) {
            g.pop_back();
            v.pop_back();
            g.emplace_back(r);
            v.emplace_back(r);
        }
        wasMapped |= g.isMapped();
        QVERIFY2(same(g, v), qPrintable(QStringLiteral("step %1, op %2").arg(step).arg(op)));
        QVERIFY(g.capacity() >= g.size());
    }
    if (steps >= 20000)
        QVERIFY(wasMapped); // the test did cover the mapping
}

void TestGrowingArray::crossesIntoMappingKeepingContents()
{
    GrowingArray<uint64_t> g;
    const size_t heapLimit = GrowingArray<uint64_t>::MappedBytes / sizeof(uint64_t);
    size_t firstMapped = 0;
    // Several mremap growths: from heap into a mapping, then 2 MiB, 4 MiB, ... 32 MiB of capacity.
    for (uint64_t i = 0; i < 4 * heapLimit * 8; ++i) {
        g.push_back(i * 2654435761u);
        if (!firstMapped && g.isMapped())
            firstMapped = g.size();
    }
    QVERIFY(firstMapped > 0 && firstMapped <= heapLimit + 1);
    for (uint64_t i = 0; i < g.size(); ++i)
        QCOMPARE(g[i], i * 2654435761u);
    g.clear();
    QVERIFY(g.empty());
    QVERIFY(g.isMapped()); // clear keeps the storage, as std::vector's does
    g.shrink_to_fit();
    QVERIFY(!g.isMapped());
    QCOMPARE(g.capacity(), size_t(0));
}

void TestGrowingArray::copiesAreDeepAndMovesSteal()
{
    GrowingArray<int> small { 1, 2, 3 };
    GrowingArray<int> big(size_t(1) << 20, 5); // 4 MiB: mapped
    QVERIFY(big.isMapped());
    for (GrowingArray<int>* source : { &small, &big }) {
        GrowingArray<int> copy = *source;
        QVERIFY(copy == *source);
        QVERIFY(copy.data() != source->data());
        copy[0] = 42;
        QVERIFY(!(copy == *source)); // writing the copy leaves the source alone
        const int* storage = copy.data();
        GrowingArray<int> moved = std::move(copy);
        QCOMPARE(moved.data(), storage);
        QVERIFY(copy.empty()); // NOLINT(bugprone-use-after-move): a moved-from array is empty
        GrowingArray<int> assigned;
        assigned = moved;
        QVERIFY(assigned == moved);
        assigned = { 9, 8 };
        QCOMPARE(assigned.size(), size_t(2));
        QCOMPARE(assigned.back(), 8);
    }
}

void TestGrowingArray::resizeValueInitialises()
{
    GrowingArray<Record> g;
    g.resize(100000); // across the mapping switch
    QVERIFY(std::all_of(g.begin(), g.end(), [](const Record& r) { return r == Record {}; }));
    g.resize(10);
    g.resize(20, Record { 1, 2, 3 });
    QVERIFY(std::all_of(g.begin(), g.begin() + 10, [](const Record& r) { return r == Record {}; }));
    QVERIFY(std::all_of(g.begin() + 10, g.end(), [](const Record& r) { return r == Record { 1, 2, 3 }; }));
    g.assign(3, Record { 4, 5, 6 });
    QCOMPARE(g.size(), size_t(3));
    QVERIFY(g.front() == (Record { 4, 5, 6 }));
}

void TestGrowingArray::appendOfItsOwnElements()
{
    // Appending a range of the array itself must survive the reallocation that appending causes.
    GrowingArray<int> g;
    for (int i = 0; i < 16; ++i)
        g.push_back(i);
    std::vector<int> v(g.begin(), g.end());
    for (int round = 0; round < 18; ++round) { // 16 << 18 ints: well into the mapping
        g.append(g.begin(), g.end());
        v.insert(v.end(), v.begin(), v.end());
        g.push_back(g[0]); // push_back of its own element at a full capacity
        v.push_back(v[0]);
    }
    QVERIFY(same(g, v));
}

void TestGrowingArray::memoryCountsWrittenPartOfMapping()
{
    GrowingArray<uint64_t> g;
    g.reserve(size_t(64) << 20); // 512 MiB of capacity, never written
    QVERIFY(g.isMapped());
    QCOMPARE(g.memoryBytes(), size_t(0));
    g.resize(1000);
    QCOMPARE(g.memoryBytes(), size_t(8000));
    GrowingArray<uint64_t> heap;
    heap.reserve(100);
    QCOMPARE(heap.memoryBytes(), size_t(800));
}

void TestGrowingArray::worksAsSpanAndWithAlgorithms()
{
    GrowingArray<int64_t> g;
    for (int64_t i = 0; i < 1000; ++i)
        g.push_back((i * 7919) % 1000);
    const std::span<const int64_t> view = g;
    QCOMPARE(view.size(), g.size());
    QCOMPARE(std::accumulate(view.begin(), view.end(), int64_t(0)), int64_t(999 * 1000 / 2));
    std::sort(g.begin(), g.end());
    QVERIFY(std::is_sorted(g.begin(), g.end()));
    QCOMPARE(*std::lower_bound(g.begin(), g.end(), 500), int64_t(500));
    QCOMPARE(std::distance(g.rbegin(), g.rend()), ptrdiff_t(1000));
    memscope::model::Trace trace(3);
    QCOMPARE(trace[2].action, memscope::model::Action::Unknown); // the model's records keep their defaults
}

// The prefault thread makes the pages past the size present (mincore says so) and changes no element, also
// while the owner goes on appending; an array on the heap asks for nothing.
void TestGrowingArray::prefaultMakesPagesPresentWithoutWriting()
{
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    if (!canPopulate())
        QSKIP("this kernel has no MADV_POPULATE_WRITE");
    GrowingArray<uint64_t> g;
    g.reserve(size_t(8) << 20); // 64 MiB of capacity: mapped, nothing present yet
    QVERIFY(g.isMapped());
    for (uint64_t i = 0; i < 1000; ++i)
        g.push_back(i);
    const size_t ahead = size_t(5) << 18; // 10 MiB of elements: the thread populates 4 MiB at a time
    const uint64_t* past = g.data() + g.size();
    QVERIFY(residentPages(past, ahead * sizeof(uint64_t)) < 16);
    g.prefaultAhead(ahead);
    // The owner keeps writing meanwhile; the thread must not disturb it.
    for (uint64_t i = 1000; i < 200000; ++i)
        g.push_back(i);
    const size_t pages = ahead * sizeof(uint64_t) / page;
    QTRY_VERIFY_WITH_TIMEOUT(residentPages(past, ahead * sizeof(uint64_t)) >= pages - 2, 10000);
    for (uint64_t i = 0; i < g.size(); ++i)
        QCOMPARE(g[i], i);
    // Past the requested window, nothing was asked for.
    QVERIFY(residentPages(g.data() + 1000 + ahead + 1024, ahead * sizeof(uint64_t)) < 16);

    GrowingArray<uint64_t> small { 1, 2, 3 };
    small.prefaultAhead(ahead); // on the heap: no request, no effect
    QCOMPARE(small.size(), size_t(3));
}

void TestGrowingArray::warmPagesBecomePresentThenGoBack()
{
    if (!canPopulate())
        QSKIP("this kernel has no MADV_POPULATE_WRITE");
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t bytes = size_t(64) << 20;
    WarmPages warm(bytes);
    QCOMPARE(warm.size(), bytes);
    const void* const data = warm.data();
    QVERIFY(data != nullptr);
    QTRY_COMPARE_WITH_TIMEOUT(warm.present(), bytes, 30000);
    QCOMPARE(residentPages(data, bytes), bytes / page);
    const auto* bytesAt = static_cast<const unsigned char*>(data);
    for (size_t at = 0; at < bytes; at += page / 2 + 13)
        QCOMPARE(int(bytesAt[at]), 0);
    const size_t before = residentBytes();
    warm.release();
    const size_t after = residentBytes();
    QVERIFY2(before >= after + bytes / 4 * 3,
             qPrintable(QStringLiteral("resident %1 MiB -> %2 MiB").arg(before >> 20).arg(after >> 20)));
    std::vector<unsigned char> in(1);
    QCOMPARE(mincore(const_cast<void*>(data), page, in.data()), -1); // unmapped
    QCOMPARE(errno, ENOMEM);
    QCOMPARE(warm.data(), nullptr);
    QCOMPARE(warm.size(), size_t(0));
    QCOMPARE(warm.present(), size_t(0));
    warm.release(); // again: nothing
    QCOMPARE(warm.data(), nullptr);
}

void TestGrowingArray::warmPagesReleaseEndsAPause()
{
    if (!canPopulate())
        QSKIP("this kernel has no MADV_POPULATE_WRITE");
    const size_t bytes = size_t(64) << 20;
    WarmPages warm(bytes, 1e9);
    const void* const data = warm.data();
    QVERIFY(data != nullptr);
    QTRY_VERIFY_WITH_TIMEOUT(warm.present() > 0, 30000); // a page done: the thread is in its pause
    QVERIFY(warm.present() < bytes); // and stays there
    warm.release();
    QCOMPARE(warm.data(), nullptr);
    QCOMPARE(warm.present(), size_t(0));
    std::vector<unsigned char> in(1);
    QCOMPARE(mincore(const_cast<void*>(data), size_t(sysconf(_SC_PAGESIZE)), in.data()), -1); // unmapped
    QCOMPARE(errno, ENOMEM);
}

void TestGrowingArray::warmPagesReleasedEarlyOrEmpty()
{
    const size_t bytes = size_t(1) << 30;
    const size_t before = residentBytes();
    {
        WarmPages warm(bytes);
        QVERIFY(warm.data() != nullptr);
        warm.release();
        QCOMPARE(warm.data(), nullptr);
        QCOMPARE(warm.present(), size_t(0));
    }
    // Nothing held afterwards (give or take the test's own allocations).
    QVERIFY2(residentBytes() < before + (size_t(16) << 20),
             qPrintable(QStringLiteral("resident %1 MiB -> %2 MiB").arg(before >> 20).arg(residentBytes() >> 20)));
    {
        WarmPages warm(bytes); // destroyed while warming: the destructor releases
        QVERIFY(warm.data() != nullptr);
    }
    QVERIFY(residentBytes() < before + (size_t(16) << 20));
    WarmPages none(0);
    QCOMPARE(none.data(), nullptr);
    QCOMPARE(none.size(), size_t(0));
    QCOMPARE(none.present(), size_t(0));
}

void TestGrowingArray::warmSizeForAFile_data()
{
    QTest::addColumn<quint64>("file");
    QTest::addColumn<quint64>("available");
    QTest::addColumn<quint64>("expected");
    constexpr quint64 MiB = quint64(1) << 20, GiB = quint64(1) << 30;
    QTest::newRow("small file") << 63 * MiB << 16 * GiB << quint64(0);
    QTest::newRow("64 MiB") << 64 * MiB << 16 * GiB << quint64(64 * MiB / 3 * 2);
    QTest::newRow("1 GiB file") << 1 * GiB << 16 * GiB << quint64(1 * GiB / 3 * 2);
    QTest::newRow("short of memory") << 6 * GiB << 8 * GiB << quint64(2 * GiB);
    QTest::newRow("memory unknown") << 1 * GiB << quint64(0) << quint64(0);
}

void TestGrowingArray::warmSizeForAFile()
{
    QFETCH(quint64, file);
    QFETCH(quint64, available);
    QFETCH(quint64, expected);
    QCOMPARE(quint64(WarmPages::sizeFor(file, available)), expected);
    // What a path gives: nothing for one that is not a regular file, or a small one.
    QCOMPARE(WarmPages::sizeForFile("/nonexistent/snapshot.pickle"), size_t(0));
    QCOMPARE(WarmPages::sizeForFile("/proc/self"), size_t(0));
    QCOMPARE(WarmPages::sizeForFile(QFINDTESTDATA("tst_growingarray.cpp").toStdString()), size_t(0));
}

void TestGrowingArray::hugePagesAdviceReachesTheMapping()
{
    GrowingArray<uint64_t> g;
    for (uint64_t i = 0; i < (size_t(4) << 20) / sizeof(uint64_t); ++i) // 4 MiB: mapped
        g.push_back(i);
    QVERIFY(g.isMapped());
    if (memscope::test::vmFlagsOf(g.data()).empty())
        QSKIP("no /proc/self/smaps with VmFlags here");
    auto flags = [&] {
        std::string f = memscope::test::vmFlagsOf(g.data());
        std::replace(f.begin(), f.end(), '\n', ' ');
        return " " + f + " ";
    };
    QVERIFY2(flags().find(" hg ") == std::string::npos, flags().c_str());
    g.setHugePages(true); // the mapping there is
    QVERIFY2(flags().find(" hg ") != std::string::npos, flags().c_str());
    for (uint64_t i = 0; i < (size_t(64) << 20) / sizeof(uint64_t); ++i) // grown by mremap, maybe moved
        g.push_back(i);
    QVERIFY2(flags().find(" hg ") != std::string::npos, flags().c_str());
    g.setHugePages(false);
    QVERIFY2(flags().find(" hg ") == std::string::npos && flags().find(" nh ") != std::string::npos, flags().c_str());
    for (uint64_t i = 0; i < (size_t(4) << 20) / sizeof(uint64_t); ++i)
        QCOMPARE(g[i], i);
    GrowingArray<uint64_t> small { 1, 2, 3 };
    small.setHugePages(true); // on the heap: nothing to advise
    QCOMPARE(small.size(), size_t(3));
    QCOMPARE(small[2], uint64_t(3));
}

void TestGrowingArray::resizeForOverwriteThenFillFromTwoThreads_data()
{
    QTest::addColumn<int>("size");
    QTest::newRow("on the heap") << 1000;
    QTest::newRow("in a mapping, grown past it") << 3000000;
}

void TestGrowingArray::resizeForOverwriteThenFillFromTwoThreads()
{
    QFETCH(int, size);
    GrowingArray<Record> g;
    for (int i = 0; i < 100; ++i)
        g.push_back(Record { i, uint32_t(i), 1 });
    g.resizeForOverwrite(size_t(size));
    QCOMPARE(g.size(), size_t(size));
    for (int i = 0; i < 100; ++i)
        QCOMPARE(g[size_t(i)], (Record { i, uint32_t(i), 1 }));
    const size_t half = (size_t(size) + 100) / 2;
    auto fill = [&](size_t begin, size_t end) {
        for (size_t k = begin; k < end; ++k)
            g[k] = Record { int64_t(k) * 3, uint32_t(k), 2 };
    };
    std::thread other(fill, half, size_t(size));
    fill(100, half);
    other.join();
    for (size_t k = 100; k < size_t(size); ++k)
        QCOMPARE(g[k], (Record { int64_t(k) * 3, uint32_t(k), 2 }));
    g.push_back(Record {}); // and it grows on from there
    QCOMPARE(g.size(), size_t(size) + 1);
    QCOMPARE(g.back(), Record {});
}

QTEST_GUILESS_MAIN(TestGrowingArray)
#include "tst_growingarray.moc"
