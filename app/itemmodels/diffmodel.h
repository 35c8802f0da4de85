// The app side of snapshot diffs: DiffSession, the small shared state every view of one diff tab observes (the two
// sides, the computed model::DiffResult, swap, per-step normalisation, growth/shrink filter), DiffTree (the signed
// call tree of a DiffResult with A and B bytes per node, a plain value built on any thread) and DiffModel, the tree
// model over it (CallTreeItemModel's navigation, as CallTreeModel's) with columns Function, A bytes, B bytes, Δ bytes,
// Δ count; sorting by |Δ| and the growth/shrink filter live in the proxy (makeDiffProxy). The diff itself is computed
// in the data layer (model/diff.h) and fed here with signed costs (heaptrack's pattern). GUI thread only for the QObjects; DiffTree is immutable and shared.
#pragma once

#include "model/calltree.h"
#include "model/diff.h"
#include "itemmodels/calltreeitemmodel.h"
#include "document/session.h"

#include <QObject>
#include <QSortFilterProxyModel>

#include <memory>
#include <vector>

namespace memscope::app {

// One side of a diff as the app holds it: a loaded document at one state index of one device.
struct DiffInput {
    std::shared_ptr<const Document> document;
    int device = model::AllDevices; // AllDevices, or one device (its segments, its trace)
    int64_t index = model::EndOfTrace; // EndOfTrace (the snapshot's final state) or a state index of `device`
    // The state index as a number: `index`, or the trace length of the side's device for EndOfTrace.
    int64_t resolvedIndex() const;
    // The device whose trace and segments the side shows in single-device views (segment map, timeline).
    int viewDevice() const;
};

// "diff_before.pickle (end)" or "transformer_train.pickle @ 1,234".
QString diffInputLabel(const DiffInput& input);

// Number of completed step annotations (record_function names "step_N", "step N" or "stepN", any case) of the
// side's view device that end at or before the side's index. 0 when the trace has none. Pure; GUI thread (uses a
// temporary Session).
int countSteps(const DiffInput& input);

enum class DiffWeight : uint8_t {
    Net, // node bytes = Σ signed Δ (the tree the Δ tree view shows)
    Gross, // node bytes = Σ |Δ| (flame graph widths: growth and shrink both take room)
};

// A call tree over DiffResult::frames built from every byStack row (one sample per row, key = row index), with
// per-node sums that a CallTree does not keep. Pure value; any thread.
struct DiffTree {
    std::shared_ptr<const model::DiffResult> result;
    std::shared_ptr<const model::CallTree> tree;
    // Per node of `tree`: inclusive bytes and counts on each side, and the growth (Σ positive Δ, >= 0) and shrink
    // (Σ negative Δ, <= 0) under it; growth + shrink is the net Δ.
    std::vector<int64_t> bytesA, bytesB, countA, countB, growth, shrink;
};

// divA/divB: per-step normalisation (each side's values divided by its step count); 1 leaves them as they are.
// hideInternal: the stacks' internal frames dropped but their site (model::CallTreeOptions::hideInternal), as the
// call stacks' "Hide internal frames" does.
DiffTree buildDiffTree(std::shared_ptr<const model::DiffResult> result, model::CallTreeDirection direction,
                       DiffWeight weight = DiffWeight::Net, double divA = 1, double divB = 1,
                       bool hideInternal = false);

enum class DiffFilter : uint8_t { All, Growth, Shrink };

// The shared state of one diff tab. Recomputes the diff (model::computeDiff, about a millisecond even for
// big_trace, so on the GUI thread) when the sides change or are swapped.
class DiffSession : public QObject {
    Q_OBJECT
public:
    DiffSession(DiffInput a, DiffInput b, QObject* parent = nullptr);

    const DiffInput& sideA() const { return m_a; }
    const DiffInput& sideB() const { return m_b; }
    // Both sides are one document (one snapshot): lifetimes are exact and the timeline can show both cursors.
    bool sameDocument() const { return m_a.document == m_b.document; }

