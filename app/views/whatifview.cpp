// WhatIfView: the What-if dock. See whatifview.h.
#include "views/whatifview.h"

#include "document/session.h"
#include "document/whatifanalysis.h"
#include "style/colors.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QVBoxLayout>

#include <algorithm>

namespace memscope::app {

namespace {

    QString bytes(size_t n) { return Session::formatBytes(int64_t(n)); }

    // The largest value of a step curve in each of `columns` equal slices of [first, first + span) of entries: the
    // curve holds its value from one point's entry to the next one's.
    std::vector<double> columnPeaks(const std::vector<CurvePoint>& curve, int64_t first, int64_t span, int columns)
    {
        std::vector<double> peaks(size_t(std::max(columns, 0)), -1.0);
        if (curve.empty() || span <= 0 || columns <= 0)
            return peaks;
        auto columnOf = [&](int64_t entry) {
            return int(std::clamp<int64_t>((entry - first) * columns / span, 0, columns - 1));
        };
        for (size_t i = 0; i < curve.size(); ++i) {
            const int from = columnOf(int64_t(curve[i].entry));
            const int to = i + 1 < curve.size() ? columnOf(int64_t(curve[i + 1].entry)) : columns - 1;
            for (int c = from; c <= to; ++c)
                peaks[size_t(c)] = std::max(peaks[size_t(c)], double(curve[i].reserved));
        }
        // Before the first call nothing is reserved.
        for (int c = 0; c < columnOf(int64_t(curve.front().entry)); ++c)
            peaks[size_t(c)] = std::max(peaks[size_t(c)], 0.0);
        return peaks;
    }

} // namespace

// Both runs' reserved bytes over the trace's entries, the memory cap, the OOMs and the cursor.
class WhatIfChart : public QWidget {
public:
    WhatIfChart(Session* session, QWidget* parent)
        : QWidget(parent)
        , m_session(session)
    {
        setMinimumSize(240, 120);
        setMouseTracking(false);
    }
    void setResult(std::shared_ptr<const WhatIfResult> r)
    {
        m_result = std::move(r);
        update();
    }
    QSize sizeHint() const override { return { 520, 220 }; }

protected:
    const WhatIfDevice* device() const
    {
        if (!m_result || !m_result->ok)
            return nullptr;
        for (const WhatIfDevice& d : m_result->devices)
            if (d.device == m_session->device())
                return &d;
        return nullptr;
    }
    struct LegendItem {
        QColor color;
        QString text;
    };
    std::vector<LegendItem> legendItems(const WhatIfDevice& d) const
    {
        std::vector<LegendItem> items {
            { originalColor(), tr("the file: peak %1").arg(bytes(d.original.peakReserved)) },
            { palette().color(QPalette::Highlight), tr("what if: peak %1").arg(bytes(d.replayed.peakReserved)) },
        };
        if (!d.original.ooms.empty() || !d.replayed.ooms.empty())
            items.push_back({ colors::oom(), tr("OOMs: %1 → %2").arg(d.original.ooms.size()).arg(d.replayed.ooms.size()) });
        return items;
    }
    QColor originalColor() const
    {
        return colors::mix(palette().color(QPalette::Text), palette().color(QPalette::Base), 0.45);
    }
    // Where each legend item goes (its swatch's left edge and its line), wrapped to the widget's width.
    std::vector<QPoint> legendLayout(const std::vector<LegendItem>& items, int* lines) const
    {
        const QFontMetrics fm(font());
        std::vector<QPoint> at;
        int x = 4, line = 0;
        for (const LegendItem& it : items) {
            const int w = 18 + fm.horizontalAdvance(it.text) + 16;
            if (x > 4 && x + w > width()) {
                x = 4;
                ++line;
            }
            at.emplace_back(x, line);
            x += w;
        }
        *lines = line + 1;
        return at;
    }
    QRect plotRect(int legendLines) const
    {
        const QFontMetrics fm(font());
        const int left = fm.horizontalAdvance(QStringLiteral("000.00 MiB")) + 8;
        // Above: the legend; below: the OOM marks and the caption.
        const int top = legendLines * fm.height() + 6;
        return QRect(left, top, std::max(width() - left - 8, 10), std::max(height() - top - fm.height() - 24, 10));
    }
    QRect plotRect() const
    {
        int lines = 1;
        if (const WhatIfDevice* d = device())
            legendLayout(legendItems(*d), &lines);
        return plotRect(lines);
    }
    int64_t first() const { return m_session->replay().firstEntry(); }
    int64_t span() const { return std::max<int64_t>(m_session->entryCount(), 1); }

