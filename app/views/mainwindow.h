// The main window: one tab per opened snapshot (a DocumentWindow each), the menus and shortcuts, loading with a
// progress bar and a Cancel button, an error banner naming the file and the reason, recent files, drag and drop,
// export of the current view, and persisted settings. Owns the SnapshotLoader; GUI thread only.
#pragma once

#include "ingest/snapshotloader.h"
#include "itemmodels/diffmodel.h"
#include "views/documentwindow.h"

#include <QMainWindow>

#include <array>
#include <memory>

class QAction;
class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QTabWidget;

namespace memscope::app {

class DiffWindow;
class LiveWindow;
class RankGroupView;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // Starts loading `path` (a file, or a ":/" resource) in the background; it opens in a new tab once loaded.
    void openFile(const QString& path);
    void openFiles(const QStringList& paths);

    // Loads two files and opens a diff tab of A's and B's final states; loadFinished follows once, when the tab
    // opens (true) or a file failed (false, its error in the banner).
    void openDiff(const QString& a, const QString& b);
    // Opens a diff tab of two sides of documents already loaded (e.g. two cursors of one document).
    DiffWindow* openDiffTab(DiffInput a, DiffInput b);
    // Loads N snapshot files of one distributed job (one per rank) and opens them as a rank-group tab;
    // loadFinished follows once.
    void openRankGroup(const QStringList& paths);

    // Attaches to a running job's agent at `endpoint` (ipc://PATH or tcp://HOST:PORT) and opens a live tab.
    // `reconnect`: wait for the job's next run when it exits (interactive use) instead of ending the recording.
    LiveWindow* openLive(const QString& endpoint, bool reconnect = true, const QString& curveServerKey = {},
                         const QString& curveSecretKey = {});
    // Several jobs at once (the ranks of one job, or one rank's devices): a live tab per endpoint and a "Ranks"
    // tab comparing them (peaks, reserved, allocated, fragmentation, OOMs, the median and the outlier), refreshed
    // as they grow (at most every 500 ms). Double-clicking a rank diffs it against the median at that moment.
    RankGroupView* openLiveGroup(const QStringList& endpoints, bool reconnect = true,
                                 const QString& curveServerKey = {}, const QString& curveSecretKey = {});
    // File ▸ Attach to Job…: the AttachDialog, then openLive().
    void chooseAttach();

    // The baseline: a document and a cursor remembered by Set Baseline (Ctrl+B) on the current tab.
    void setBaseline();
    bool hasBaseline() const { return m_baseline.document != nullptr; }
    const DiffInput& baseline() const { return m_baseline; }
    // Opens a diff tab of the baseline (A) against the current tab at its cursor (B); null without either.
    DiffWindow* compareWithBaseline();

    DocumentWindow* currentDocument() const;
    DiffWindow* currentDiff() const;
    LiveWindow* currentLive() const;
    RankGroupView* currentRankGroup() const;
    int documentCount() const;
    // The snapshot of the current tab, or null.
    std::shared_ptr<const model::Snapshot> snapshot() const;
    // The errors of failed loads, one line each (file and reason); empty when none failed.
    QString errorText() const { return m_errors.join(QLatin1Char('\n')); }

    // Writes the current tab's current view (or `view`) as PNG or SVG (by suffix); a PNG has `scale` pixels per
    // logical pixel (2: crisp on hi-DPI screens and in documents). Returns an error line or "".
    QString exportView(const QString& path, QWidget* view = nullptr, qreal scale = 1.0);

Q_SIGNALS:
    // A load started by openFile() ended: a new tab (ok) or an error in the banner.
    void loadFinished(bool ok);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    // Stops every live tab's recording (their receivers join their threads and hand over the last update).
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    void stopLiveTabs();
    void onLoaded(uint64_t job, const LoadOutcome& outcome);
    void showError(const QString& message);
    void updateProgress();
    void updateRecentMenu();
    void addRecent(const QString& path);
    void updateStatus();
    void chooseFiles();
    void chooseExport();
    void showShortcuts();
    void chooseCompareFiles();
    void chooseCompareMoments();
    void chooseRankGroup();
    void addTab(QWidget* widget, const QString& title, const QString& toolTip);
    // A group of loads that opens one tab (a diff or a rank group) once every file is in.
    struct LoadGroup {
        enum class Kind : uint8_t { Diff, Ranks } kind = Kind::Diff;
        QStringList paths;
        std::vector<std::shared_ptr<const Document>> documents; // by position in paths
        std::array<model::Moment, 2> moments {}; // a diff's FILE@MOMENT sides (model/landmarks.h)
        int remaining = 0;
        bool failed = false;
    };
    void startGroup(LoadGroup::Kind kind, const QStringList& paths);
    void groupLoaded(int group, int position, const LoadOutcome& outcome);

    SnapshotLoader m_loader;
    QTabWidget* m_tabs = nullptr;
    QLabel* m_emptyHint = nullptr;
    QLabel* m_errorLabel = nullptr;
    QWidget* m_errorBanner = nullptr;
    QProgressBar* m_progress = nullptr;
    QPushButton* m_cancel = nullptr;
    QLabel* m_status = nullptr;
    QMenu* m_recentMenu = nullptr;
    QAction* m_saveLive = nullptr; // File > Save Live Recording: enabled with a live tab current
    QStringList m_errors;
    QHash<uint64_t, QString> m_pending; // running load jobs -> path
    QHash<uint64_t, int> m_percent;
    QHash<int, LoadGroup> m_groups;
    QHash<uint64_t, std::pair<int, int>> m_groupJobs; // job -> (group, position)
    int m_nextGroup = 0;
    DiffInput m_baseline;
};

} // namespace memscope::app
