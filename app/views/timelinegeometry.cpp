// Pure geometry of the memory timeline. See timelinegeometry.h.
#include "views/timelinegeometry.h"

#include <QStringBuilder>

#include <algorithm>
#include <cmath>

namespace memscope::app {

StateAxis StateAxis::index(int64_t entryCount)
{
    StateAxis a;
    a.m_entryCount = std::max<int64_t>(0, entryCount);
    return a;
}

StateAxis StateAxis::time(std::vector<int64_t> stateTimesUs)
{
    StateAxis a;
    a.m_isTime = true;
    if (stateTimesUs.empty())
        stateTimesUs.push_back(0);
    // Entries of several threads may be a little out of order; the axis needs non-decreasing times.
    for (size_t i = 1; i < stateTimesUs.size(); ++i)
        stateTimesUs[i] = std::max(stateTimesUs[i], stateTimesUs[i - 1]);
    a.m_entryCount = int64_t(stateTimesUs.size()) - 1;
    a.m_timePad = std::max(1.0, double(stateTimesUs.back() - stateTimesUs.front()) * 0.002);
    a.m_times = std::move(stateTimesUs);
    return a;
}

void StateAxis::appendTimes(std::span<const int64_t> moreStateTimesUs)
{
    for (int64_t t : moreStateTimesUs)
        m_times.push_back(std::max(t, m_times.back()));
    m_entryCount = int64_t(m_times.size()) - 1;
    m_timePad = std::max(1.0, double(m_times.back() - m_times.front()) * 0.002);
}

double StateAxis::domainBegin() const { return m_isTime ? double(m_times.front()) : 0.0; }

double StateAxis::domainEnd() const { return m_isTime ? double(m_times.back()) + m_timePad : double(m_entryCount + 1); }

double StateAxis::stateBegin(int64_t state) const
{
    state = std::clamp<int64_t>(state, 0, m_entryCount);
    return m_isTime ? double(m_times[size_t(state)]) : double(state);
}

double StateAxis::stateMarker(int64_t state) const
{
    return m_isTime ? stateBegin(state) : double(std::clamp<int64_t>(state, 0, m_entryCount)) + 0.5;
}

int64_t StateAxis::stateAt(double c) const
{
    if (!m_isTime)
        return std::clamp<int64_t>(int64_t(std::floor(c)), 0, m_entryCount);
    const auto it
        = std::upper_bound(m_times.begin(), m_times.end(), c, [](double v, int64_t t) { return v < double(t); });
    return std::clamp<int64_t>(int64_t(it - m_times.begin()) - 1, 0, m_entryCount);
}

int64_t StateAxis::statesBefore(double c) const
{
    if (!m_isTime)
        return std::clamp<int64_t>(int64_t(std::ceil(c)), 0, m_entryCount + 1);
    const auto it
        = std::lower_bound(m_times.begin(), m_times.end(), c, [](int64_t t, double v) { return double(t) < v; });
    return int64_t(it - m_times.begin());
}

void StateAxis::columnRanges(double begin, double end, int columns, std::vector<int64_t>& lo,
                             std::vector<int64_t>& hi) const
{
    columns = std::max(columns, 0);
    lo.resize(size_t(columns));
    hi.resize(size_t(columns));
    const double step = (end - begin) / std::max(columns, 1);
    // Column x spans [c0, c1): the state in effect at c0 up to the last one beginning before c1.
    int64_t next = stateAt(begin);
    for (int x = 0; x < columns; ++x) {
        const double c1 = begin + step * (x + 1);
        lo[size_t(x)] = next;
        const int64_t before = x + 1 == columns && end >= domainEnd() ? m_entryCount + 1 : statesBefore(c1);
        hi[size_t(x)] = std::max(lo[size_t(x)] + 1, before);
        next = std::max(lo[size_t(x)], stateAt(c1));
    }
}

void TimelineGeometry::setDomain(double first, double last, double minimumSpan)
{
    domainBegin = first;
    domainEnd = std::max(last, first + 1e-9);
    minSpan = std::clamp(minimumSpan, 1e-9, domainEnd - domainBegin);
    reset();
}

double TimelineGeometry::xAt(double coord) const { return rect.left() + (coord - begin) / span() * rect.width(); }

double TimelineGeometry::coordAt(double x) const
{
    return begin + (x - rect.left()) / std::max(rect.width(), 1e-9) * span();
}

double TimelineGeometry::yAt(double bytes) const
{
    return rect.bottom() - bytes / std::max(bytesTop, 1e-9) * rect.height();
}

double TimelineGeometry::bytesAt(double y) const
{
    return (rect.bottom() - y) / std::max(rect.height(), 1e-9) * bytesTop;
}

void TimelineGeometry::setRange(double first, double last)
{
    if (!(last > first)) // also catches NaN
        std::swap(first, last);
    const double whole = domainEnd - domainBegin;
    double width = std::clamp(last - first, minSpan, whole);
    double middle = (first + last) / 2;
    if (!std::isfinite(middle))
        middle = (domainBegin + domainEnd) / 2;
    begin = std::clamp(middle - width / 2, domainBegin, domainEnd - width);
    end = begin + width;
}

void TimelineGeometry::zoomAround(double anchor, double factor)
{
    const double whole = domainEnd - domainBegin;
    const double width = std::clamp(span() * factor, minSpan, whole);
    const double fraction = span() > 0 ? (anchor - begin) / span() : 0.5;
    const double first = std::clamp(anchor - fraction * width, domainBegin, domainEnd - width);
    begin = first;
    end = first + width;
}

void TimelineGeometry::panPixels(double pixels)
{
    const double delta = pixels / std::max(rect.width(), 1e-9) * span();
    const double width = span();
    begin = std::clamp(begin + delta, domainBegin, domainEnd - width);
    end = begin + width;
}

namespace ticks {

