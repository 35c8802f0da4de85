// Recorder: turns an agent's state reply plus the events that follow it into a model::Snapshot in PyTorch's
// format (the late-join procedure of docs/protocol.md, the Clone pattern of the ZeroMQ Guide, chapter 5).
//
// Sequences are client::AgentClient's (common/client): it hands over the state, then the records above it in
// sequence order without jumps, and says what went missing (addMissing, addLost, a ResyncReason). Records that
// never arrived or that the agent dropped mean the recording missed allocator changes: they are counted and
// resyncNeeded() turns true; the Recorder goes on applying what it has, skipping (and counting) events that do not
// fit its state. resync() repairs that with a
// fresh state from the agent (or the state of a restarted job): synthetic trace entries turn the Recorder's state
// into the fresh one, and an annotation pair marks where data is missing. The snapshot's final segments and blocks
// are always the state with the applied events on top, and its device_traces are exactly those events (plus the
// synthetic ones), so a Replay of it ends where the Recorder ends. Free (inactive) blocks are kept as the agent's
// state lists them, with the request PyTorch leaves on each, and follow PyTorch's split and merge rules
// (model/freeblocks.h), so the snapshot's free blocks are the job's own, stale requests included. The state, the
// applying of events and the synthetic entries are the one engine's (model::EventTrace), and the snapshot's
// numbering is model::TraceNumbering, so the Recorder, the live view and a file read back agree by construction;
// the Recorder adds what is the protocol's: stacks, notes and statistics. Its snapshot is written by the one writer
// of recordings, viewer::RecordingBuilder, which the app's live document uses too.
// Single-threaded: one thread owns a Recorder.
// The viewers' side of the protocol (common/viewer, library memscope-viewer): no ZeroMQ (client::AgentClient in
// common/client is the ZeroMQ side), so `memscope-cli info` and the tests read recordings without it.
#pragma once

#include "model/eventtrace.h"
#include "model/snapshot.h"
#include "viewer/decoder.h"
#include "viewer/recordingbuilder.h"
#include "wire/protocol.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace memscope::viewer {

struct RecorderStats {
    uint64_t applied = 0; // events turned into trace entries (heartbeats not included)
    uint64_t joinedAfter = 0; // the job's events before the first state (its lastSequence): in the state, not applied
    uint64_t heartbeats = 0;
    uint64_t gaps = 0; // sequence jumps (addMissing, resync's reason)
    uint64_t missing = 0; // records skipped over by those jumps
    uint64_t lost = 0; // records the agent dropped, its ring full (addLost, resync's reason)
    uint64_t inconsistent = 0; // events that did not fit the state (free of an unknown block, ...); skipped
    uint64_t agentLost = 0; // Goodbye::lost, when a goodbye arrived
    // The records the agent dropped: its goodbye's count when that says more (drops no record announced), else the
    // drops records announced. The two count the same drops: never their sum.
    uint64_t agentDropped() const { return lost > agentLost ? lost : agentLost; }
    uint64_t resyncs = 0; // resync() calls: fresh states applied after events (job restarts included)
    uint64_t restarts = 0; // of which a restarted job (ResyncReason::Kind::Restart)
    uint64_t synthetic = 0; // trace entries resync() added (not in `applied`)
    // Gaps, losses and misfits since the last state or resync(): while > 0 the Recorder's state may differ from
    // the agent's.
    uint64_t unsynced = 0;
    bool resyncNeeded() const { return unsynced > 0; }
};

// Why resync() is called, and what the caller (client::AgentClient) saw missing: it goes into the stats and the
// annotation's name.
struct ResyncReason {
    enum class Kind : uint8_t {
        Gap, // records were not received (a sequence jump) or the agent dropped some (`lost`): same job
        Restart, // the job restarted (another pid, or its sequence went back): a new allocator from scratch
    };
    Kind kind = Kind::Gap;
    uint64_t gaps = 0; // sequence jumps seen before the fresh state
    uint64_t missing = 0; // records those jumps skipped
    uint64_t lost = 0; // Σ EventRecord::lost of the records the fresh state covers
    // CLOCK_REALTIME ns no earlier than the fresh state was taken (the first record after it, or when its reply
    // arrived); 0: the time of the last applied record. The synthetic entries get it (never earlier than the
    // last entry, so the trace stays in time order).
    uint64_t timeNs = 0;
};

