// Tests of model::FreeBlocks and model::UnmappedSpace (common/model/freeblocks.h): which request a free block
// carries after each kind of allocator step, rule by rule, as c10/cuda/CUDACachingAllocator.cpp decides which Block
// object survives (alloc_found_block, free_block / try_merge_blocks, alloc_block, map_block, unmap_block,
// release_expandable_segment). Each row is a script of steps and the free blocks it must leave. Test thread only.
#include "model/freeblocks.h"

#include <QTest>

using namespace memscope;
using model::ByteCount;
using model::DeviceAddr;
using model::FreeBlocks;

namespace {

// Runs `script`: steps separated by ';', each "verb start end [request] [l][r]" where l / r allow merging with the
// free block on the left / right:
//   seg S E          a new segment (alloc_block)        free S E R [lr]   a block freed with request R
//   take S E         an allocation                      erase S E         a segment freed
//   insert S E R     a state's inactive block           unmap S E         pages unmapped
//   map S E [lr]     pages mapped                       forget S E        address space released
// and returns the free blocks as "S-E:R" joined by spaces.
QString run(FreeBlocks& f, const QString& script)
{
    for (const QString& step : script.split(QLatin1Char(';'), Qt::SkipEmptyParts)) {
        const QStringList w = step.simplified().split(QLatin1Char(' '));
        const QString verb = w.value(0);
        const DeviceAddr s = w.value(1).toLongLong(), e = w.value(2).toLongLong();
        const QString flags = w.size() > 3 ? w.last() : QString();
        const bool l = flags.contains(QLatin1Char('l')) && !flags.at(0).isDigit();
        const bool r = flags.contains(QLatin1Char('r')) && !flags.at(0).isDigit();
        if (verb == QLatin1String("seg"))
            f.release(s, e, 0, false, false);
        else if (verb == QLatin1String("free"))
            f.release(s, e, w.value(3).toLongLong(), l, r);
        else if (verb == QLatin1String("take"))
            f.take(s, e);
        else if (verb == QLatin1String("erase"))
            f.erase(s, e);
        else if (verb == QLatin1String("insert"))
            f.insert(s, e, w.value(3).toLongLong());
        else if (verb == QLatin1String("unmap"))
            f.unmap(s, e);
        else if (verb == QLatin1String("map"))
            f.map(s, e, l, r);
        else if (verb == QLatin1String("forget"))
            f.unmapped().forget(s, e);
        else
            qFatal("unknown step %s", qPrintable(step));
    }
    QStringList out;
    for (const auto& [start, block] : f.blocks())
        out << QStringLiteral("%1-%2:%3").arg(start).arg(block.end).arg(block.requested);
    return out.join(QLatin1Char(' '));
}

} // namespace

