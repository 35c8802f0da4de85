// Registers resources/memscope.qrc (compiled into memscope-app by AUTORCC) and names the files in it. Any thread.
#include "ingest/resources.h"

// Q_INIT_RESOURCE must be used outside any namespace.
static void registerMemscopeResources() { Q_INIT_RESOURCE(memscope); }

namespace memscope::app {

void initResources()
{
    // A function-local static runs exactly once, even when two threads get here together.
    static const bool registered = (registerMemscopeResources(), true);
    (void)registered;
}

QString bundledSamplePath() { return QStringLiteral(":/samples/transformer_train.pickle"); }

QString iconPath() { return QStringLiteral(":/icons/memscope.svg"); }

} // namespace memscope::app
