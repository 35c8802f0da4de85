// io::FileBytes: a file's bytes as the parse sees them, mapped a window at a time and read ahead into huge pages.
// Whatever was moved, mapped or dropped, every byte reads as the file's, ahead of the parse and behind it; windows
// behind the parse give their memory back; a reader stopped anywhere leaves nothing behind. And a whole snapshot
// loads the same with the reader as without it.
#include "io/filebytes.h"
#include "io/snapshotio.h"
#include "testutil.h"

// bench::repeated only; big_trace is read from the test data (memscope::test::snapshotPath).
#define MEMSCOPE_DEFAULT_SHARED_DIR ""
#include "../benchmarks/synthetic.h"

#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTest>

#include <random>

using namespace memscope;

namespace {

// Bytes no two windows share (a window's bytes put at another window's place would differ).
std::vector<uint8_t> fileContent(uint64_t size, uint32_t seed)
{
    std::vector<uint8_t> bytes(size);
    std::mt19937_64 random(seed);
    for (uint64_t i = 0; i + 8 <= size; i += 8) {
        const uint64_t v = random();
        std::memcpy(bytes.data() + i, &v, 8);
    }
    for (uint64_t i = size / 8 * 8; i < size; ++i)
        bytes[i] = uint8_t(random());
    return bytes;
}

bool writeFile(const QString& path, const std::vector<uint8_t>& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly)
        && f.write(reinterpret_cast<const char*>(bytes.data()), qint64(bytes.size())) == qint64(bytes.size());
}

// Bytes of this process's anonymous memory (proc(5), /proc/PID/status RssAnon).
qint64 rssAnon()
{
    QFile status(QStringLiteral("/proc/self/status"));
    if (!status.open(QIODevice::ReadOnly))
        return -1;
    for (const QByteArray& line : status.readAll().split('\n'))
        if (line.startsWith("RssAnon:"))
            return line.mid(8).trimmed().split(' ').front().toLongLong() * 1024;
    return -1;
}

// The first offset where `bytes` differs from `expected` in [from, to), or -1.
qint64 firstDifference(std::span<const uint8_t> bytes, const std::vector<uint8_t>& expected, uint64_t from,
                       uint64_t to)
{
    to = std::min<uint64_t>(to, expected.size());
    for (uint64_t i = from; i < to; ++i)
        if (bytes[i] != expected[i])
            return qint64(i);
    return -1;
}

constexpr uint64_t W = io::FileBytes::Window;

} // namespace

