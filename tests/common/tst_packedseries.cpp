// Tests of model::PackedSeries against a std::vector of the same values as the oracle: every value read back
// exactly (operator[], read() of every kind of range, iterators), for series that need each width (flat runs,
// small and large steps, 512-byte multiples, negative values, the int64_t extremes), at every length around a
// block's, while it is appended to; every sealed block's minimum and maximum and where they first occur; and that
// a replay-like series is stored in at most half of 8 bytes a value.
#include "model/packedseries.h"

#include <QTest>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using memscope::model::PackedSeries;

namespace {

enum class Kind { Flat, SmallSteps, AlignedSteps, HugeSteps, Extremes, Negative, Mixed };

std::vector<int64_t> makeValues(Kind kind, size_t n, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<int64_t> out;
    out.reserve(n);
    int64_t v = 1 << 30;
    for (size_t i = 0; i < n; ++i) {
        switch (kind) {
        case Kind::Flat:
            v = i < n / 2 ? 4096 : 8192;
            break;
        case Kind::SmallSteps:
            v += int64_t(rng() % 200) - 100;
            break;
        case Kind::AlignedSteps: // block sizes: multiples of 512 B, up to 1 GiB
            v = std::max<int64_t>(0, v + (int64_t(rng() % (2u << 21)) - (1 << 21)) * 512);
            break;
        case Kind::HugeSteps:
            v = int64_t(rng() >> 2) - (int64_t(1) << 61);
            break;
        case Kind::Extremes: {
            const int64_t pick[]
                = { std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 0, -1, 1 };
            v = pick[rng() % 5];
            break;
        }
        case Kind::Negative:
            v = -int64_t(rng() % 100000) * 512;
            break;
        case Kind::Mixed: // flat stretches, then bursts of every size
            if (rng() % 64 == 0) { // a burst below 2^61 from at most 2^61: the walk never overflows
                const int64_t step = int64_t(rng() % (uint64_t(1) << (rng() % 62))) - (int64_t(1) << 20);
                v = v > (int64_t(1) << 61) ? step : v + step;
            }
            break;
        }
        out.push_back(v);
    }
    return out;
}

} // namespace

class TestPackedSeries : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // Every value, read one by one, by ranges and by iterators, equals the one appended, at every length from 0
    // to a few blocks (the unsealed block included) and at one long length.
    void readsBackExactly_data()
    {
        QTest::addColumn<int>("kind");
        QTest::addColumn<int>("length");
        const std::pair<const char*, Kind> kinds[] = {
            { "flat", Kind::Flat },
            { "small steps", Kind::SmallSteps },
            { "512-byte multiples", Kind::AlignedSteps },
            { "steps near 2^61", Kind::HugeSteps },
            { "int64 extremes", Kind::Extremes },
            { "negative", Kind::Negative },
            { "mixed", Kind::Mixed },
        };
        for (const auto& [name, kind] : kinds)
            for (int length : { 0, 1, 127, 128, 129, 256, 300, 100000 })
                QTest::addRow("%s, %d values", name, length) << int(kind) << length;
    }
    void readsBackExactly()
    {
        QFETCH(int, kind);
        QFETCH(int, length);
        const std::vector<int64_t> values = makeValues(Kind(kind), size_t(length), uint64_t(kind * 1000 + length));
        PackedSeries series;
        for (size_t i = 0; i < values.size(); ++i) {
            series.push_back(values[i]);
            QCOMPARE(series.size(), i + 1);
            QCOMPARE(series.back(), values[i]);
        }
        for (size_t i = 0; i < values.size(); ++i)
            if (series[i] != values[i])
                QFAIL(qPrintable(QStringLiteral("value %1: %2, appended %3").arg(i).arg(series[i]).arg(values[i])));
        QVERIFY(std::equal(series.begin(), series.end(), values.begin(), values.end()));
        if (!values.empty()) {
            QCOMPARE(*std::max_element(series.begin(), series.end()), *std::max_element(values.begin(), values.end()));
            QCOMPARE(std::max_element(series.begin(), series.end()) - series.begin(),
                     std::max_element(values.begin(), values.end()) - values.begin());
        }
        // Ranges that start and end inside blocks, span several, and reach into the unsealed one.
        std::mt19937_64 rng { uint64_t(length) };
        std::vector<int64_t> out;
        for (int k = 0; k < 200 && !values.empty(); ++k) {
            const size_t first = size_t(rng() % values.size());
            const size_t count = size_t(rng() % (values.size() - first + 1));
            out.assign(count, 0);
            series.read(first, count, out.data());
            QVERIFY(std::equal(out.begin(), out.end(), values.begin() + ptrdiff_t(first)));
        }
        out.assign(values.size(), 0);
        series.read(0, values.size(), out.data());
        QVERIFY(out == values);
        // Every sealed block's minimum and maximum, and their first occurrences, as a scan of its values finds them;
        // the values past the sealed blocks are fewer than a block.
        QCOMPARE(series.sealedBlocks(), values.size() / PackedSeries::BlockSize);
        for (size_t b = 0; b < series.sealedBlocks(); ++b) {
            const auto first = values.begin() + ptrdiff_t(b * PackedSeries::BlockSize);
            const auto last = first + ptrdiff_t(PackedSeries::BlockSize);
            const auto lo = std::min_element(first, last), hi = std::max_element(first, last); // first occurrences
            QCOMPARE(series.blockMin(b), *lo);
            QCOMPARE(series.blockMax(b), *hi);
            QCOMPARE(series.blockMinIndex(b), size_t(lo - values.begin()));
            QCOMPARE(series.blockMaxIndex(b), size_t(hi - values.begin()));
        }
    }

    // Two series are equal when their values are, whatever blocks they were cut into.
    void equality()
    {
        const std::vector<int64_t> values = makeValues(Kind::Mixed, 1000, 5);
        PackedSeries a, b;
        for (int64_t v : values) {
            a.push_back(v);
            b.push_back(v);
        }
        QVERIFY(a == b);
        b.push_back(1);
        QVERIFY(!(a == b));
        a.push_back(2);
        QVERIFY(!(a == b));
        a.clear();
        QCOMPARE(a.size(), size_t(0));
        QVERIFY(a == PackedSeries());
    }

    // A series like a replay's bytes allocated (512-byte multiples, changing by one block at a time, flat while
    // other entries pass) is stored in at most half of 8 bytes a value.
    void packsReplayLikeSeries()
    {
        std::mt19937_64 rng(3);
        PackedSeries series;
        int64_t v = int64_t(20) << 30;
        constexpr size_t N = 1'000'000;
        for (size_t i = 0; i < N; ++i) {
            if (i % 3 == 0)
                v += (int64_t(rng() % 4096) - 2048) * 512;
            series.push_back(v);
        }
        QVERIFY2(series.memoryBytes() <= N * 4 + N / 8,
                 qPrintable(QStringLiteral("%1 bytes for %2 values").arg(series.memoryBytes()).arg(N)));
    }
};

QTEST_GUILESS_MAIN(TestPackedSeries)
#include "tst_packedseries.moc"
