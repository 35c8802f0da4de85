// WidgetOverlay, a transparent child that covers its host widget and follows its size, for what is drawn over a view
// without the view knowing (the diff's outlines on a segment map, its range on a timeline). It takes no mouse events
// and paints no background; being a child, it repaints whenever the host does. GUI thread only.
#pragma once

#include <QWidget>

namespace memscope::app {

class WidgetOverlay : public QWidget {
    Q_OBJECT
protected:
    // A child of `host`, as large as it from now on.
    explicit WidgetOverlay(QWidget* host);

    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    QWidget* m_host;
};

} // namespace memscope::app
