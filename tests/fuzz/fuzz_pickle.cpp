// libFuzzer target for the snapshot readers: any bytes through format detection, the pickle (or JSON) reader and
// the snapshot builder. Must never crash, hang or grow without bound. Built only with -DMEMSCOPE_FUZZ=ON (clang);
// `make fuzz` runs it on a seed corpus made from ../shared/snapshots.
#include "io/snapshotio.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const memscope::io::LoadResult r = memscope::io::loadSnapshotFromMemory({ data, size }, "fuzz");
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
