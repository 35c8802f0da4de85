// Snapshot dumps of the agent (agent/src/dump.h, memscope_dump_snapshot): a known pattern on the host backend is
// dumped as a pickle, read back with memscope's own loader (io::loadSnapshot) and compared with the allocator's
// state; memscope-cli stats reads it; MEMSCOPE_DUMP_ON=oom writes one when an allocation fails.
#include "agent/allocator.h"
#include "agent/dump.h"
#include "agent/hostbackend.h"
#include "io/snapshotio.h"
#include "memscope/agent.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <cstdio>
#include <set>
#include <string>
#include <new>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

using namespace memscope;
using namespace memscope::agent;

class TestDump : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase();
    void pickleMatchesAllocatorState();
    void cliReadsTheDump();
    void demoExitDumpCarriesStacks();
    void cApiDumpsIntoFolder();
    void dumpOnOom();
    void outOfMemoryPolicy();

private:
    QTemporaryDir m_dir;
    QString m_directDump;
};

void TestDump::initTestCase()
{
    QVERIFY(m_dir.isValid());
    // Read once, when the C API's allocator is first used (cApiDumpsIntoFolder, dumpOnOom).
    qputenv("MEMSCOPE_AGENT_BACKEND", "host");
    qputenv("MEMSCOPE_DUMP_ON", "oom");
    QVERIFY(QDir(m_dir.path()).mkpath(QStringLiteral("oom")));
    qputenv("MEMSCOPE_DUMP_PATH", (m_dir.path() + QStringLiteral("/oom/")).toLocal8Bit());
}

void TestDump::pickleMatchesAllocatorState()
{
    HostBackend backend;
    CachingAllocator allocator(backend, AllocatorConfig {});
    const StreamId stream {};
    // Small pool: three blocks in one 2 MiB segment, the middle one freed; large pool: 12 MiB own segment and a
    // 3 MiB block of a 20 MiB segment.
    std::vector<DevicePtr> ptrs;
    for (size_t size : { size_t(1000), size_t(70000), size_t(4096), size_t(12) << 20, size_t(3) << 20 }) {
        const MallocResult r = allocator.malloc(0, size, stream);
        QCOMPARE(int(r.status), int(Status::Ok));
        ptrs.push_back(r.ptr);
    }
    QCOMPARE(int(allocator.free(0, ptrs[1])), int(Status::Ok));

    m_directDump = m_dir.path() + QStringLiteral("/direct.pickle");
    std::string written, error;
    QVERIFY2(dumpSnapshot(allocator, m_directDump.toStdString(), &written, &error), error.c_str());
    QCOMPARE(QString::fromStdString(written), m_directDump);
    QVERIFY(!QDir(m_dir.path()).entryList({ QStringLiteral("*.tmp-*") }, QDir::Files).size());

    const io::LoadResult loaded = io::loadSnapshot(written);
    QVERIFY2(loaded.ok(), loaded.error.message.c_str());
    const model::Snapshot& s = *loaded.snapshot;
    const std::vector<SegmentInfo> expected = allocator.snapshot(0);
    QCOMPARE(expected.size(), size_t(3));
    QCOMPARE(s.segments.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
        const model::Segment& seg = s.segments[i];
        const SegmentInfo& want = expected[i];
        QCOMPARE(uint64_t(seg.address), uint64_t(want.address));
        QCOMPARE(uint64_t(seg.totalSize), uint64_t(want.totalSize));
        QCOMPARE(uint64_t(seg.allocatedSize), uint64_t(want.allocatedSize));
        QCOMPARE(uint64_t(seg.requestedSize), uint64_t(want.requestedSize));
        QCOMPARE(seg.device, 0);
        QCOMPARE(seg.blockCount, uint32_t(want.blocks.size()));
        const model::Block* blocks = s.segmentBlocks(seg);
        for (size_t b = 0; b < want.blocks.size(); ++b) {
            QCOMPARE(uint64_t(blocks[b].address), uint64_t(want.blocks[b].address));
            QCOMPARE(uint64_t(blocks[b].size), uint64_t(want.blocks[b].size));
            QCOMPARE(uint64_t(blocks[b].requestedSize), uint64_t(want.blocks[b].requestedSize));
            QCOMPARE(blocks[b].state,
                     want.blocks[b].allocated ? model::BlockState::ActiveAllocated : model::BlockState::Inactive);
            QVERIFY(blocks[b].hasFrames);
        }
    }
    // The known pattern, in the allocator's terms: 4 blocks in use, 1000 + 70000(freed) + 4096 requested in small.
    size_t allocatedBlocks = 0;
    for (const model::Block& b : s.blocks)
        allocatedBlocks += b.state == model::BlockState::ActiveAllocated;
    QCOMPARE(allocatedBlocks, size_t(4));

    for (size_t i = 0; i < ptrs.size(); ++i)
        if (i != 1)
            QCOMPARE(int(allocator.free(0, ptrs[i])), int(Status::Ok));
}

