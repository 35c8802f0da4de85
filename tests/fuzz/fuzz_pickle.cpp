// libFuzzer target for the snapshot readers: any bytes through format detection, the pickle (or JSON) reader and
// the snapshot builder. Must never crash, hang or grow without bound. Built only with -DMEMSCOPE_FUZZ=ON (clang);
// `make fuzz` runs it on a seed corpus made from ../shared/snapshots.
#include "io/picklereader.h"
#include "io/snapshotio.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace {

// io::PickleExtent (how far an .xz file is decompressed) agrees with the parse: a load that succeeds ends where the
// extent says the pickle stops, and a load of the bytes up to the extent's end ends as the load of them all.
void checkExtent(const uint8_t* data, size_t size, const memscope::io::LoadResult& whole)
{
    using memscope::io::PickleExtent;
    if (!memscope::io::looksLikePickle({ data, size }))
        return;
    PickleExtent extent;
    extent.scan({ data, size });
    // A value or FRAME past the extent's limits announces more bytes than an input of -max_len (64 KiB) holds.
    if (extent.state() == PickleExtent::State::Oversized) {
        if (whole.ok())
            __builtin_trap();
        return;
    }
    if (extent.state() == PickleExtent::State::More || extent.needed() > size) {
        if (whole.ok())
            __builtin_trap(); // the parse read a pickle the extent found incomplete
        return;
    }
    const memscope::io::LoadResult cut
        = memscope::io::loadSnapshotFromMemory({ data, size_t(extent.needed()) }, "fuzz");
    // The one bound that depends on the bytes after the pickle: a memo index may not pass the input's size.
    if (!cut.ok() && cut.error.code == memscope::io::ErrorCode::TooDeep
        && cut.error.message.find("memo index") != std::string::npos)
        return;
    if (cut.ok() != whole.ok() || cut.error.code != whole.error.code || cut.error.message != whole.error.message
        || cut.error.offset != whole.error.offset)
        __builtin_trap();
    if (whole.ok()
        && (cut.snapshot->segments.size() != whole.snapshot->segments.size()
            || cut.snapshot->blocks.size() != whole.snapshot->blocks.size()
            || cut.snapshot->deviceTraces.size() != whole.snapshot->deviceTraces.size()))
        __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const memscope::io::LoadResult r = memscope::io::loadSnapshotFromMemory({ data, size }, "fuzz");
    checkExtent(data, size, r);
    if (r.ok()) {
        // Touch what a viewer would: every block of every segment and every trace entry's stack.
        size_t sum = 0;
        for (const auto& seg : r.snapshot->segments)
            sum += seg.blockCount;
        for (const auto& trace : r.snapshot->deviceTraces)
            for (const auto& e : trace)
                sum += r.snapshot->stackSize(e.stack);
        (void)sum;
    } else if (r.error.message.empty()) {
        __builtin_trap(); // every failure must explain itself
    }
    return 0;
}
