// The event list: every trace entry of the Session's current device as one table row (index, time, action, PyTorch
// address name, size, stream, top frame), filtered by action, size, stream and frame text. Rows are computed on
// demand from the immutable Snapshot (no per-row storage but the vector of matching entry indices a filter leaves),
// so millions of entries cost little. Filtering and the per-device naming pass run as QtConcurrent jobs on the
// immutable Document; a job's result is applied only if it is still the latest (job id), so stale results are
// dropped. The model lives on the GUI thread; the free functions below are pure and may run on any thread.
#pragma once

#include "document/session.h"

#include <QAbstractTableModel>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::app {

// What the event list shows. A default-constructed filter passes every entry.
struct EventFilter {
    static constexpr uint32_t AllActions = (1u << uint32_t(model::Action::Count)) - 1;
    static constexpr uint32_t bit(model::Action action) { return 1u << uint32_t(action); }

    uint32_t actions = AllActions; // bit(action) set: entries with that action pass
    model::ByteCount minSize = 0; // inclusive, on the entry's `size`
    model::ByteCount maxSize = std::numeric_limits<model::ByteCount>::max(); // inclusive
    std::optional<int64_t> stream; // a raw stream handle; nullopt: every stream
    std::vector<int64_t> hiddenStreams; // raw handles hidden (the Session's stream filter), sorted
    // UTF-8 text looked for in every frame of the entry's stack, as "filename:line:name" (the full file name, as
    // MemoryViz.js format_frames prints a frame); empty: no text filter. Entries without a stack never match.
    std::string frameText;
    bool caseSensitive = false;

    bool passesEverything() const;
    bool operator==(const EventFilter&) const = default;
};
static_assert(uint32_t(model::Action::Count) < 32, "EventFilter::actions is a 32-bit mask");

// Per stack of `snapshot`: 1 if any of its frames contains `text` (as EventFilter::frameText), else 0. Each frame
// is formatted and searched once, each stack is a scan of frame flags. Pure; any thread.
std::vector<uint8_t> stacksMatchingText(const model::Snapshot& snapshot, std::string_view text, bool caseSensitive);

// The indices of the entries of deviceTraces[device] that pass `filter`, ascending. Pure; any thread; O(entries +
// frames + stack frames).
std::vector<uint32_t> filterEntries(const model::Snapshot& snapshot, int device, const EventFilter& filter,
                                    size_t begin = 0);

// Parses a byte count typed by a person: "4096", "512 B", "1.5 MiB", "2M", "3 GB", "64k" (K/M/G/T with or without
// "i" and "B", all powers of 1024, case-insensitive). nullopt for anything else, negative numbers included.
std::optional<model::ByteCount> parseByteSize(const QString& text);

// PyTorch's viewer name for a trace entry's address (MemoryViz.js formatAddr): "s<hex addr>_<version>" for segment
// actions, "b<hex addr>_<version>" for block actions, "OOM" for oom, "" for snapshot, "b<hex addr>" for actions
// the viewer gives no version. `version`: the entry's TraceEntry::version, which every trace gets as the viewer
// counts (model::TraceNumbering, in the loader and the live recorder alike). Pure; any thread.
QString eventAddressName(const model::TraceEntry& e, uint32_t version);

class EventListModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Columns {
        IndexColumn,
        TimeColumn,
        ActionColumn,
        AddressColumn,
        SizeColumn,
        StreamColumn,
        MetadataColumn, // the entry's user_metadata (hidden by the view when the file has none)
        FrameColumn,
        ColumnCount
    };
    enum Roles {
        EntryIndexRole = Qt::UserRole + 1, // qlonglong: the entry's index in the device's trace
        StateIndexRole, // qlonglong: the Session state index right after the entry (cursor position)
        SizeRole, // qlonglong: the entry's raw `size` in bytes
        RawStreamRole, // qlonglong: the raw cudaStream_t handle
        ActionRole, // int: model::Action
        AllocationRole, // uint: raw model::AllocationId of the entry's allocation (UINT32_MAX: none)
    };

    // Observes `session` (device, stream filter, frame filter, selection); starts the first job at once.
    explicit EventListModel(Session* session, QObject* parent = nullptr);
    ~EventListModel() override;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    // Starts a job for `filter` (the Session's hidden streams are added to it); rows change when it is done
    // (rowsReady). The rows shown until then are the previous ones.
    void setFilter(EventFilter filter);
    const EventFilter& filter() const { return m_filter; }

    // True while a job whose result will change the rows is running.
    bool isBusy() const { return m_pendingJob != m_appliedJob; }
    // The device the rows are of, and its trace length (what an unfiltered list shows).
    int device() const { return m_rowsDevice; }
    int64_t totalEntries() const;
    // The raw streams of the device's entries, in Snapshot::streams order (known once the device's first job is done).
    const std::vector<int64_t>& streams() const { return m_streams; }

    // Row <-> entry index (in deviceTraces[device()]); -1 when out of range / filtered out.
    int64_t entryOfRow(int row) const;
    int rowOfEntry(int64_t entry) const;
    // The last row whose entry is <= entry; -1 when none.
    int rowAtOrBefore(int64_t entry) const;
    // Session state index right after entry `entry`, and the entry leading to state `state` (Replay::firstEntry aware).
    int64_t stateAfterEntry(int64_t entry) const;
    int64_t entryBeforeState(int64_t state) const;

Q_SIGNALS:
    // The rows now reflect the latest device and filter (after every job, even when nothing changed).
    void rowsReady(int rows);
    void busyChanged(bool busy);

private:
    struct JobResult;
    void startJob();
    void applyResult(std::shared_ptr<JobResult> result);
    void onSessionFilterChanged();
    void onDeviceChanged();
    void onGrown();
    void extendRows();
    const model::Trace& rowEntries() const;
    QString topFrame(model::StackId stack) const;
    QString addressName(int64_t entry) const;

    Session* m_session;
    std::shared_ptr<const Document> m_document;
    EventFilter m_filter; // the latest one asked for (hidden streams included)
    uint64_t m_pendingJob = 0; // id of the latest job started
    uint64_t m_appliedJob = 0; // id of the job whose result is shown
    size_t m_covered = 0; // entries of the device's trace that the rows account for (a live trace grows)
    // What the rows show: device, and either every entry (m_identity) or m_rows.
    int m_rowsDevice = -1;
    bool m_identity = true;
    std::vector<uint32_t> m_rows;
    std::vector<int64_t> m_streams;
    int64_t m_firstTimeUs = 0;
    bool m_frameFilter = true;
    model::AllocationId m_selection = model::NoAllocation;
    // Per stack: the index (within the stack) of its first frame kept by the frame filter; -2 not computed yet, -1
    // none.
    mutable std::vector<int32_t> m_topFrame;
};

} // namespace memscope::app