    void paintEvent(QPaintEvent*) override
    {
        QPainter p(this);
        p.fillRect(rect(), palette().color(QPalette::Base));
        const QFontMetrics fm(font());
        const WhatIfDevice* d = device();
        if (!d) {
            p.setPen(palette().color(QPalette::PlaceholderText));
            p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
                       m_result && !m_result->ok ? QString::fromStdString(m_result->error)
                                                 : tr("Pick settings and Replay to see the job's reservation under "
                                                      "them."));
            return;
        }
        const std::vector<LegendItem> items = legendItems(*d);
        int legendLines = 1;
        const std::vector<QPoint> legendAt = legendLayout(items, &legendLines);
        const QRect r = plotRect(legendLines);
        const double top = std::max<double>({ double(d->original.peakReserved), double(d->replayed.peakReserved),
                                              double(m_result->cap), 1.0 })
            * 1.08;
        auto yOf = [&](double v) { return r.bottom() - v / top * r.height(); };
        auto xOf = [&](int64_t entry) { return r.left() + double(entry - first()) * r.width() / double(span()); };

        // Axis: up to four gridlines labelled in bytes, two text lines apart at least.
        p.setPen(colors::mix(palette().color(QPalette::Base), palette().color(QPalette::Text), 0.15));
        const int steps = std::clamp(r.height() / (2 * fm.height()), 1, 4);
        for (int i = 0; i <= steps; ++i) {
            const double v = top * i / steps;
            const int y = int(yOf(v));
            p.drawLine(r.left(), y, r.right(), y);
            p.save();
            p.setPen(palette().color(QPalette::Text));
            p.drawText(QRect(0, y - fm.height() / 2, r.left() - 4, fm.height()), Qt::AlignRight | Qt::AlignVCenter,
                       bytes(size_t(v)));
            p.restore();
        }
        if (m_result->cap) {
            QPen dashed(colors::oom(), 1, Qt::DashLine);
            p.setPen(dashed);
            const int y = int(yOf(double(m_result->cap)));
            p.drawLine(r.left(), y, r.right(), y);
            p.drawText(r.right() - fm.horizontalAdvance(tr("memory cap")) - 2, y - 3, tr("memory cap"));
        }
        // The curves, one value per pixel column (its largest).
        const QColor replayedColor = palette().color(QPalette::Highlight);
        auto drawCurve = [&](const std::vector<CurvePoint>& curve, const QColor& color, qreal width) {
            const std::vector<double> peaks = columnPeaks(curve, first(), span(), r.width());
            QPainterPath path;
            bool started = false;
            for (int c = 0; c < r.width(); ++c) {
                if (peaks[size_t(c)] < 0)
                    continue;
                const QPointF pt(r.left() + c, yOf(peaks[size_t(c)]));
                if (!started)
                    path.moveTo(pt);
                else
                    path.lineTo(pt);
                started = true;
            }
            p.setPen(QPen(color, width));
            p.drawPath(path);
        };
        p.setRenderHint(QPainter::Antialiasing, true);
        drawCurve(d->original.curve, originalColor(), 2.0);
        drawCurve(d->replayed.curve, replayedColor, 1.5);
        // OOMs: the file's below the axis, the replay's above it.
        auto marks = [&](const std::vector<MemoryOutcome::Oom>& ooms, const QColor& color, bool below) {
            p.setPen(Qt::NoPen);
            p.setBrush(color);
            for (const MemoryOutcome::Oom& o : ooms) {
                const double x = xOf(int64_t(o.entry));
                const double y = below ? r.bottom() + 2 : r.bottom() - 2;
                QPolygonF tri;
                tri << QPointF(x, y) << QPointF(x - 4, y + (below ? 7 : -7)) << QPointF(x + 4, y + (below ? 7 : -7));
                p.drawPolygon(tri);
            }
        };
        marks(d->original.ooms, colors::oom(), true);
        marks(d->replayed.ooms, colors::changed(), false);
        p.setRenderHint(QPainter::Antialiasing, false);
        // The cursor.
        p.setPen(QPen(colors::cursor(palette()), 1));
        const int cx = int(xOf(first() + m_session->cursor() - 1));
        p.drawLine(cx, r.top(), cx, r.bottom());
        // Legend, above the plot (on as many lines as the width needs).
        for (size_t i = 0; i < items.size(); ++i) {
            const int x = legendAt[i].x(), y = 2 + legendAt[i].y() * fm.height();
            p.fillRect(QRect(x, y + fm.height() / 2 - 2, 14, 4), items[i].color);
            p.setPen(palette().color(QPalette::Text));
            p.drawText(x + 18, y + fm.ascent(), items[i].text);
        }
        p.setPen(palette().color(QPalette::Text));
        p.drawText(QRect(r.left(), r.bottom() + 11, r.width(), fm.height() + 2), Qt::AlignCenter,
                   fm.elidedText(tr("trace entries"), Qt::ElideRight, r.width()));
    }