class TestFreeBlocks : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void rules_data()
    {
        QTest::addColumn<QString>("script");
        QTest::addColumn<QString>("expected");
        QTest::newRow("alloc_block: a new segment is one free block that no one requested")
            << QStringLiteral("seg 0 1000") << QStringLiteral("0-1000:0");
        QTest::newRow("alloc_found_block: an allocation takes the front, the rest keeps the old Block and request")
            << QStringLiteral("seg 0 1000; take 0 100; free 0 100 7 r; take 0 50") << QStringLiteral("50-1000:7");
        QTest::newRow("alloc_found_block: a whole block handed out leaves nothing")
            << QStringLiteral("seg 0 1000; take 0 1000") << QStringLiteral("");
        QTest::newRow("free_block: the freed block keeps its own request when it absorbs the block after it")
            << QStringLiteral("seg 0 1000; take 0 100; free 0 100 5 r") << QStringLiteral("0-1000:5");
        QTest::newRow("free_block: ... and the block before it")
            << QStringLiteral("seg 0 1000; take 0 100; take 100 200; free 0 100 5 r; free 100 200 9 lr")
            << QStringLiteral("0-1000:9");
        QTest::newRow("free_block: ... and both at once")
            << QStringLiteral("seg 0 1000; take 0 100; take 100 200; take 200 300; free 0 100 5 r; free 200 300 6 lr;"
                              "free 100 200 3 lr")
            << QStringLiteral("0-1000:3");
        QTest::newRow("free_block: a neighbour still in use is not merged")
            << QStringLiteral("seg 0 1000; take 0 100; take 100 200; free 0 100 5 r")
            << QStringLiteral("0-100:5 200-1000:0");
        QTest::newRow("a segment boundary is not crossed")
            << QStringLiteral("seg 0 100; seg 100 200; take 0 100; free 0 100 4")
            << QStringLiteral("0-100:4 100-200:0");
        QTest::newRow("an allocation inside a free block (a viewer's, never PyTorch's) leaves a block before it")
            << QStringLiteral("seg 0 1000; take 0 100; free 0 100 4 r; take 200 300")
            << QStringLiteral("0-200:4 300-1000:4");
        QTest::newRow("release_block: a freed segment's block is gone")
            << QStringLiteral("seg 0 100; erase 0 100") << QStringLiteral("");
        QTest::newRow("a state's inactive blocks are taken as they are, unmerged")
            << QStringLiteral("insert 0 100 9; insert 100 200 4") << QStringLiteral("0-100:9 100-200:4");
        QTest::newRow("unmap_block: the partial pages around the unmapped ones are new blocks")
            << QStringLiteral("map 0 1000; take 0 100; free 0 100 6 r; unmap 200 600")
            << QStringLiteral("0-200:0 600-1000:0");
        QTest::newRow("map_block: mapping again brings back the unmapped block's request, and it survives merges")
            << QStringLiteral("map 0 1000; take 0 100; free 0 100 6 r; unmap 200 600; map 200 600 lr")
            << QStringLiteral("0-1000:6");
        QTest::newRow("map_block: what stays unmapped after a map is a new Block")
            << QStringLiteral("map 0 1000; take 0 1000; free 0 1000 8; unmap 0 1000; map 0 400; map 400 1000 l")
            << QStringLiteral("0-1000:0");
        QTest::newRow("unmap_block: unmapped neighbours merge into the newly unmapped block, which keeps its request")
            << QStringLiteral(
                   "map 0 3000; take 0 1000; take 1000 2000; take 2000 3000; free 0 1000 1 r; free 2000 3000 3 l;"
                   "unmap 0 1000; unmap 2000 3000; free 1000 2000 2 lr; unmap 1000 2000; map 0 3000")
            << QStringLiteral("0-3000:2");
        QTest::newRow("release_expandable_segment: space given back is new when mapped again")
            << QStringLiteral("map 0 1000; take 0 1000; free 0 1000 8; unmap 0 1000; forget 0 1000; map 0 1000")
            << QStringLiteral("0-1000:0");
        QTest::newRow("space never mapped carries no request")
            << QStringLiteral("map 5000 6000") << QStringLiteral("5000-6000:0");
    }
    void rules()
    {
        QFETCH(QString, script);
        QFETCH(QString, expected);
        FreeBlocks f;
        QCOMPARE(run(f, script), expected);
    }

    // What an operation reports as made: the objects an engine labels (model::Replay::inactiveLabels).
    void madeObjects()
    {
        FreeBlocks f;
        FreeBlocks::Made m = f.release(0, 1000, 0, false, false);
        QCOMPARE(m.start, DeviceAddr(0));
        QCOMPARE(m.end, DeviceAddr(1000));
        QCOMPARE(f.take(0, 100).count, uint8_t(0)); // the remainder is the old object
        m = f.release(0, 100, 7, false, true);
        QCOMPARE(m.end, DeviceAddr(1000));
        QCOMPARE(m.requested, ByteCount(7));
        const FreeBlocks::Changes inside = f.take(200, 300);
        QCOMPARE(inside.count, uint8_t(1));
        QCOMPARE(inside.made[0].end, DeviceAddr(200));
        QCOMPARE(inside.made[0].requested, ByteCount(7));
        const FreeBlocks::Changes unmap = f.unmap(400, 800);
        QCOMPARE(unmap.count, uint8_t(2));
        QCOMPARE(unmap.made[0].requested, ByteCount(0));
        QCOMPARE(unmap.made[1].start, DeviceAddr(800));
        QCOMPARE(f.unmapped().around(500).start, DeviceAddr(400));
        QCOMPARE(f.unmapped().around(500).end, DeviceAddr(800));
        QCOMPARE(f.map(400, 800, true, true).requested, ByteCount(7));
    }

    void tagsFollowTheObject()
    {
        FreeBlocks f;
        f.release(0, 1000, 0, false, false);
        f.setTag(0, 42);
        f.take(0, 100);
        QVERIFY(f.at(100));
        QCOMPARE(f.at(100)->tag, 42u); // the remainder is the same Block
        f.release(0, 100, 3, false, true);
        QCOMPARE(f.at(0)->tag, UINT32_MAX); // a merge makes a new one (the freed block's)
    }

    void largest()
    {
        FreeBlocks f(true);
        QCOMPARE(f.largest(), ByteCount(0));
        f.release(0, 1000, 0, false, false);
        f.release(2000, 2500, 0, false, false);
        QCOMPARE(f.largest(), ByteCount(1000));
        f.take(0, 800);
        QCOMPARE(f.largest(), ByteCount(500));
        for (int k = 0; k < 10000; ++k) { // the heap stays bounded by pruning
            f.take(2000, 2100);
            f.release(2000, 2100, k, false, true);
        }
        QCOMPARE(f.largest(), ByteCount(500));
    }
};

QTEST_GUILESS_MAIN(TestFreeBlocks)
#include "tst_freeblocks.moc"
