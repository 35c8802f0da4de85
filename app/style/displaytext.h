// Text from a snapshot (function and file names, annotation names) as the views show it. A real file may hold a
// name of megabytes (a generated function, a hostile file: 64 MiB took Qt's text layout, HarfBuzz, minutes); the
// views get at most MaxDisplayChars of it, the rest cut with a note of how much. The model keeps every byte (the CLI
// prints it, parity needs it).
#pragma once

#include <QString>

#include <cstdint>
#include <string_view>

namespace memscope::app {

constexpr qsizetype MaxDisplayChars = 2000;

QString displayText(std::string_view utf8);

// A byte count in the largest binary unit (up to PiB) that keeps it at or above 1: value and unit name ("B" for
// counts under 1 KiB). The one rule behind Session::formatBytes and the segment map's allocation-free labels.
struct ScaledBytes {
    double value;
    const char* unit;
    bool whole; // bytes: printed as the integer, no decimals
};
ScaledBytes scaleBytes(int64_t bytes);

} // namespace memscope::app
