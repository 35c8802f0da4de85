// Helpers shared by the tests of common/: where the fixtures are. Test threads only.
#pragma once

#include <QString>
#include <QtGlobal>

#include <string>

namespace memscope::test {

// ../shared beside the checkout (snapshots/ and reference/), as CTest passes it in MEMSCOPE_SHARED_DIR.
inline std::string sharedDir()
{
    const QByteArray env = qgetenv("MEMSCOPE_SHARED_DIR");
    return env.isEmpty() ? std::string("../shared") : env.toStdString();
}

inline std::string snapshotPath(const std::string& name)
{
    return sharedDir() + "/snapshots/" + name;
}

inline std::string referencePath(const std::string& name)
{
    return sharedDir() + "/reference/" + name;
}

// tests/data in the source tree.
inline std::string dataPath(const std::string& name)
{
    const QByteArray env = qgetenv("MEMSCOPE_SOURCE_DIR");
    return (env.isEmpty() ? std::string(".") : env.toStdString()) + "/tests/data/" + name;
}

} // namespace memscope::test