void TestDump::cliReadsTheDump()
{
    QVERIFY(!m_directDump.isEmpty());
    const QString cli = QCoreApplication::applicationDirPath() + QStringLiteral("/memscope-cli");
    if (!QFile::exists(cli))
        QSKIP("memscope-cli is not built beside the test");
    QProcess p;
    p.start(cli, { QStringLiteral("stats"), m_directDump });
    QVERIFY(p.waitForFinished(60000));
    const QByteArray out = p.readAllStandardOutput();
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    QVERIFY(!out.isEmpty());
}

void TestDump::demoExitDumpCarriesStacks()
{
    // The demo's exit dump (MEMSCOPE_DUMP_ON=exit) names each live block's stack as its events did: the demo's
    // train.py / model.py frames, none empty.
    const QString cli = QCoreApplication::applicationDirPath() + QStringLiteral("/memscope-cli");
    if (!QFile::exists(cli))
        QSKIP("memscope-cli is not built beside the test");
    const QString dump = m_dir.path() + QStringLiteral("/demo-exit.pickle");
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("MEMSCOPE_DUMP_ON"), QStringLiteral("exit"));
    env.insert(QStringLiteral("MEMSCOPE_DUMP_PATH"), dump);
    p.setProcessEnvironment(env);
    p.start(cli, { QStringLiteral("demo"), QStringLiteral("--events"), QStringLiteral("20000"), QStringLiteral("--leak"),
                   QStringLiteral("--endpoint"), QStringLiteral("ipc://") + m_dir.path() + QStringLiteral("/demo") });
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    const io::LoadResult loaded = io::loadSnapshot(dump.toStdString());
    QVERIFY2(loaded.ok(), loaded.error.message.c_str());
    const model::Snapshot& s = *loaded.snapshot;
    size_t active = 0, named = 0;
    std::set<std::string> files;
    for (const model::Block& b : s.blocks) {
        if (b.state != model::BlockState::ActiveAllocated)
            continue;
        ++active;
        if (s.stackSize(b.stack) == 0)
            continue;
        ++named;
        for (const model::FrameId* f = s.stackBegin(b.stack); f != s.stackEnd(b.stack); ++f)
            files.insert(std::string(s.str(s.frame(*f).filename)));
    }
    QVERIFY(active > 0);
    QCOMPARE(named, active);
    QVERIFY(files.count("/workspace/gpt/train.py"));
}

void TestDump::cApiDumpsIntoFolder()
{
    void* a = memscope_malloc(1 << 20, 0, nullptr);
    void* b = memscope_malloc(5000, 0, nullptr);
    QVERIFY(a && b);
    QCOMPARE(QString::fromLatin1(memscope_backend_name()), QStringLiteral("host"));
    const QString folder = m_dir.path() + QStringLiteral("/api");
    QVERIFY(QDir().mkpath(folder));
    QCOMPARE(memscope_dump_snapshot(folder.toLocal8Bit().constData()), 0);
    const QStringList files = QDir(folder).entryList(QDir::Files);
    QCOMPARE(files.size(), 1);
    QVERIFY(files[0].startsWith(QStringLiteral("memscope-%1-").arg(QCoreApplication::applicationPid())));
    QVERIFY(files[0].endsWith(QStringLiteral(".pickle")));
    const io::LoadResult loaded = io::loadSnapshot(QDir(folder).filePath(files[0]).toStdString());
    QVERIFY2(loaded.ok(), loaded.error.message.c_str());
    std::vector<uint64_t> requested;
    for (const model::Block& blk : loaded.snapshot->blocks)
        if (blk.state == model::BlockState::ActiveAllocated)
            requested.push_back(blk.requestedSize);
    std::sort(requested.begin(), requested.end());
    QCOMPARE(requested, (std::vector<uint64_t> { 5000, 1 << 20 }));
    // A folder that cannot be written to fails cleanly.
    QCOMPARE(memscope_dump_snapshot("/nonexistent-memscope-dir/x.pickle"), -1);
    QVERIFY(QByteArray(memscope_last_error()).contains("nonexistent"));
    memscope_free(a, 0, 0, nullptr);
    memscope_free(b, 0, 0, nullptr);
}

