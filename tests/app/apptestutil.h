// Helpers shared by the app tests: load a snapshot into a Session as the app does, and save screenshots of views
// for people to look at. Test (GUI) thread only.
#pragma once

#include "io/snapshotio.h"
#include "document/session.h"
#include "testutil.h"
#include "views/timelineview.h"

#include <QDir>
#include <QWidget>

#include <memory>

namespace memscope::test {

// Loads ../shared/snapshots/<name> (or an absolute path) into a new Session; null (and a QWARN) on failure.
inline std::unique_ptr<app::Session> loadSession(const std::string& name)
{
    const std::string path = name.find('/') == std::string::npos ? snapshotPath(name) : name;
    io::LoadResult r = io::loadSnapshot(path);
    if (!r.ok()) {
        qWarning("%s", r.error.toString().c_str());
        return nullptr;
    }
    return std::make_unique<app::Session>(app::makeDocument(QString::fromStdString(path), r.snapshot));
}

// Where tests leave screenshots: $MEMSCOPE_SCREENSHOT_DIR, else <build>/screenshots.
inline QString screenshotDir()
{
    QString dir = qEnvironmentVariable("MEMSCOPE_SCREENSHOT_DIR");
    if (dir.isEmpty())
        dir = QDir::currentPath() + QLatin1String("/screenshots");
    QDir().mkpath(dir);
    return dir;
}

// Renders `widget` (shown offscreen at `size`) to <screenshotDir>/<name>.png, with the data its timelines build in
// the background finished (as --screenshot does); returns false if it could not.
inline bool saveScreenshot(QWidget& widget, const QString& name, QSize size = QSize(1200, 700))
{
    widget.resize(size);
    widget.show();
    app::finishTimelineBuilds(&widget);
    return widget.grab().save(screenshotDir() + QLatin1Char('/') + name + QLatin1String(".png"));
}

} // namespace memscope::test
