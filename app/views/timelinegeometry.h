// Pure geometry of the memory timeline: the x axis (state indices, or time) and its visible range, the mapping
// between pixels and axis coordinates / state indices / bytes, zooming around a point, panning, clamping, axis
// ticks and their labels, the widget's layout and the placement of labels in rows without overlap. No widgets and
// no painting: plain values with unit tests (tst_timeline). Any thread.
#pragma once

#include <QRect>
#include <QRectF>
#include <QString>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace memscope::app {

// The x axis' coordinate system. In index mode state s occupies [s, s + 1); in time mode it occupies
// [time(s), time(s + 1)) in microseconds, where time(s) is Session::timeUsAt(s) made non-decreasing, and the last
// state gets a small width so it stays visible. Either way coordinates grow with the state index.
class StateAxis {
public:
    StateAxis() = default;
    static StateAxis index(int64_t entryCount);
    // times: one per state (entryCount + 1 values).
    static StateAxis time(std::vector<int64_t> stateTimesUs);
    // A time axis grown by states entryCount + 1, ...: their times, one per new state. Same result as time() of all
    // of them, O(new states).
    void appendTimes(std::span<const int64_t> moreStateTimesUs);

    bool isTime() const { return m_isTime; }
    int64_t entryCount() const { return m_entryCount; } // states are 0..entryCount
    double domainBegin() const;
    double domainEnd() const;

    double stateBegin(int64_t state) const; // where state (clamped) begins
    // Where a marker for `state` goes: the middle of its unit in index mode, its start in time mode.
    double stateMarker(int64_t state) const;
    // The state in effect at coordinate c (the last one beginning at or before it), clamped to [0, entryCount].
    int64_t stateAt(double c) const;
    // How many states begin before c, clamped to [0, entryCount + 1].
    int64_t statesBefore(double c) const;
    // The states each of `columns` equal columns of [begin, end) covers: [lo, hi), the states in effect at some
    // point of the column, never empty (model::sampleColumns' contract).
    void columnRanges(double begin, double end, int columns, std::vector<int64_t>& lo, std::vector<int64_t>& hi) const;

private:
    bool m_isTime = false;
    int64_t m_entryCount = 0;
    std::vector<int64_t> m_times;
    double m_timePad = 1;
};

// The visible x range over a pixel rectangle, and the y scale (bytes at the top of the rectangle).
struct TimelineGeometry {
    QRectF rect; // the plot, in widget pixels
    double domainBegin = 0, domainEnd = 1; // the whole axis
    double begin = 0, end = 1; // the visible part
    double minSpan = 4; // the deepest zoom (axis units across the plot)
    double bytesTop = 1; // bytes at rect.top(); 0 at rect.bottom()

    void setDomain(double first, double last, double minimumSpan); // and shows all of it
    void reset() { begin = domainBegin, end = domainEnd; }
    bool isReset() const { return begin <= domainBegin && end >= domainEnd; }
    double span() const { return end - begin; }

    double xAt(double coord) const; // widget x of an axis coordinate
    double coordAt(double x) const;
    double yAt(double bytes) const;
    double bytesAt(double y) const;

    // Shows [first, last), clamped into the domain, no narrower than minSpan (widened around its middle).
    void setRange(double first, double last);
    // Multiplies the span by `factor` (< 1 zooms in) keeping coordinate `anchor` where it is on screen.
    void zoomAround(double anchor, double factor);
    // Moves the view by `pixels` to the right (content moves left), clamped into the domain.
    void panPixels(double pixels);
};

// Axis ticks.
namespace ticks {
    // A "nice" step (1, 2 or 5 × 10^k) at least `raw`.
    double niceStep(double raw);
    // origin + multiples of a nice step inside [first, last], at most maxCount + 1 of them (maxCount intervals): the
    // step is niceStep((last - first) / maxCount), or the nice step below it when that still fits. Time axes pass the
    // first entry's time as origin, so that ticks fall on round durations since the trace began, not since the epoch.
    std::vector<double> linear(double first, double last, int maxCount, double origin = 0);
    // State-index ticks: linear()'s that are whole states of a trace of entryCount entries (0..entryCount): a short
    // trace or a deep zoom gets no "0 0 1 1", a snapshot without a trace its one state, 0.
    std::vector<double> states(double first, double last, int maxCount, int64_t entryCount);
    // Byte ticks: multiples of a power of two (…, 256 MiB, 512 MiB, 1 GiB, …) from 0 to at most `top`, at most maxCount
    // + 1 of them (0 included).
    std::vector<int64_t> bytes(double top, int maxCount);
    // "0", "512 KiB", "1.25 GiB": binary units, the largest one the value reaches, up to 3 decimals, trailing zeros
    // off.
    QString bytesLabel(int64_t bytes);
    // "0", "950", "12k", "1.5M": state indices.
    QString indexLabel(double index);
    // Time since `origin` (µs): "0", "250 ms", "1.5 s", "2 min 30 s"; the unit follows `step` (µs).
    QString timeLabel(double us, double origin, double step);
} // namespace ticks

// Where things go in the widget: the header strip (title, toggles), the y-axis labels, the plot, the x-axis labels
// (also a strip where dragging moves the cursor) and the overview at the bottom. Heights in pixels.
struct TimelineLayout {
    QRect header, yAxis, plot, xAxis, overview;
    static TimelineLayout compute(QSize size, int fontHeight, int yLabelWidth);
};

// Greedy placement of labels in rows: label i wants [x[i], x[i] + width[i]) and takes the first of `rows` rows where
// it keeps `gap` pixels from the previous label; -1 when none has room. Labels are considered in the given order
// (callers pass them left to right).
std::vector<int> placeLabels(const std::vector<double>& x, const std::vector<double>& width, int rows, double gap);
// The same, asking for a label's width only when some row has room for it at its x (measuring text costs: a live job's
// timeline may offer thousands of labels, of which a few dozen fit).
std::vector<int> placeLabels(const std::vector<double>& x, const std::function<double(size_t)>& width, int rows,
                             double gap);

} // namespace memscope::app