void TestDump::dumpOnOom()
{
    const QDir folder(m_dir.path() + QStringLiteral("/oom"));
    QCOMPARE(folder.entryList(QDir::Files).size(), 0);
    void* kept = memscope_malloc(4096, 0, nullptr);
    QVERIFY(kept);
    // More than the host backend's 80 GiB capacity: out of memory.
    QVERIFY(memscope_malloc(size_t(200) << 30, 0, nullptr) == nullptr);
    QVERIFY(QByteArray(memscope_last_error()).contains("out of memory"));
    const QStringList files = folder.entryList(QDir::Files);
    QCOMPARE(files.size(), 1);
    const io::LoadResult loaded = io::loadSnapshot(folder.filePath(files[0]).toStdString());
    QVERIFY2(loaded.ok(), loaded.error.message.c_str());
    bool found = false;
    for (const model::Block& blk : loaded.snapshot->blocks)
        found |= blk.state == model::BlockState::ActiveAllocated && blk.requestedSize == 4096;
    QVERIFY(found);
    memscope_free(kept, 0, 0, nullptr);
}

namespace {

// Runs `f` with stderr going to a file; returns what it wrote.
template <typename F> QByteArray captureStderr(const QString& file, F&& f)
{
    std::fflush(stderr);
    const int saved = ::dup(2);
    const int fd = ::open(file.toLocal8Bit().constData(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
    f();
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    QFile in(file);
    return in.open(QIODevice::ReadOnly) ? in.readAll() : QByteArray();
}

} // namespace

// Out of memory through the C API, as torch's CUDAPluggableAllocator meets it: memscope_malloc returns NULL,
// memscope_malloc_raising throws (a std::bad_alloc with PyTorch's message; torch turns it into a RuntimeError);
// both write the dump (MEMSCOPE_DUMP_ON=oom) and one line on stderr naming the device, the requested bytes and the
// free device memory. Other failures of the raising variant throw std::runtime_error; size 0 is no failure.
void TestDump::outOfMemoryPolicy()
{
    const QDir folder(m_dir.path() + QStringLiteral("/oom"));
    const qsizetype dumpsBefore = folder.entryList(QDir::Files).size();
    const size_t huge = size_t(200) << 30; // more than the host backend's 80 GiB
    void* p = reinterpret_cast<void*>(1);
    const QByteArray line
        = captureStderr(m_dir.filePath(QStringLiteral("stderr1")), [&] { p = memscope_malloc(huge, 0, nullptr); });
    QVERIFY(p == nullptr);
    QCOMPARE(line.count('\n'), 1);
    QVERIFY2(line.startsWith("memscope: CUDA out of memory on device 0: 214748364800 bytes requested"),
             line.constData());
    QVERIFY2(line.contains("free of 80.00 GiB"), line.constData());
    QVERIFY2(line.contains(QByteArray(QByteArray("snapshot written to ") + folder.path().toLocal8Bit())),
             line.constData());
    QCOMPARE(folder.entryList(QDir::Files).size(), dumpsBefore + 1);

    QString what;
    bool badAlloc = false;
    const QByteArray line2 = captureStderr(m_dir.filePath(QStringLiteral("stderr2")), [&] {
        try {
            memscope_malloc_raising(huge, 0, nullptr);
        } catch (const std::bad_alloc& e) {
            badAlloc = true;
            what = QString::fromUtf8(e.what());
        } catch (...) {
        }
    });
    QVERIFY(badAlloc);
    QVERIFY2(what.startsWith(QStringLiteral("CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0")),
             qPrintable(what));
    QCOMPARE(line2.count('\n'), 1);
    QVERIFY(line2.startsWith("memscope: CUDA out of memory on device 0"));
    QCOMPARE(folder.entryList(QDir::Files).size(), dumpsBefore + 2);

    // What torch's bindings catch: a std::exception (CATCH_ALL_ERRORS in torch/csrc/Exceptions.h).
    bool caught = false;
    try {
        memscope_malloc_raising(huge, 0, nullptr);
    } catch (const std::exception& e) {
        caught = QByteArray(e.what()).contains("CUDA out of memory");
    }
    QVERIFY(caught);

    void* q = memscope_malloc_raising(4096, 0, nullptr);
    QVERIFY(q);
    memscope_free(q, 4096, 0, nullptr);
    QVERIFY(memscope_malloc_raising(0, 0, nullptr) == nullptr);
    QString other;
    try {
        memscope_malloc_raising(4096, 7, nullptr);
    } catch (const std::bad_alloc&) {
        other = QStringLiteral("bad_alloc");
    } catch (const std::runtime_error& e) {
        other = QString::fromUtf8(e.what());
    }
    QVERIFY2(other.contains(QStringLiteral("device 7")), qPrintable(other));
}

QTEST_GUILESS_MAIN(TestDump)
#include "tst_dump.moc"