    void mousePressEvent(QMouseEvent* e) override
    {
        const QRect r = plotRect();
        if (!device() || e->button() != Qt::LeftButton)
            return;
        const double t = std::clamp((e->position().x() - r.left()) / std::max(r.width(), 1), 0.0, 1.0);
        m_session->setCursor(int64_t(t * double(span())) + 1);
    }

private:
    Session* m_session;
    std::shared_ptr<const WhatIfResult> m_result;
};

// The replayed segments at the cursor: one bar per segment, as long as its bytes against the largest, its blocks
// coloured allocated, waiting for another stream, or free.
class WhatIfSegments : public QWidget {
public:
    explicit WhatIfSegments(QWidget* parent)
        : QWidget(parent)
    {
        setMinimumSize(160, 100);
    }
    void setSegments(std::shared_ptr<const std::vector<WhatIfSegment>> segments, int64_t entry, QString error)
    {
        m_segments = std::move(segments);
        m_entry = entry;
        m_error = std::move(error);
        update();
    }
    QSize sizeHint() const override { return { 300, 220 }; }

protected:
    void paintEvent(QPaintEvent*) override
    {
        QPainter p(this);
        p.fillRect(rect(), palette().color(QPalette::Base));
        const QFontMetrics fm(font());
        p.setPen(palette().color(QPalette::Text));
        if (!m_error.isEmpty() || !m_segments) {
            p.setPen(palette().color(QPalette::PlaceholderText));
            p.drawText(rect().adjusted(4, 4, -4, -4), Qt::AlignCenter | Qt::TextWordWrap,
                       m_error.isEmpty() ? tr("The replayed segments at the cursor show here.") : m_error);
            return;
        }
        std::vector<const WhatIfSegment*> order;
        size_t reserved = 0, allocated = 0, largest = 1;
        for (const WhatIfSegment& s : *m_segments) {
            order.push_back(&s);
            reserved += s.size;
            largest = std::max(largest, s.size);
            for (const WhatIfBlock& b : s.blocks)
                allocated += b.allocated ? b.size : 0;
        }
        std::stable_sort(order.begin(), order.end(),
                         [](const WhatIfSegment* a, const WhatIfSegment* b) { return a->size > b->size; });
        const QString head = tr("What if, after entry %1: %2 segments, %3 reserved, %4 allocated")
                                 .arg(m_entry)
                                 .arg(order.size())
                                 .arg(bytes(reserved), bytes(allocated));
        const QRect headRect = fm.boundingRect(QRect(4, 2, width() - 8, height()), Qt::TextWordWrap, head);
        p.drawText(headRect, Qt::AlignLeft | Qt::TextWordWrap, head);
        const int top = headRect.bottom() + 6;
        const int rows = int(order.size());
        if (rows == 0)
            return;
        const int available = height() - top - 4;
        const int rowHeight = std::clamp(available / rows, 3, std::max(18, fm.height() + 2));
        const int shown = std::min(rows, std::max(available / rowHeight, 1));
        const int labelWidth = fm.horizontalAdvance(QStringLiteral("000.0 MiB")) + 6;
        const int barWidth = std::max(width() - labelWidth - 8, 20);
        const QColor freeColor = colors::freeSpace(palette());
        const QColor usedColor = palette().color(QPalette::Highlight);
        for (int i = 0; i < shown; ++i) {
            const WhatIfSegment& s = *order[size_t(i)];
            const int y = top + i * rowHeight;
            const double scale = double(barWidth) / double(largest);
            const int h = std::max(rowHeight - 2, 2);
            for (const WhatIfBlock& b : s.blocks) {
                const int x0 = labelWidth + int(double(b.address - s.address) * scale);
                const int x1 = labelWidth + int(double(b.address - s.address + b.size) * scale);
                p.fillRect(QRect(x0, y, std::max(x1 - x0, 1), h),
                           b.allocated ? usedColor : (b.active ? colors::pendingFree() : freeColor));
            }
            if (rowHeight >= fm.height() - 2) {
                p.setPen(palette().color(QPalette::Text));
                p.drawText(QRect(0, y, labelWidth - 4, h), Qt::AlignRight | Qt::AlignVCenter, bytes(s.size));
            }
        }
        if (shown < rows) {
            p.setPen(palette().color(QPalette::Text));
            p.drawText(QRect(4, height() - fm.height() - 2, width() - 8, fm.height()), Qt::AlignRight,
                       tr("%1 smaller segments not shown").arg(rows - shown));
        }
    }

private:
    std::shared_ptr<const std::vector<WhatIfSegment>> m_segments;
    int64_t m_entry = -1;
    QString m_error;
};

