// A rank group: the snapshot files of one distributed job, one per rank (snapshot_rank{0..N}.pickle), summarised
// per rank (peak allocated and reserved over the trace, allocated, reserved and fragmentation at the end, OOMs), with
// the median rank (by peak allocated) and the outlier (the rank whose peak allocated deviates most from the median's)
// so that one rank that leaks or fragments stands out. RankGroup is a plain value built on any thread from loaded
// Documents; RankGroupModel is its table (GUI thread only).
#pragma once

#include "document/session.h"

#include <QAbstractTableModel>
#include <QStringList>

#include <memory>
#include <vector>

namespace memscope::app {

struct RankStats {
    QString path;
    int rank = 0; // from "rank<N>" in the file name, else the position in the group
    model::ByteCount peakAllocated = 0; // the largest allocated bytes over the trace (the end state without one)
    model::ByteCount peakReserved = 0;
    model::ByteCount allocated = 0; // at the end (the snapshot's own state), all devices
    model::ByteCount reserved = 0;
    model::ByteCount fragmentation = 0; // reserved - active at the end
    double fragmentationRatio = 0; // fragmentation / reserved (0 when nothing is reserved)
    int ooms = 0; // OOM entries in the trace
};

// The figures of one document. Pure; any thread.
RankStats rankStats(const Document& document, int position);

struct RankGroup {
    std::vector<std::shared_ptr<const Document>> documents;
    std::vector<RankStats> ranks; // same order as documents
    int median = -1; // index of the median rank by peak allocated (the lower middle for an even count)
    int outlier = -1; // index of the rank with the largest |peak allocated - median's|; -1 with fewer than 3 ranks
                      // or when every rank has the median's peak
    // Signed deviation of a rank's peak allocated from the median's.
    model::ByteCount deviation(size_t i) const
    {
        return median < 0 ? 0 : ranks[i].peakAllocated - ranks[size_t(median)].peakAllocated;
    }
};

RankGroup makeRankGroup(std::vector<std::shared_ptr<const Document>> documents);

class RankGroupModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Columns {
        RankColumn,
        FileColumn,
        PeakAllocatedColumn,
        PeakReservedColumn,
        AllocatedColumn,
        ReservedColumn,
        FragmentationColumn,
        OomColumn,
        DeviationColumn,
        ColumnCount
    };
    enum Roles { SortRole = Qt::UserRole + 1, IsMedianRole, IsOutlierRole };

    explicit RankGroupModel(QObject* parent = nullptr);
    void setGroup(std::shared_ptr<const RankGroup> group);
    const RankGroup& group() const { return *m_group; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::shared_ptr<const RankGroup> m_group;
};

} // namespace memscope::app
