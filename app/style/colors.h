// The colours every view uses for the same thing, so that an allocation has one colour in the timeline, the segment
// map and the flame graph, and the event list's rows match them. In style/, beside itemmodels/ and views/, because both
// use it (QtGui only, no widgets: models never include views). Pure functions; any thread.
#pragma once

#include "model/snapshot.h"

#include <QColor>
#include <QPalette>

#include <cstdint>

namespace memscope::app::colors {

// `a` moved the fraction `t` of the way to `b` (0: a, 1: b), channel by channel; opaque. The one blend every view
// uses for muted, faded and in-between tones.
inline QColor mix(const QColor& a, const QColor& b, double t)
{
    return QColor::fromRgbF(float(a.redF() * (1 - t) + b.redF() * t), float(a.greenF() * (1 - t) + b.greenF() * t),
                            float(a.blueF() * (1 - t) + b.blueF() * t));
}

// Ten categorical colours (the Tableau 10 scheme, which PyTorch's MemoryViz.js also uses for blocks).
inline QColor categorical(uint64_t key)
{
    static const QRgb scheme[] = { 0x4e79a7, 0xf28e2c, 0xe15759, 0x76b7b2, 0x59a14f,
                                   0xedc949, 0xaf7aa1, 0xff9da7, 0x9c755f, 0xbab0ab };
    // A multiplicative hash spreads neighbouring addresses and ids over the scheme.
    const uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 32;
    return QColor(scheme[h % 10]);
}

// An allocation, by its address (as MemoryViz.js hashes block addresses), or by its stack on request.
inline QColor allocation(model::DeviceAddr address) { return categorical(uint64_t(address)); }
inline QColor stack(model::StackId stack) { return categorical(uint64_t(model::raw(stack)) + 0x51ED27ull); }
inline QColor stream(int streamNumber) { return categorical(uint64_t(streamNumber) * 7 + 3); }
// An allocation by the user metadata of its alloc entry (torch.cuda.memory._set_memory_metadata); none: grey.
inline QColor metadata(model::StringId text)
{
    return text == model::EmptyString ? QColor(0xb0, 0xb0, 0xb0) : categorical(uint64_t(model::raw(text)) * 31 + 11);
}

// Blocks freed by the user but still in use on another stream (record_stream): drawn red, as MemoryViz.js does.
inline QColor pendingFree() { return QColor(0xd6, 0x27, 0x28); }
// Bytes lost to rounding (block size - requested size).
inline QColor roundingWaste() { return QColor(0x60, 0x60, 0x60); }
// The selection outline, and the shared cursor line.
inline QColor selection(const QPalette& p) { return p.color(QPalette::Highlight); }
inline QColor cursor(const QPalette& p) { return p.color(QPalette::WindowText); }
// Free space inside a segment: a tone between the view's base and its text, readable in light and dark palettes.
inline QColor freeSpace(const QPalette& p)
{
    const QColor b = p.color(QPalette::Base), t = p.color(QPalette::Text);
    return QColor((b.red() * 7 + t.red()) / 8, (b.green() * 7 + t.green()) / 8, (b.blue() * 7 + t.blue()) / 8);
}
inline QColor oom() { return QColor(0xd6, 0x27, 0x28); }

// Growth is red, shrink green, in every diff view (the diff flame graph's deltaColor uses the same hues); segments
// on both sides whose blocks changed are orange.
inline QColor growth() { return QColor(0xd6, 0x27, 0x28); }
inline QColor shrink() { return QColor(0x2c, 0xa0, 0x2c); }
inline QColor changed() { return QColor(0xff, 0x8c, 0x00); }
// The text of a signed change: red growth, green shrink (readable on `palette`'s base, light or dark), no change in
// the placeholder colour.
inline QColor deltaText(double delta, const QPalette& palette)
{
    const bool dark = palette.color(QPalette::Base).lightness() < 128;
    if (delta > 0)
        return dark ? QColor(0xff, 0x80, 0x70) : QColor(0xb0, 0x20, 0x10);
    if (delta < 0)
        return dark ? QColor(0x80, 0xe0, 0x80) : QColor(0x1a, 0x7a, 0x1a);
    return palette.color(QPalette::PlaceholderText);
}

} // namespace memscope::app::colors