WhatIfView::WhatIfView(WhatIfAnalysis* analysis, Session* session, QWidget* parent)
    : QWidget(parent)
    , m_analysis(analysis)
    , m_session(session)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* row = new QHBoxLayout;
    auto* label = new QLabel(tr("PYTORCH_CUDA_ALLOC_CONF:"), this);
    m_settings = new QComboBox(this);
    m_settings->setObjectName(QStringLiteral("whatIfSettings"));
    m_settings->setEditable(true);
    m_settings->setInsertPolicy(QComboBox::NoInsert);
    m_settings->setToolTip(tr("Settings over the file's own, as PYTORCH_CUDA_ALLOC_CONF writes them (comma between "
                              "pairs); pick a preset or type"));
    for (const char* preset : { "expandable_segments:True", "max_split_size_mb:128", "max_split_size_mb:512",
                                "garbage_collection_threshold:0.8", "roundup_power2_divisions:4",
                                "expandable_segments:True,garbage_collection_threshold:0.8" })
        m_settings->addItem(QString::fromLatin1(preset));
    m_settings->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    m_run = new QPushButton(tr("Replay"), this);
    m_run->setObjectName(QStringLiteral("whatIfReplay"));
    m_run->setToolTip(tr("Replay the job's requests through memscope's allocator under these settings"));
    row->addWidget(label);
    row->addWidget(m_settings, 1);
    row->addWidget(m_run);
    layout->addLayout(row);
    m_summary = new QLabel(this);
    m_summary->setObjectName(QStringLiteral("whatIfSummary"));
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setText(tr("What would these settings have changed? memscope replays the job's own requests, in "
                          "order, through its copy of PyTorch's caching allocator."));
    // The dock is wide and low (under the timeline): the summary beside the curves, the segments under them.
    m_split = new QSplitter(Qt::Horizontal, this);
    auto* scroll = new QScrollArea(m_split);
    scroll->setWidget(m_summary);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    m_summary->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    auto* right = new QSplitter(Qt::Vertical, m_split);
    m_chart = new WhatIfChart(session, right);
    m_chart->setObjectName(QStringLiteral("whatIfChart"));
    m_segments = new WhatIfSegments(right);
    m_segments->setObjectName(QStringLiteral("whatIfSegments"));
    right->addWidget(m_chart);
    right->addWidget(m_segments);
    right->setStretchFactor(0, 3);
    right->setStretchFactor(1, 2);
    m_split->addWidget(scroll);
    m_split->addWidget(right);
    m_split->setStretchFactor(0, 0);
    m_split->setStretchFactor(1, 1);
    layout->addWidget(m_split, 1);

    connect(m_run, &QPushButton::clicked, this, [this] { replay(m_settings->currentText()); });
    connect(m_settings->lineEdit(), &QLineEdit::returnPressed, this, [this] { replay(m_settings->currentText()); });
    connect(m_analysis, &WhatIfAnalysis::resultReady, this, &WhatIfView::showResult);
    connect(m_analysis, &WhatIfAnalysis::stateReady, this,
            [this](int device, qint64 entry, std::shared_ptr<const std::vector<WhatIfSegment>> segments, QString error) {
                if (device != m_session->device() || entry != cursorEntry())
                    return; // the cursor moved on since: a newer answer comes
                m_segments->setSegments(std::move(segments), entry, std::move(error));
                Q_EMIT segmentsShown();
            });
    connect(m_session, &Session::cursorChanged, this, [this] {
        m_chart->update();
        askState();
    });
    connect(m_session, &Session::deviceChanged, this, [this] {
        m_chart->update();
        showResult(m_result);
    });
}

void WhatIfView::replay(const QString& settings)
{
    const QString text = settings.trimmed();
    if (m_settings->currentText() != text)
        m_settings->setEditText(text);
    QStringList sets;
    for (const QString& s : text.split(QLatin1Char(','), Qt::SkipEmptyParts))
        sets << s.trimmed();
    m_summary->setText(tr("Replaying the job under %1 …").arg(text.toHtmlEscaped()));
    m_run->setEnabled(false);
    m_analysis->run(sets);
}

