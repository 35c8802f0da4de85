// The main window: a summary of one snapshot (per device: segments, blocks, trace entries, time span, reserved and
// allocated bytes), or the error that kept it from loading. Owns the SnapshotLoader; GUI thread only.
#pragma once

#include "ingest/snapshotloader.h"

#include <QMainWindow>

#include <memory>

class QLabel;
class QTreeWidget;
class QTreeWidgetItem;

namespace memscope::app {

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    // Starts loading `path` (a file, or a ":/" resource) in the background; the window shows it once loaded.
    void openFile(const QString& path);

    // The snapshot shown, or null (loading, or the last load failed).
    std::shared_ptr<const model::Snapshot> snapshot() const { return m_snapshot; }
    // The last load's error: one line naming the file and the reason; empty after a successful load.
    QString errorText() const { return m_errorText; }

Q_SIGNALS:
    // The outcome of the latest openFile() is on screen: a snapshot (ok) or an error.
    void loadFinished(bool ok);

private:
    void showOutcome(const LoadOutcome& outcome);
    void fillSummary(const QString& fileName, const SnapshotSummary& summary);
    void addDeviceRows(QTreeWidgetItem* parent, const DeviceSummary& device);
    void chooseFile();

    SnapshotLoader m_loader;
    QLabel* m_errorLabel = nullptr;
    QTreeWidget* m_summary = nullptr;
    std::shared_ptr<const model::Snapshot> m_snapshot;
    QString m_errorText;
};

} // namespace memscope::app
