// Tests of model::AddressMap against std::unordered_map as the oracle: random runs of every operation over key sets
// that collide in a small table (long probe runs, deletions that shift members back across the table's end) and
// that make it grow, with the whole content compared now and then; and TraceNumbering's versions, which keep one
// counter per address in it, against a plain map.
#include "model/addressmap.h"
#include "model/eventtrace.h"

#include <QTest>

#include <map>
#include <random>
#include <unordered_map>
#include <vector>

using memscope::model::Action;
using memscope::model::AddressMap;
using memscope::model::DeviceAddr;

namespace {

// The whole content of `map` as an ordered map, for a comparison that shows every key.
std::map<DeviceAddr, uint32_t> contents(const AddressMap& map)
{
    std::map<DeviceAddr, uint32_t> out;
    map.forEach([&](DeviceAddr key, uint32_t value) {
        if (!out.emplace(key, value).second)
            out[key] = AddressMap::None; // a key listed twice: no oracle value is None, so the comparison fails
    });
    return out;
}

} // namespace

class TestAddressMap : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void matchesAnOrderedMap_data();
    void matchesAnOrderedMap();
    void numberingCountsFreesPerAddress();
    void everyKeyIsAKey();
};

void TestAddressMap::matchesAnOrderedMap_data()
{
    QTest::addColumn<int>("keys"); // distinct keys the run draws from
    QTest::addColumn<int>("stride"); // between keys: 512 for blocks, 1 for dense ones
    QTest::addColumn<int>("steps");
    QTest::addColumn<int>("expected"); // the constructor's size hint
    QTest::newRow("few keys, small table: long runs and wrap-around") << 24 << 1 << 4000 << 4;
    QTest::newRow("block addresses, grows past its hint") << 3000 << 512 << 30000 << 16;
    QTest::newRow("dense keys, hint large enough") << 500 << 1 << 20000 << 1024;
    QTest::newRow("huge strides") << 200 << (1 << 30) << 10000 << 8;
}

void TestAddressMap::matchesAnOrderedMap()
{
    QFETCH(int, keys);
    QFETCH(int, stride);
    QFETCH(int, steps);
    QFETCH(int, expected);
    std::mt19937_64 random(uint64_t(keys) * 7919 + uint64_t(stride));
    AddressMap map { size_t(expected) };
    std::unordered_map<DeviceAddr, uint32_t> oracle;
    const DeviceAddr base = 0x7f0000000000;
    for (int step = 0; step < steps; ++step) {
        const DeviceAddr key = base + DeviceAddr(random() % uint64_t(keys)) * stride;
        const uint32_t value = uint32_t(random() % 1000);
        const auto it = oracle.find(key);
        switch (random() % 4) {
        case 0: // insert (the key must be absent)
            if (it == oracle.end()) {
                map.insert(key, value);
                oracle.emplace(key, value);
            }
            break;
        case 1:
            map.assign(key, value);
            if (it != oracle.end())
                it->second = value;
            break;
        case 2:
            map.erase(key);
            oracle.erase(key);
            break;
        default:
            QCOMPARE(map.find(key), it == oracle.end() ? AddressMap::None : it->second);
        }
        if (step % 97 == 0 || step == steps - 1) {
            const std::map<DeviceAddr, uint32_t> want(oracle.begin(), oracle.end());
            QCOMPARE(contents(map), want);
            for (int k = 0; k < keys; ++k) {
                const DeviceAddr probe = base + DeviceAddr(k) * stride;
                const auto found = oracle.find(probe);
                QCOMPARE(map.find(probe), found == oracle.end() ? AddressMap::None : found->second);
            }
        }
    }
}

// TraceNumbering::version: an alloc and its frees share a version; a free_completed moves the address on (and so do
// segment_free and segment_unmap for segments); addresses are counted apart, blocks apart from segments.
void TestAddressMap::numberingCountsFreesPerAddress()
{
    memscope::model::TraceNumbering numbering;
    std::map<std::pair<bool, DeviceAddr>, uint32_t> freed; // (segment?, address) -> frees completed so far
    std::mt19937 random(11);
    const Action actions[] = { Action::Alloc,       Action::FreeRequested, Action::FreeCompleted, Action::SegmentAlloc,
                               Action::SegmentFree, Action::SegmentMap,    Action::SegmentUnmap,  Action::Oom };
    for (int step = 0; step < 20000; ++step) {
        const Action action = actions[random() % std::size(actions)];
        const DeviceAddr address = 0x7f0000000000 + DeviceAddr(random() % 300) * 512;
        const bool segment = action == Action::SegmentAlloc || action == Action::SegmentFree
            || action == Action::SegmentMap || action == Action::SegmentUnmap;
        const uint32_t got = numbering.version(action, address);
        if (action == Action::Oom) {
            QCOMPARE(got, 0u);
            continue;
        }
        uint32_t& count = freed[{ segment, address }];
        QCOMPARE(got, count);
        if (action == Action::FreeCompleted || action == Action::SegmentFree || action == Action::SegmentUnmap)
            ++count;
    }
    for (const auto& [key, count] : freed)
        QCOMPARE(key.first ? numbering.segmentVersion(key.second) : numbering.blockVersion(key.second), count);
}

// Every DeviceAddr is a key, the lowest included (an address of 2^63 or more in a file reads as a negative one, and
// INT64_MIN was the map's mark of an empty slot: found where no key was, found with the value of a key erased from
// that slot, and erased without being there, after which the map's count went wrong and it stopped growing).
void TestAddressMap::everyKeyIsAKey()
{
    const DeviceAddr low = INT64_MIN;
    AddressMap map(4);
    QCOMPARE(map.find(low), AddressMap::None);
    map.erase(low); // absent: nothing
    QCOMPARE(map.find(low), AddressMap::None);
    // A key erased from the slot `low` would probe first: its value stays behind in the slot's storage.
    for (DeviceAddr k = 1; k < 64; ++k)
        map.insert(k, uint32_t(k));
    for (DeviceAddr k = 1; k < 64; ++k)
        map.erase(k);
    QCOMPARE(map.find(low), AddressMap::None);
    map.insert(low, 7);
    QCOMPARE(map.find(low), 7u);
    map.assign(low, 8);
    QCOMPARE(map.find(low), 8u);
    QCOMPARE(contents(map), (std::map<DeviceAddr, uint32_t> { { low, 8 } }));
    map.erase(low);
    QCOMPARE(map.find(low), AddressMap::None);
    map.erase(low);
    QVERIFY(contents(map).empty());
    // Grows as it should afterwards: a thousand keys, all found, the lowest among them.
    std::map<DeviceAddr, uint32_t> oracle;
    for (uint32_t k = 0; k < 1000; ++k) {
        const DeviceAddr key = k == 500 ? low : DeviceAddr(k) * 512 - 4096;
        map.insert(key, k);
        oracle[key] = k;
    }
    QCOMPARE(contents(map), oracle);
    for (const auto& [key, value] : oracle)
        QCOMPARE(map.find(key), value);
}
QTEST_GUILESS_MAIN(TestAddressMap)

#include "tst_addressmap.moc"