// What a memscope recording says of itself under the snapshot's top-level key "memscope_recording" (PyTorch's
// readers ignore unknown keys): where it came from and what it missed. `memscope-cli record` and the app's Save
// write it; `memscope-cli info` reads it, so that a trace with a hole in it is never called complete.
struct RecordingInfo {
    std::string endpoint, host;
    std::string ended; // why the recording ended ("the job said goodbye", "interrupted", ...); may be empty
    int64_t pid = 0, devices = 0;
    uint64_t events = 0; // trace entries from the job's records (RecorderStats::applied)
    uint64_t lost = 0; // records the agent dropped
    uint64_t missing = 0, gaps = 0; // records never received, and the sequence jumps that skipped them
    uint64_t resyncs = 0, restarts = 0;
    int64_t part = 0; // the part of a bounded history (1, 2, ...); 0: not a part
    int64_t savedAtUs = 0; // CLOCK_REALTIME
    // No record between the first and the last received is missing, and the agent dropped none.
    bool complete() const { return lost == 0 && missing == 0 && gaps == 0; }
    // False when the recording ended because the job went quiet or away without a goodbye (which carries its last
    // sequence): then records after the last one received may be missing too. `record` writes these endings.
    bool endedWithTheJob() const
    {
        return ended != "the agent went silent" && ended != "the job's connection closed without a goodbye";
    }
};
// The key and its value, to append to a snapshot's topLevelExtras.
model::Extras recordingExtras(const RecordingInfo& info);
// The snapshot's "memscope_recording", or nothing (not a recording, or a key of another shape).
std::optional<RecordingInfo> recordingInfoOf(const model::Snapshot& snapshot);

class Recorder {
public:
    // Events of one batch, applied on the state in the order given, as client::AgentClient delivers them (above
    // the state's lastSequence, in sequence order; their `lost` counts and sequence jumps are not the Recorder's
    // to follow: addLost, addMissing). Before setState they are ignored: the client holds records until a state.
    void addEvents(std::span<const EventRecord> events);
    // The baseline (a decoded state reply; its records are copied). May be called again as long as no event has
    // been applied yet: a fresher state replaces a stale one (ZeroMQ's slow joiner, which the client detects).
    // Returns false (and changes nothing) once started().
    bool setState(const DecodedState& state);
    bool hasState() const { return m_hasState; }
    // True when an event has been applied on top of the state.
    bool started() const { return m_started; }
    // A stack definition (topic "S"): trace entries, blocks and segments whose stackId names it get its frames in
    // the snapshot. A definition may arrive after the events that use it; a second one for the same id replaces it.
    void addStackDef(const DecodedStackDef& def);
    // A named scope the job entered or left (topic "A"): an annotation of the snapshot (external_annotations) and
    // a note of the next delta. Any time, state or not.
    void addNote(const DecodedNote& note);
    // The allocator's settings (topic "C"): the snapshot's allocator_settings from now on (the last ones win).
    void setSettings(const DecodedSettings& settings);
    size_t stackCount() const { return m_stacks.size(); }
    // The agent said goodbye: records its total of dropped records (stats().agentLost). Records beyond the last
    // one received come through addMissing.
    void setGoodbye(const Goodbye& goodbye);
    // Records that never arrived and that no resync() carried (client::AgentClient's jumps over records it
    // delivered anyway, and the end of a run after its last record received): `gaps` jumps over `missing` records
    // in all, counted in stats(); the state may differ from the agent's.
    void addMissing(uint64_t gaps, uint64_t missing);
    // Records the agent dropped that no applied record and no resync() carried (client::AgentClient's count of
    // those it heard of but did not hand over): counted in stats().lost; the state may differ from the agent's.
    void addLost(uint64_t records);
    // Brings the Recorder to `fresh` (a state reply taken after the events applied so far, or a restarted job's
    // first state) after events were applied. Appends the synthetic entries model::EventTrace::resync makes (all at
    // the reason's time; a restart's removals at the last applied record's), which a Replay can undo and which leave
    // the free blocks' stale requests as `fresh` lists them. Adds an external annotation pair per device (START at
    // the last applied record's time, END at the resync's) named "memscope: resync after N missing records" or
    // "memscope: job restarted (pid P)", so a timeline shows where data is missing. Before any state this is
    // setState(). After a Restart, stack ids
    // name the new job's definitions (those sent from now on); entries before it keep the old job's frames.
    void resync(const DecodedState& fresh, const ResyncReason& reason);

    // Trace entries snapshot() would hold now (applied and synthetic, since the state or the last takeHistory()).
    size_t entryCount() const { return m_entries.size(); }

    const RecorderStats& stats() const { return m_stats; }
    uint64_t lastSequence() const { return m_lastSequence; }
    const Hello& hello() const { return m_hello; }

    // The snapshot: final segments (by device, then address) with blocks tiling each of them (active blocks and
    // inactive ones with their stale requests), device_traces with the applied events, external_annotations (the
    // job's notes, and a pair for each resync), allocator_settings as the agent sent them (empty without).
    // Entries, blocks and segments whose stack was defined carry its frames ({name, filename, line}, innermost first,
    // as PyTorch's C++ frames; "??" and 0 where the agent could not tell); the others have empty frames.
    model::Snapshot snapshot() const;