    const model::DiffResult& result() const { return *m_result; }
    std::shared_ptr<const model::DiffResult> resultPtr() const { return m_result; }

    // A ↔ B: every Δ changes sign.
    void swap();
    bool isSwapped() const { return m_swapped; }

    // Per-step normalisation: each side's bytes and counts divided by its number of completed step_N
    // annotations, so runs of unequal length compare per step. Only offered when both sides are different
    // documents and both have steps.
    bool perStepAvailable() const { return !sameDocument() && m_stepsA > 0 && m_stepsB > 0; }
    bool perStep() const { return m_perStep && perStepAvailable(); }
    void setPerStep(bool on);
    int stepsA() const { return m_stepsA; }
    int stepsB() const { return m_stepsB; }
    // The divisors views apply to A's and B's values (1 unless perStep()).
    double divisorA() const { return perStep() ? m_stepsA : 1.0; }
    double divisorB() const { return perStep() ? m_stepsB : 1.0; }

    DiffFilter filter() const { return m_filter; }
    void setFilter(DiffFilter filter);

    // The trees and flame graph without internal frames (the allocator's, PyTorch's, the interpreter's) but each
    // stack's site: on by default, as in a snapshot's call stacks.
    bool hideInternal() const { return m_hideInternal; }
    void setHideInternal(bool on);

Q_SIGNALS:
    void diffChanged(); // new result (sides swapped)
    void normalisationChanged();
    void filterChanged();
    void hideInternalChanged();

private:
    void recompute();

    DiffInput m_a, m_b;
    std::shared_ptr<const model::DiffResult> m_result;
    bool m_swapped = false;
    bool m_perStep = false;
    int m_stepsA = 0, m_stepsB = 0;
    DiffFilter m_filter = DiffFilter::All;
    bool m_hideInternal = true;
};

class DiffModel : public CallTreeItemModel {
    Q_OBJECT
public:
    enum Columns { FunctionColumn, BytesAColumn, BytesBColumn, DeltaBytesColumn, DeltaCountColumn, ColumnCount };
    enum Roles {
        SortRole = Qt::UserRole + 1, // Function: the label; Δ columns: |Δ| (so descending puts the largest change
                                     // first whatever its sign); A and B: the value
        FilterRole, // full frame text, what the search matches
        NodeRole, // raw(CallNodeId)
        DeltaBytesRole, // double: the (normalised) signed Δ bytes
        DeltaCountRole, // double: the (normalised) signed Δ count
        BytesARole, // double
        BytesBRole, // double
    };

    explicit DiffModel(QObject* parent = nullptr);

    void setTree(std::shared_ptr<const DiffTree> tree);
    const DiffTree* diffTree() const { return m_tree.get(); }
    // Divides A's and B's values (and so Δ = B/divB - A/divA) for per-step normalisation.
    void setDivisors(double divA, double divB);

    // The shown (normalised) values of a node.
    double bytesA(model::CallNodeId node) const;
    double bytesB(model::CallNodeId node) const;
    double deltaBytes(model::CallNodeId node) const;
    double deltaCount(model::CallNodeId node) const;

    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    // "+9.0 MiB" / "−1.2 KiB" / "0 B": signed sizes as the diff views print them.
    static QString formatSignedBytes(double bytes);

private:
    std::shared_ptr<const DiffTree> m_tree; // its tree is CallTreeItemModel's tree()
    double m_divA = 1, m_divB = 1;
    mutable std::vector<QString> m_labels, m_fullTexts;
};

// Sorts by DiffModel::SortRole (Δ bytes column descending: the largest |Δ| first), keeps rows of one sign (a row
// shows when it or a descendant matches: recursive filtering) and matches the search text case-insensitively.
class DiffProxyModel : public QSortFilterProxyModel {
    Q_OBJECT
public:
    explicit DiffProxyModel(QObject* parent = nullptr);
    void setFilter(DiffFilter filter);
    DiffFilter filter() const { return m_filter; }

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

private:
    DiffFilter m_filter = DiffFilter::All;
};

} // namespace memscope::app
