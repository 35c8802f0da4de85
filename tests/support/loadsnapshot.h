// Loading a snapshot file for a test: the snapshot, or null with the loader's message (file and reason) as a
// warning, so the test's own check on the result fails with the reason beside it. Header-only; for tests that
// link memscope-common. Test thread only.
#pragma once

#include "io/snapshotio.h"

#include <QtGlobal>

#include <memory>
#include <string>

namespace memscope::test {

inline std::shared_ptr<const model::Snapshot> loadSnapshotOrWarn(const std::string& path)
{
    io::LoadResult r = io::loadSnapshot(path);
    if (!r.ok())
        qWarning("%s", r.error.toString().c_str());
    return r.snapshot;
}

} // namespace memscope::test
