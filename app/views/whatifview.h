// The What-if dock: the job replayed under allocator settings the user picks (document/whatifanalysis.h). Above, the
// settings (PYTORCH_CUDA_ALLOC_CONF syntax, with presets) and what changes (peak reserved, OOMs, cudaMalloc calls,
// segments, and up to where the replay is exact); below, the file's reserved bytes and the replay's over the trace
// on one axis with the Session's cursor (a click moves it), and beside them the replayed segments at the cursor. It
// only shows what the analysis computes and moves the Session's cursor. GUI thread only.
#pragma once

#include "whatif/whatif.h"

#include <QWidget>

#include <memory>
#include <vector>

class QComboBox;
class QLabel;
class QPushButton;
class QSplitter;

namespace memscope::app {

class Session;
class WhatIfAnalysis;
class WhatIfChart;
class WhatIfSegments;

class WhatIfView : public QWidget {
    Q_OBJECT
public:
    // Children: "whatIfSettings" (QComboBox, editable), "whatIfReplay" (QPushButton), "whatIfSummary" (QLabel),
    // "whatIfChart", "whatIfSegments".
    WhatIfView(WhatIfAnalysis* analysis, Session* session, QWidget* parent = nullptr);

    // Replays under `settings` ("expandable_segments:True,max_split_size_mb:128"), as the Replay button does.
    void replay(const QString& settings);
    const WhatIfResult* result() const { return m_result.get(); }
    QString summaryText() const;

    QSize sizeHint() const override { return { 760, 340 }; }

Q_SIGNALS:
    void resultShown(); // a run's result is on screen
    void segmentsShown(); // the segments at the cursor are

private:
    void showResult(std::shared_ptr<const WhatIfResult> result);
    void askState();
    int64_t cursorEntry() const; // the trace entry the Session's cursor stands after (-1: before the first)

    WhatIfAnalysis* m_analysis;
    Session* m_session;
    QComboBox* m_settings = nullptr;
    QPushButton* m_run = nullptr;
    QLabel* m_summary = nullptr;
    QSplitter* m_split = nullptr;
    WhatIfChart* m_chart = nullptr;
    WhatIfSegments* m_segments = nullptr;
    std::shared_ptr<const WhatIfResult> m_result;
};

} // namespace memscope::app
