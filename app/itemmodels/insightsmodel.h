// InsightsModel: report::Insights (common/report/insights.h) as a two-level tree for the Insights dock: one row per
// section ("At the peak", "OOMs", "Leak suspects", ...), the insights under it, columns Insight and Size. Each
// insight row carries its link (device, state index, allocation, stack) in roles, which the view follows by
// changing the Session (never another view). compute() builds a document's insights in a QtConcurrent job (holding
// the document's read lock, so a live document does not grow under it) and takes the newest job's result only;
// setInsights hands in ready ones (a diff's). The model lives on the GUI thread; no QtWidgets.
#pragma once

#include "report/insights.h"

#include <QAbstractItemModel>
#include <QPointer>

#include <memory>
#include <vector>

namespace memscope::app {

struct Document;

class InsightsModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Columns { TitleColumn, BytesColumn, ColumnCount };
    enum Roles {
        KindRole = Qt::UserRole + 1, // int(report::InsightKind); on sections too
        DeviceRole, // int
        IndexRole, // qint64 state index, -1 without one
        AllocationRole, // uint raw(AllocationId), UINT32_MAX without one
        StackRole, // uint raw(StackId)
        DetailRole, // QString: the insight's detail text
        IsSectionRole, // bool
    };

    explicit InsightsModel(QObject* parent = nullptr);

    // Replaces everything (a model reset). Null: empty.
    void setInsights(std::shared_ptr<const report::Insights> insights);
    // Insights found apart (the what-if's suggestion, document/whatifanalysis.h), shown after the computed ones and
    // kept when those are computed again.
    void setExtraInsights(std::vector<report::Insight> extra);
    // Computes the insights of every device of `document` in the background; computed() follows (unless a newer
    // compute() or setInsights() came first, whose result wins).
    void compute(std::shared_ptr<const Document> document);
    bool isComputing() const { return m_computing; }
    const report::Insights* insights() const { return m_insights.get(); }
    // The insight of an item row, or null (sections, invalid indices).
    const report::Insight* insightAt(const QModelIndex& index) const;
    // The first insight row of `kind`, or an invalid index.
    QModelIndex firstOf(report::InsightKind kind) const;

    // The section title of a kind ("At the peak", ...).
    static QString sectionTitle(report::InsightKind kind);

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

Q_SIGNALS:
    void computed();

private:
    struct Section {
        report::InsightKind kind;
        std::vector<size_t> items; // indices into m_insights->items
    };
    void rebuild();

    std::shared_ptr<const report::Insights> m_base; // computed or handed in
    std::vector<report::Insight> m_extra;
    std::shared_ptr<const report::Insights> m_insights; // m_base then m_extra
    std::vector<Section> m_sections;
    uint64_t m_generation = 0;
    bool m_computing = false;
};

} // namespace memscope::app