    // For viewers that grow a model of their own instead of copying snapshot() every time (the app's live view,
    // app/document/livedocument.h): joinSnapshot() is the state the first trace entry applies to (the first state
    // reply's, without entries), and takeDelta() hands over what was added since the previous call (since the
    // state, the first time): trace entries with what the agent knows beyond PyTorch's fields (block bytes,
    // pools), annotations, stack definitions and the allocator's settings. Stack ids in them are unique across job
    // restarts (the restart count in the high half), so the model may intern them as they come.
    // A trace entry: the engine's event (model/eventtrace.h), as applied (its size is PyTorch's trace size).
    using Entry = model::TraceEvent;
    using Note = viewer::Note; // (viewer/recordingbuilder.h)
    using StackFrame = viewer::StackFrame;
    struct Delta {
        std::vector<Entry> entries;
        std::vector<Note> notes;
        std::vector<std::pair<uint64_t, std::vector<StackFrame>>> stacks; // defined (or redefined) since
        // The allocator's settings (snapshot()'s allocator_settings), when they came since the previous take; a
        // model grown from deltas saves what snapshot() would.
        std::optional<model::Value> settings;
    };
    model::Snapshot joinSnapshot() const;
    void takeDelta(Delta& out);
    // false: takeDelta() hands the entries over for good (the taker keeps the history, e.g. bounded, as the app's
    // live view does), so the Recorder holds only the allocator state; snapshot() then has the entries not taken
    // yet, and joinSnapshot() the state they apply to. true (the default) keeps everything for snapshot().
    void setKeepTaken(bool keep) { m_keepTaken = keep; }

    using StackDefs = std::map<uint64_t, std::shared_ptr<const std::vector<StackFrame>>>; // by stackKey()
    // What snapshot() would hold now, taken out of the Recorder to be built elsewhere (a part of a bounded
    // recording, built and written on a thread of its own while the owner reads on). A value: it shares nothing
    // mutable with the Recorder, so its snapshot() may run on any thread, once the Recorder goes on.
    class History {
    public:
        // The snapshot the Recorder's snapshot() would have returned when the history was taken. Allocates; may
        // take seconds for millions of entries.
        model::Snapshot snapshot() const;
        size_t entryCount() const { return m_entries.size(); }

    private:
        friend class Recorder;
        std::shared_ptr<const model::EventTrace::Devices> m_devices; // the state when taken
        std::vector<Entry> m_entries;
        std::vector<Note> m_notes;
        StackDefs m_stacks; // the frames shared (immutable), the map copied
        model::Value m_settings;
        size_t m_deviceCount = 0; // Hello::deviceCount
    };
    // Hands over the trace entries and notes so far with what building their snapshot needs, and forgets them:
    // snapshot() from now on starts at the current state and holds only what follows. Stack definitions, statistics
    // and the allocator state stay. Costs the owner a copy of the allocator state and of the stack map's keys (the
    // frames are shared), never the snapshot: the entries are moved.
    History takeHistory();

private:
    // A wire stack id made unique across job restarts: the restart count in the high half (0 stays "none").
    uint64_t stackKey(uint32_t wireId) const { return wireId == 0 ? 0 : (uint64_t(m_epoch) << 32) | wireId; }
    // The allocator state a state reply lists (records that do not fit it are counted as inconsistent).
    model::EventTrace::Devices loadState(const DecodedState& state);
    static model::Snapshot build(const model::EventTrace::Devices& devices, std::span<const Entry> entries,
                                 std::span<const Note> notes, const StackDefs& stacks, const model::Value& settings,
                                 size_t deviceCount);
    void apply(const EventRecord& e);

    bool m_hasState = false;
    bool m_started = false;
    Hello m_hello {};
    uint64_t m_lastSequence = 0; // of the last record applied (or the state's)
    model::EventTrace m_trace; // the allocator's state, events applied and resyncs synthesised by the one engine
    std::vector<Entry> m_entries;
    // The state the first entry applies to (joinSnapshot); shared with the History taken there, never changed.
    std::shared_ptr<const model::EventTrace::Devices> m_joinDevices
        = std::make_shared<const model::EventTrace::Devices>();
    size_t m_deltaEntries = 0, m_deltaNotes = 0; // taken by takeDelta so far
    std::vector<uint64_t> m_newStacks; // stack keys defined since the last takeDelta
    bool m_keepTaken = true;
    std::vector<Note> m_notes; // external annotations: the job's notes and the resyncs
    model::Value m_settings = [] {
        model::Value v;
        v.kind = model::Value::Kind::Dict;
        return v;
    }(); // allocator_settings: empty until the agent sends them
    bool m_newSettings = false; // since the last takeDelta
    uint32_t m_epoch = 0; // job restarts seen
    uint64_t m_lastTimeNs = 0; // of the last applied record (heartbeats included)
    StackDefs m_stacks;
    RecorderStats m_stats;
};

} // namespace memscope::viewer