class TestFileBytes : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // A parse's walk through files of every shape: empty, within the first windows, a page or a window off, many
    // windows. `wait`: the reader is given time before each step (so windows are moved in), or not (the parse is
    // ahead of it and maps windows itself, and the reader's late windows are thrown away).
    void everyByteIsTheFiles_data()
    {
        QTest::addColumn<qint64>("size");
        QTest::addColumn<bool>("wait");
        QTest::newRow("empty") << qint64(0) << true;
        QTest::newRow("one byte") << qint64(1) << true;
        QTest::newRow("within the first two windows") << qint64(2 * W - 1) << true;
        QTest::newRow("two windows and a byte") << qint64(2 * W + 1) << true;
        QTest::newRow("seven windows and a part page") << qint64(7 * W + 12345) << true;
        QTest::newRow("nine whole windows") << qint64(9 * W) << true;
        QTest::newRow("nine windows, the parse ahead of the reader") << qint64(9 * W + 4096) << false;
    }
    void everyByteIsTheFiles()
    {
        QFETCH(qint64, size);
        QFETCH(bool, wait);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("file.bin"));
        const std::vector<uint8_t> expected = fileContent(uint64_t(size), uint32_t(size));
        QVERIFY(writeFile(path, expected));

        io::FileBytes file;
        QVERIFY(!file.open(path.toStdString()));
        file.readAhead(0);
        const std::span<const uint8_t> bytes = file.bytes();
        QCOMPARE(qint64(bytes.size()), size);
        // The parse's steps: uneven, a few MB each (io/picklereader.cpp reports every 8 MB).
        std::mt19937 random(7);
        uint64_t offset = 0;
        while (offset < uint64_t(size)) {
            offset = std::min<uint64_t>(uint64_t(size), offset + 1 + random() % (3u << 20));
            if (wait)
                file.waitForReadAhead();
            file.consume(bytes, offset);
            // What the parse reads next, and what it left behind a moment ago.
            const uint64_t from = offset > W ? offset - W : 0;
            const qint64 at = firstDifference(bytes, expected, from, offset + 2 * W);
            QVERIFY2(at < 0, qPrintable(QStringLiteral("byte %1 differs at step %2").arg(at).arg(offset)));
        }
        // And every byte at the end: the windows moved in and mapped from the file again, those dropped.
        const qint64 at = firstDifference(bytes, expected, 0, expected.size());
        QVERIFY2(at < 0, qPrintable(QStringLiteral("byte %1 differs at the end").arg(at)));
        const uint64_t windows = (uint64_t(size) + W - 1) / W;
        QCOMPARE(file.windowsReadAhead() + file.windowsMapped(), windows);
        if (wait && windows > 2)
            QCOMPARE(file.windowsReadAhead(), windows - 2); // all but the two mapped at open
        if (!wait)
            QVERIFY(file.windowsMapped() >= 2);
    }

    // Without readAhead() (or below its size), the parse reads the mapping only.
    void smallFilesAreOnlyMapped()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("file.bin"));
        const std::vector<uint8_t> expected = fileContent(5 * W, 5);
        QVERIFY(writeFile(path, expected));
        io::FileBytes file;
        QVERIFY(!file.open(path.toStdString()));
        file.readAhead(); // 40 MB: below ReadAheadFrom
        file.waitForReadAhead();
        for (uint64_t offset = 0; offset < expected.size(); offset += W / 2)
            file.consume(file.bytes(), offset);
        QCOMPARE(file.windowsReadAhead(), 0ULL);
        QCOMPARE(file.windowsMapped(), 5ULL);
        QCOMPARE(firstDifference(file.bytes(), expected, 0, expected.size()), -1);
    }

    // The windows behind the parse give their memory back: reading a 96 MB file ahead holds a few windows, not it.
    void windowsBehindAreGiven()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("file.bin"));
        const uint64_t size = 12 * W;
        QVERIFY(writeFile(path, fileContent(size, 12)));
        const qint64 before = rssAnon();
        QVERIFY(before > 0);
        qint64 most = 0;
        {
            io::FileBytes file;
            QVERIFY(!file.open(path.toStdString()));
            file.readAhead(0);
            for (uint64_t offset = W; offset <= size; offset += W) {
                file.waitForReadAhead();
                file.consume(file.bytes(), offset);
                most = std::max(most, rssAnon() - before);
            }
            QCOMPARE(file.windowsReadAhead(), 10ULL);
        }
        // The reader's queue (ReadAhead windows) and the two ahead of the parse, with room for the heap's noise.
        const qint64 bound = qint64(io::FileBytes::ReadAhead + 3) * qint64(W) + (qint64(8) << 20);
        QVERIFY2(most <= bound, qPrintable(QStringLiteral("%1 MB held").arg(most >> 20)));
        QVERIFY2(rssAnon() - before < (qint64(8) << 20), qPrintable(QString::number((rssAnon() - before) >> 20)));
    }

    // Destroyed while its reader works, or after the parse stopped early: no hang, the windows go.
    void stoppedAnywhere_data()
    {
        QTest::addColumn<int>("steps"); // consume() calls before the end
        QTest::newRow("at once") << 0;
        QTest::newRow("after one step") << 1;
        QTest::newRow("midway") << 5;
    }
    void stoppedAnywhere()
    {
        QFETCH(int, steps);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("file.bin"));
        QVERIFY(writeFile(path, fileContent(12 * W, 3)));
        const qint64 before = rssAnon();
        {
            io::FileBytes file;
            QVERIFY(!file.open(path.toStdString()));
            file.readAhead(0);
            for (int i = 0; i < steps; ++i)
                file.consume(file.bytes(), uint64_t(i + 1) * W);
        }
        QVERIFY2(rssAnon() - before < (qint64(8) << 20), qPrintable(QString::number((rssAnon() - before) >> 20)));
    }

    // A missing file and a folder: one message each, naming the file.
    void badFiles()
    {
        QTemporaryDir dir;
        io::FileBytes missing;
        const io::Error e = missing.open(dir.filePath(QStringLiteral("none.pickle")).toStdString());
        QVERIFY(e);
        QVERIFY(QString::fromStdString(e.toString()).contains(QStringLiteral("none.pickle: cannot open")));
        io::FileBytes folder;
        const io::Error f = folder.open(dir.path().toStdString());
        QVERIFY(f);
        QVERIFY(QString::fromStdString(f.toString()).endsWith(QStringLiteral(": not a regular file")));
    }

    // A snapshot large enough to be read ahead (big_trace three times over, 84 MB) loads to the same snapshot with
    // the reader as without, byte for byte as written back.
    void snapshotLoadsTheSame()
    {
        const io::LoadResult big = io::loadSnapshot(test::snapshotPath("big_trace.pickle.xz"));
        QVERIFY2(big.ok(), big.error.toString().c_str());
        auto repeated = bench::repeated(*big.snapshot, 3, bench::Survivors::Freed);
        repeated->streams = big.snapshot->streams;
        QTemporaryDir dir;
        const std::string path = dir.filePath(QStringLiteral("repeated.pickle")).toStdString();
        QVERIFY(!io::saveSnapshot(*repeated, path));
        QVERIFY(QFileInfo(QString::fromStdString(path)).size() > qint64(io::FileBytes::ReadAheadFrom));
        io::LoadOptions without;
        without.readAhead = false;
        const io::LoadResult a = io::loadSnapshot(path, without), b = io::loadSnapshot(path);
        QVERIFY2(a.ok(), a.error.toString().c_str());
        QVERIFY2(b.ok(), b.error.toString().c_str());
        QCOMPARE(b.snapshot->warnings.size(), a.snapshot->warnings.size());
        QVERIFY(io::encodePickle(*a.snapshot) == io::encodePickle(*b.snapshot));
    }
};

QTEST_GUILESS_MAIN(TestFileBytes)
#include "tst_filebytes.moc"
