// WidgetOverlay: see widgetoverlay.h.
#include "views/widgetoverlay.h"

#include <QEvent>

namespace memscope::app {

WidgetOverlay::WidgetOverlay(QWidget* host)
    : QWidget(host)
    , m_host(host)
{
    setAttribute(Qt::WA_TransparentForMouseEvents);
    setAttribute(Qt::WA_NoSystemBackground);
    host->installEventFilter(this);
    setGeometry(host->rect());
}

bool WidgetOverlay::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m_host && event->type() == QEvent::Resize)
        setGeometry(m_host->rect());
    return false;
}

} // namespace memscope::app
