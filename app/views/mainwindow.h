// The main window: one tab per opened snapshot (a DocumentWindow each), the menus and shortcuts, loading with a
// progress bar and a Cancel button, an error banner naming the file and the reason, recent files, drag and drop,
// export of the current view, and persisted settings. Owns the SnapshotLoader; GUI thread only.
#pragma once

#include "ingest/snapshotloader.h"
#include "views/documentwindow.h"

#include <QMainWindow>

#include <memory>

class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QTabWidget;

namespace memscope::app {

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // Starts loading `path` (a file, or a ":/" resource) in the background; it opens in a new tab once loaded.
    void openFile(const QString& path);
    void openFiles(const QStringList& paths);

    DocumentWindow* currentDocument() const;
    int documentCount() const;
    // The snapshot of the current tab, or null.
    std::shared_ptr<const model::Snapshot> snapshot() const;
    // The errors of failed loads, one line each (file and reason); empty when none failed.
    QString errorText() const { return m_errors.join(QLatin1Char('\n')); }

    // Writes the current tab's current view (or `view`) as PNG or SVG (by suffix). Returns an error line or "".
    QString exportView(const QString& path, QWidget* view = nullptr);

Q_SIGNALS:
    // A load started by openFile() ended: a new tab (ok) or an error in the banner.
    void loadFinished(bool ok);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    void onLoaded(uint64_t job, const LoadOutcome& outcome);
    void showError(const QString& message);
    void updateProgress();
    void updateRecentMenu();
    void addRecent(const QString& path);
    void updateStatus();
    void chooseFiles();
    void chooseExport();
    void showShortcuts();

    SnapshotLoader m_loader;
    QTabWidget* m_tabs = nullptr;
    QLabel* m_emptyHint = nullptr;
    QLabel* m_errorLabel = nullptr;
    QWidget* m_errorBanner = nullptr;
    QProgressBar* m_progress = nullptr;
    QPushButton* m_cancel = nullptr;
    QLabel* m_status = nullptr;
    QMenu* m_recentMenu = nullptr;
    QStringList m_errors;
    QHash<uint64_t, QString> m_pending; // running load jobs -> path
    QHash<uint64_t, int> m_percent;
};

} // namespace memscope::app
