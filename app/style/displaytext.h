// Text from a snapshot (function and file names, annotation names) as the views show it. A real file may hold a
// name of megabytes (a generated function, a hostile file: 64 MiB took Qt's text layout, HarfBuzz, minutes); the
// views get at most MaxDisplayChars of it, the rest cut with a note of how much. The model keeps every byte (the CLI
// prints it, parity needs it).
#pragma once

#include <QString>

#include <string_view>

namespace memscope::app {

constexpr qsizetype MaxDisplayChars = 2000;

QString displayText(std::string_view utf8);

} // namespace memscope::app