    double niceStep(double raw)
    {
        if (!(raw > 0) || !std::isfinite(raw))
            return 1;
        const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
        for (double m : { 1.0, 2.0, 5.0, 10.0 })
            if (m * magnitude >= raw * (1 - 1e-9))
                return m * magnitude;
        return 10 * magnitude;
    }

    std::vector<double> linear(double first, double last, int maxCount, double origin)
    {
        std::vector<double> out;
        if (!(last > first) || maxCount < 1)
            return out;
        first -= origin;
        last -= origin;
        // The finest nice step that still gives at most maxCount + 1 ticks: niceStep of the raw step, or the nice step
        // below it when the range's alignment allows (13..97 in 4: 20, not 50).
        auto count = [&](double step) { return std::floor(last / step + 1e-9) - std::ceil(first / step - 1e-9) + 1; };
        double step = niceStep((last - first) / maxCount);
        const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
        const double finer = step / (mantissa < 3 ? 2.0 : 2.5);
        if (count(finer) <= maxCount + 1)
            step = finer;
        for (double k = std::ceil(first / step - 1e-9); k * step <= last + step * 1e-9; k += 1)
            out.push_back((k * step == 0 ? 0.0 : k * step) + origin);
        return out;
    }

    std::vector<int64_t> bytes(double top, int maxCount)
    {
        std::vector<int64_t> out;
        if (!(top >= 0) || maxCount < 1)
            return { 0 };
        int64_t step = 1;
        while (double(step) * maxCount < top && step < (int64_t(1) << 60))
            step *= 2;
        for (int64_t v = 0; double(v) <= top; v += step)
            out.push_back(v);
        return out;
    }

    QString bytesLabel(int64_t bytes)
    {
        static const char* const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
        if (bytes == 0)
            return QStringLiteral("0");
        int unit = 0;
        double v = double(bytes);
        while (std::abs(v) >= 1024 && unit < 5) {
            v /= 1024;
            ++unit;
        }
        QString number = QString::number(v, 'f', 3);
        while (number.contains(QLatin1Char('.'))
               && (number.endsWith(QLatin1Char('0')) || number.endsWith(QLatin1Char('.'))))
            number.chop(1);
        return number % QLatin1Char(' ') % QLatin1String(units[unit]);
    }

    QString indexLabel(double index)
    {
        const double a = std::abs(index);
        auto trimmed = [](double v) {
            QString s = QString::number(v, 'f', 2);
            while (s.contains(QLatin1Char('.')) && (s.endsWith(QLatin1Char('0')) || s.endsWith(QLatin1Char('.'))))
                s.chop(1);
            return s;
        };
        if (a >= 1e6)
            return trimmed(index / 1e6) + QLatin1Char('M');
        if (a >= 1e4)
            return trimmed(index / 1e3) + QLatin1Char('k');
        return QString::number(int64_t(std::llround(index)));
    }

