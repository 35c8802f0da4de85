// Helpers shared by the app tests: load a snapshot into a Session as the app does, save screenshots of views for
// people to look at, and hold the timeline's plot jobs queued. Test (GUI) thread only.
#pragma once

#include "io/snapshotio.h"
#include "document/session.h"
#include "testutil.h"
#include "views/timelineview.h"

#include <QApplication>
#include <QDir>
#include <QFont>
#include <QSemaphore>
#include <QThreadPool>
#include <QWidget>

#include <memory>
#include <utility>

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

// The application font at `percent` of its size while it lives (200 stands for a 2x-scaled desktop), restored when
// it goes, also when a check failed in between.
class ScopedFontScale {
public:
    explicit ScopedFontScale(int percent)
        : m_old(QApplication::font())
    {
        QFont scaled = m_old;
        scaled.setPointSizeF(m_old.pointSizeF() * percent / 100.0);
        QApplication::setFont(scaled);
    }
    ~ScopedFontScale() { QApplication::setFont(m_old); }
    ScopedFontScale(const ScopedFontScale&) = delete;
    ScopedFontScale& operator=(const ScopedFontScale&) = delete;

private:
    QFont m_old;
};

// Renders `widget` (shown offscreen at `size`) to <screenshotDir>/<name>.png, with the data its timelines build in
// the background finished (as --screenshot does); returns false if it could not.
inline bool saveScreenshot(QWidget& widget, const QString& name, QSize size = QSize(1200, 700))
{
    widget.resize(size);
    widget.show();
    app::finishTimelineBuilds(&widget);
    return widget.grab().save(screenshotDir() + QLatin1Char('/') + name + QLatin1String(".png"));
}

// Keeps every thread of the timeline renderers' pool busy until released, so that a plot job asked for meanwhile
// stays queued: what a paint (or a live document's growth) does while a render is under way is then seen without a
// race. A wait for such a job would not hang (a QFuture's wait runs a job no thread has taken), it would render it:
// the tests see that as a plot shown too soon.
class PoolBlocker {
public:
    PoolBlocker()
    {
        QThreadPool* pool = app::TimelineRenderer::threadPool();
        pool->waitForDone(); // earlier jobs
        m_count = pool->maxThreadCount();
        for (int i = 0; i < m_count; ++i)
            pool->start([this] {
                m_started.release();
                m_released.acquire();
            });
        m_started.acquire(m_count);
    }
    ~PoolBlocker()
    {
        release();
        app::TimelineRenderer::threadPool()->waitForDone();
    }
    PoolBlocker(const PoolBlocker&) = delete;
    PoolBlocker& operator=(const PoolBlocker&) = delete;
    void release()
    {
        if (!std::exchange(m_done, true))
            m_released.release(m_count);
    }

private:
    QSemaphore m_started, m_released;
    int m_count = 0;
    bool m_done = false;
};

} // namespace memscope::test
