// libFuzzer target for the direct path of the pickle reader (io/picklereader.h): any bytes loaded with it and
// without it give the same result, the same error or the same snapshot (compared as our writer's pickle of it, which
// holds every table, segment, block and entry, and its warnings). tst_directpath compares every field on real files
// and on their corrupted copies; this searches the inputs those do not have. Built only with -DMEMSCOPE_FUZZ=ON
// (clang).
#include "io/snapshotio.h"
#include "model/loadwarning.h"
#include "model/snapshot.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace {

std::string outcome(const memscope::io::LoadResult& r)
{
    if (!r.ok())
        return "error: " + r.error.toString();
    std::string s = memscope::io::encodePickle(*r.snapshot);
    for (const auto& w : r.snapshot->warnings)
        s += "\nwarning: " + w.message;
    return s;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    memscope::io::LoadOptions tree;
    tree.directTraces = false;
    const std::string expected = outcome(memscope::io::loadSnapshotFromMemory({ data, size }, "fuzz", tree));
    const std::string actual = outcome(memscope::io::loadSnapshotFromMemory({ data, size }, "fuzz"));
    if (expected != actual)
        __builtin_trap(); // the direct path read the bytes otherwise than the tree path
    return 0;
}