int64_t WhatIfView::cursorEntry() const { return m_session->replay().firstEntry() + m_session->cursor() - 1; }

void WhatIfView::askState()
{
    if (m_result && m_result->ok && m_session->cursor() > 0)
        m_analysis->stateAt(m_session->device(), cursorEntry());
    else
        m_segments->setSegments(nullptr, -1, m_result && !m_result->ok ? QString::fromStdString(m_result->error)
                                                                       : QString());
}

QString WhatIfView::summaryText() const { return m_summary->text(); }

void WhatIfView::showResult(std::shared_ptr<const WhatIfResult> result)
{
    m_run->setEnabled(true);
    m_result = std::move(result);
    m_chart->setResult(m_result);
    if (!m_result)
        return;
    if (!m_result->ok) {
        m_summary->setText(tr("No what-if for this file: %1").arg(QString::fromStdString(m_result->error).toHtmlEscaped()));
        askState();
        Q_EMIT resultShown();
        return;
    }
    const WhatIfDevice* d = nullptr;
    for (const WhatIfDevice& w : m_result->devices)
        if (w.device == m_session->device())
            d = &w;
    if (!d) {
        m_summary->setText(tr("This device has no trace to replay."));
        Q_EMIT resultShown();
        return;
    }
    // The figures never wrap; the row names may. The settings are in the box above.
    auto cell = [](const QString& s) -> QString { return QStringLiteral("<td style='padding: 0 6px'>%1</td>").arg(s); };
    auto figure = [](const QString& s) -> QString {
        return QStringLiteral("<td nowrap align='right' style='padding: 0 6px'>%1</td>").arg(s);
    };
    auto rowOf = [&](const QString& what, const QString& a, const QString& b) -> QString {
        return QStringLiteral("<tr>") + cell(what) + figure(a) + figure(b) + QStringLiteral("</tr>");
    };
    QString html = QStringLiteral("<table><tr>") + cell(QString()) + figure(tr("<b>the file</b>"))
        + figure(tr("<b>what if</b>")) + QStringLiteral("</tr>");
    html += rowOf(tr("peak reserved"), bytes(d->original.peakReserved), bytes(d->replayed.peakReserved));
    html += rowOf(tr("reserved − allocated at the peak"),
                  bytes(d->original.peakReserved - std::min(d->original.peakReserved, d->original.allocatedAtPeak)),
                  bytes(d->replayed.peakReserved - std::min(d->replayed.peakReserved, d->replayed.allocatedAtPeak)));
    html += rowOf(tr("OOMs"), QString::number(d->original.ooms.size()), QString::number(d->replayed.ooms.size()));
    html += rowOf(tr("cudaMalloc calls and maps"), QString::number(d->original.deviceAllocs),
                  QString::number(d->replayed.deviceAllocs));
    html += QStringLiteral("</table>");
    QStringList notes;
    if (d->firstChangedOom < d->requests)
        notes << tr("Exact up to request %1: there the job as recorded %2, and its later requests are those of the "
                    "job as it went on.")
                     .arg(d->firstChangedOom)
                     .arg(std::any_of(d->original.ooms.begin(), d->original.ooms.end(),
                                      [&](const MemoryOutcome::Oom& o) { return o.request == d->firstChangedOom; })
                              ? tr("met an OOM that would not happen")
                              : tr("did not meet the OOM that would"));
    if (d->baseline.peakReserved != d->original.peakReserved)
        notes << tr("Error bar: the file's own settings replay to a peak of %1 (addresses are made up).")
                     .arg(bytes(d->baseline.peakReserved));
    if (m_result->originalCapInferred)
        notes << tr("Memory cap inferred from the trace: %1.").arg(bytes(m_result->originalCap));
    notes << tr("The requests are the job's as recorded.");
    html += QStringLiteral("<small>") + notes.join(QLatin1Char(' ')).toHtmlEscaped() + QStringLiteral("</small>");
    m_summary->setText(html);
    // The summary as wide as its table needs, up to half the panel; the curves take the rest.
    const int want = std::min(m_summary->fontMetrics().horizontalAdvance(QLatin1Char('x')) * 60, width() / 2);
    m_split->setSizes({ want, std::max(width() - want, 1) });
    askState();
    Q_EMIT resultShown();
}

} // namespace memscope::app