    QString timeLabel(double us, double origin, double step)
    {
        const double t = us - origin;
        if (std::abs(t) < step * 1e-6)
            return QStringLiteral("0");
        auto withDecimals = [](double v, double unitStep) {
            // As many decimals as the step needs (a step of 0.25 s needs 2).
            int decimals = 0;
            while (decimals < 3
                   && std::abs(unitStep * std::pow(10.0, decimals) - std::round(unitStep * std::pow(10.0, decimals)))
                       > 1e-6)
                ++decimals;
            return QString::number(v, 'f', decimals);
        };
        // The unit follows the step: below 0.1 ms in µs, below 0.1 s in ms, then seconds.
        if (step < 1e2)
            return withDecimals(t, step) + QStringLiteral(" µs");
        if (step < 1e5)
            return withDecimals(t / 1e3, step / 1e3) + QStringLiteral(" ms");
        if (step < 60e6 || std::abs(t) < 60e6)
            return withDecimals(t / 1e6, step / 1e6) + QStringLiteral(" s");
        const int64_t seconds = int64_t(std::llround(t / 1e6));
        const int64_t minutes = seconds / 60;
        return seconds % 60 == 0 ? QStringLiteral("%1 min").arg(minutes)
                                 : QStringLiteral("%1 min %2 s").arg(minutes).arg(seconds % 60);
    }

} // namespace ticks

TimelineLayout TimelineLayout::compute(QSize size, int fontHeight, int yLabelWidth)
{
    TimelineLayout l;
    const int w = std::max(size.width(), 1), h = std::max(size.height(), 1);
    const int left = yLabelWidth + 8, right = 12;
    const int headerHeight = fontHeight + 10;
    const int axisHeight = fontHeight + 8;
    const int overviewHeight = std::clamp(h / 8, 24, 56);
    const int plotWidth = std::max(w - left - right, 1);
    const int overviewTop = h - overviewHeight - 4;
    const int axisTop = overviewTop - 6 - axisHeight;
    const int plotTop = headerHeight;
    const int plotHeight = std::max(axisTop - plotTop, 1);
    l.header = QRect(0, 0, w, headerHeight);
    l.yAxis = QRect(0, plotTop, left, plotHeight);
    l.plot = QRect(left, plotTop, plotWidth, plotHeight);
    l.xAxis = QRect(left, plotTop + plotHeight, plotWidth, axisHeight);
    l.overview = QRect(left, overviewTop, plotWidth, overviewHeight);
    return l;
}

std::vector<double> ticks::states(double first, double last, int maxCount, int64_t entryCount)
{
    std::vector<double> values = linear(first, last, maxCount);
    std::erase_if(values, [entryCount](double v) { return v != std::floor(v) || v < 0 || v > double(entryCount); });
    return values;
}

namespace {

    // placeLabels() for the first `count` labels.
    std::vector<int> placeFirst(const std::vector<double>& x, const std::function<double(size_t)>& width, size_t count,
                                int rows, double gap)
    {
        std::vector<int> out(std::min(x.size(), count), -1);
        std::vector<double> rowEnd(size_t(std::max(rows, 0)), -1e300);
        for (size_t i = 0; i < out.size(); ++i) {
            // A row has room at x only if the one that ends first has: otherwise the width is not needed.
            if (rowEnd.empty() || x[i] < *std::min_element(rowEnd.begin(), rowEnd.end()) + gap)
                continue;
            const double w = width(i);
            for (size_t r = 0; r < rowEnd.size(); ++r) {
                if (x[i] >= rowEnd[r] + gap) {
                    out[i] = int(r);
                    rowEnd[r] = x[i] + w;
                    break;
                }
            }
        }
        return out;
    }

} // namespace

std::vector<int> placeLabels(const std::vector<double>& x, const std::vector<double>& width, int rows, double gap)
{
    return placeFirst(
        x, [&](size_t i) { return width[i]; }, std::min(x.size(), width.size()), rows, gap);
}

std::vector<int> placeLabels(const std::vector<double>& x, const std::function<double(size_t)>& width, int rows,
                             double gap)
{
    return placeFirst(x, width, x.size(), rows, gap);
}

} // namespace memscope::app
