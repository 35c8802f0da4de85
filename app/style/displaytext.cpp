// displaytext.h
#include "style/displaytext.h"

#include <cmath>

namespace memscope::app {

QString displayText(std::string_view utf8)
{
    // Bytes bound the characters from above, so short text (nearly all of it) is converted once, as it is.
    if (utf8.size() <= size_t(MaxDisplayChars))
        return QString::fromUtf8(utf8.data(), qsizetype(utf8.size()));
    size_t cut = size_t(MaxDisplayChars);
    while (cut > 0 && (uint8_t(utf8[cut]) & 0xC0) == 0x80)
        --cut; // not inside a UTF-8 sequence
    return QString::fromUtf8(utf8.data(), qsizetype(cut))
        + QStringLiteral("… (%L1 more bytes)").arg(qulonglong(utf8.size() - cut));
}

ScaledBytes scaleBytes(int64_t bytes)
{
    static const char* const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    double v = double(bytes);
    int u = 0;
    while (std::abs(v) >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    return { v, units[u], u == 0 };
}

} // namespace memscope::app
