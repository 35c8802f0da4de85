// The files built into the app from resources/memscope.qrc: the icon and the sample opened when no file is given.
// initResources() registers them (the .qrc is compiled into the static memscope-app library, whose unreferenced
// objects the linker would otherwise drop); call it once from main() or a test before using the paths. Any thread.
#pragma once

#include <QString>

namespace memscope::app {

void initResources();

// ":/samples/transformer_train.pickle": a real snapshot (resources/samples/README.md).
QString bundledSamplePath();
// ":/icons/memscope.svg"
QString iconPath();

} // namespace memscope::app
