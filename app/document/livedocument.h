// LiveDocument: the Document of a running job, grown in place as its events arrive, so that a live tab costs the
// new events plus the live state per refresh instead of a rebuild of everything recorded so far.
//
// It starts from the allocator's state when the viewer joined (a Snapshot with segments and blocks and no trace)
// and appends the Recorder's deltas as they are (viewer::Recorder::Delta: its entries, notes and stack definitions,
// queued by reference, never copied into a type of our own): entries go to the snapshot's device traces and to each
// device's Replay through a model::ReplayExtender. Stacks arrive as the agent's definitions. Entries, stacks, notes,
// numbering and the final state a save writes are the one recording writer's (viewer::RecordingBuilder), which
// viewer::Recorder::snapshot() uses too, so a recording saved from the app and one `memscope-cli record` wrote are
// the same file.
//
// Threads: a LiveDocument and everything it grows belong to the GUI thread. Views read the Document between
// events as they read a file's; work that reads it on another thread (a call tree job, an event filter job) holds
// Document::readLock() while it runs, and flush() never waits for such a reader: it applies nothing and leaves the
// entries queued for the next flush (the GUI thread never blocks on a job).
#pragma once

#include "model/eventtrace.h"
#include "model/replayextender.h"
#include "document/session.h"
#include "viewer/recorder.h"
#include "viewer/recordingbuilder.h"

#include <QString>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memscope::app {

class LiveDocument {
public:
    // What the document grows by: the Recorder's own types. An entry is a trace entry (PyTorch's fields, the
    // address, size, stream and time as the agent's unsigned 64-bit values) plus what the agent knows beyond them
    // (the block's bytes, the segment's pool); its stack is the agent's id (0: none), unique across restarts.
    using Delta = viewer::Recorder::Delta;
    using Entry = model::TraceEvent; // the Recorder's entries and the engine's events: one type
    using StackFrame = viewer::StackFrame;

    // `initial`: the state when the viewer joined (its segments and blocks, with their stacks; its traces are
    // ignored). `deviceCount`: the job's devices (the agent's Hello); at least those `initial` has. Entries of a
    // device beyond it are dropped and counted. The document's snapshot keeps this state as its segments and
    // blocks: the replays know every later state (viewer::Recorder::snapshot() is the recording as a file).
    LiveDocument(QString path, const model::Snapshot& initial, int deviceCount);
    // Continues `previous` after its finish() (a bounded history rotates to a new document): the new join state is
    // its final state; its stack definitions, its address versions and what it still had queued carry over.
    LiveDocument(QString path, LiveDocument& previous);

    // The history extended backwards: a new document that starts with `earlier` (a snapshot of the same job taken
    // before `current` joined: an agent's dump, a recording, PyTorch's own snapshot), from the state at its first
    // trace entry through its trace, then a bridge of synthetic entries from its final state to `current`'s join
    // state (what happened in between is unknown: marked with a "memscope: no record between ..." annotation), then
    // every entry of `current`. `current`'s stack definitions and queue carry over; `current` must not be used
    // afterwards. O(entries of both). `earlierName` names the file in the annotation.
    static std::unique_ptr<LiveDocument> prepend(const model::Snapshot& earlier, const QString& earlierName,
                                                 LiveDocument& current);

    std::shared_ptr<const Document> document() const { return m_document; }

    // Queues a delta of the Recorder (viewer::Recorder::takeDelta), in order: its stack definitions (later entries
    // naming an id get its frames, innermost first), its notes (each one end of a named range, e.g. "memscope:
    // resync after 120 missing records", as record_function's START and END annotations), the allocator's settings
    // (the snapshot's allocator_settings, so that a save holds what `memscope-cli record` writes) and its entries.
    // Nothing is copied: the document holds the delta until its entries are applied. Its stack definitions and
    // settings take effect at the next flush(); its notes and entries in the order queued: its notes once every entry
    // queued before it is applied, before its own entries (a flood's backlog of notes applied at once would lie past
    // the trace's end, and each growth would place them all again: model::AnnotationTracker).
    void append(std::shared_ptr<const Delta> delta);
    // The same for one part of a delta.
    void defineStack(uint64_t agentId, std::vector<StackFrame> frames);
    void annotate(int device, model::Annotation::Stage stage, std::string name, int64_t timeUs);
    void append(std::vector<Entry> entries);
    // Applies what was queued (at most `maxEntries` entries, so that the caller can keep its event loop turning)
    // unless a reader holds the document; the number of entries applied (0 when busy).
    size_t flush(size_t maxEntries = SIZE_MAX);
    size_t queued() const { return m_queued; }
    uint64_t dropped() const { return m_dropped; } // entries of devices beyond deviceCount

    // Memory held by the history (traces and replays), for a bound on it.
    size_t memoryBytes() const;
    // The whole recording as a file holds it (PyTorch's format: segments and blocks of the state after the last
    // entry applied, every trace entry, annotations): a copy, O(entries); the document goes on growing.
    std::shared_ptr<model::Snapshot> copySnapshot() const;
    // The same without a copy, for a document that is done (rotated out): its snapshot's segments and blocks become
    // the final state, `topLevel` its unknown top-level keys (a recording's own, e.g.). Nothing may be appended
    // afterwards.
    std::shared_ptr<const model::Snapshot> finish(model::Extras topLevel = {});

    // Whether flush() has anything to apply.
    bool hasPending() const { return !m_queue.empty() || !m_pendingDefinitions.empty(); }

private:
    // What of one delta is still to apply: its notes unless applied, and delta->entries from `begin` on.
    struct Batch {
        std::shared_ptr<const Delta> delta;
        size_t begin = 0;
        bool notesApplied = false;
        bool own = false; // made by annotate(), which adds to it while it is the last one and its notes wait
    };
    Delta& ownDefinitions(); // a pending delta of this document's own, for defineStack
    Delta& ownNotes(); // a queued delta of this document's own, for annotate
    void applyDefinitions();
    void adoptStacksAndQueue(LiveDocument& from); // the agent's stack definitions (by content) and the queue
    // Defines every stack of `s` under `base | id` and appends the entries of `replay` (over s's trace) with them.
    void appendReplayed(const model::Snapshot& s, const model::Replay& replay, uint64_t base);
    // Segments and blocks of every device's state after its last entry, into `out` (whose tables are this
    // document's or a copy with the same ids).
    void writeFinalState(model::Snapshot& out) const;

    std::shared_ptr<Document> m_document;
    std::shared_ptr<model::Snapshot> m_snapshot; // == m_document->snapshot
    // Stacks by agent id, entries, notes, numbering and the final state, as the Recorder writes them.
    std::unique_ptr<viewer::RecordingBuilder> m_builder;
    std::vector<model::ReplayExtender> m_extenders; // per device
    std::vector<std::shared_ptr<const Delta>> m_pendingDefinitions; // deltas whose stacks and settings are not applied
    Delta* m_ownDefinitions = nullptr; // the one defineStack adds to, while it is the last pending
    std::deque<Batch> m_queue; // notes and entries, by delta as appended
    size_t m_queued = 0;
    std::vector<model::TraceEntry> m_entryScratch;
    std::vector<model::EntryDetail> m_detailScratch;
    uint64_t m_dropped = 0;
};

} // namespace memscope::app
