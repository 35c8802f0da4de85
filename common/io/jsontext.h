// JSON text pieces shared by the JSON writers of common/io (jsonwriter.cpp, perfettowriter.cpp). Pure; any thread.
#pragma once

#include <string>
#include <string_view>

namespace memscope::io {

// Appends `text` as a JSON string, quotes included: escapes as Python's json module does with ensure_ascii=False
// (Lib/json/encoder.py ESCAPE_DCT), ill-formed UTF-8 as U+FFFD, encoded lone surrogates as \udXXX escapes.
void appendJsonString(std::string& out, std::string_view text);

} // namespace memscope::io
