// RecordingBuilder: the one way a recording becomes a snapshot in PyTorch's format. Both paths use it: the
// Recorder's snapshot() (`memscope-cli record`, built in one go from its entries) and the app's live document (built
// entry by entry as the job runs; its Save, triggers and bounded-history parts). It owns what a recorded snapshot
// must look like for every tool to open it as PyTorch's own: the source's stack ids turned into the snapshot's
// interned frames, an event turned into a trace entry (with "N/A" for the compile context PyTorch writes when there
// is none), notes turned into external annotations, address versions and stream numbers by the one rule
// (model::TraceNumbering), and the final segments and blocks written from an allocator state (model::EventTrace's,
// free blocks with the stale requests PyTorch leaves on them). Plain C++, no Qt, no ZeroMQ; not thread-safe: one
// owner, who also owns the snapshot it builds into.
#pragma once

#include "model/eventtrace.h"
#include "model/snapshot.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace memscope::viewer {

// A frame of a stack definition as the agent sends it (topic "S").
struct StackFrame {
    std::string name, file;
    int32_t line = 0;
};

// A named scope entered or left (topic "A"), or a range a viewer marks itself (a resync, a gap): an annotation.
struct Note {
    model::Annotation::Stage stage;
    int32_t device;
    uint64_t timeUs;
    std::string name;
};

class RecordingBuilder {
public:
    // Builds into `out` (which must outlive the builder and not move): its tables may already hold a state, whose
    // streams are numbered first (a live document's join state). Raw stream 0 is number 0 (Snapshot::streams).
    explicit RecordingBuilder(model::Snapshot& out);
    RecordingBuilder(const RecordingBuilder&) = delete;
    RecordingBuilder& operator=(const RecordingBuilder&) = delete;

    // The frames of the source's stack `id` (0: none), innermost first; a second definition replaces the first.
    void defineStack(uint64_t id, std::span<const StackFrame> frames);
    bool hasStack(uint64_t id) const { return m_stacks.contains(id); }
    // The snapshot's stack for the source's `id` (EmptyStack: 0, or not defined).
    model::StackId stack(uint64_t id) const;
    // Stack `id` of another snapshot, interned into this one's tables.
    model::StackId copyStack(const model::Snapshot& from, model::StackId id);
    // Every stack `from` defined, under the same source ids (a document that continues another).
    void adoptStacks(const RecordingBuilder& from);
    // The segments and blocks of `state` (another snapshot's: the state a live recording joined at), with their
    // stacks interned here, its streams (numbered) and allocator settings, as this snapshot's own; its trace is not
    // copied. Before any entry.
    void copyState(const model::Snapshot& state);
    // Address versions and streams go on from `previous` (a document that continues another's trace).
    void continueNumbering(const RecordingBuilder& previous) { m_numbering = previous.m_numbering; }

    // The trace entry of `event` (as model::EventTrace::apply left it: its size is PyTorch's trace size), numbered:
    // called once per entry, in trace order; a stream seen for the first time is appended to the snapshot's streams.
    model::TraceEntry entry(const model::TraceEvent& event);
    // The note as an external annotation of the snapshot.
    void annotate(const Note& note);

    // How writeState reads the stack ids of a state.
    enum class StackKeys : uint8_t {
        Source, // the source's ids, as defineStack named them
        Snapshot, // this snapshot's own StackIds (a state from EventTrace::deviceOf of a replay over it)
    };
    // Appends to `out` (this builder's snapshot, or a copy of it with the same string ids) the final segments
    // (by device, then address) of `devices`, with blocks tiling each segment: active blocks, and free ones with
    // the request PyTorch leaves on each (space no free block covers, only after inconsistent events, as free
    // blocks of no known request). Segments and blocks carry the versions the trace so far leaves them (nothing
    // moves on); their new streams are appended to out's streams.
    void writeState(const model::EventTrace::Devices& devices, StackKeys keys, model::Snapshot& out) const;

private:
    model::Snapshot& m_out;
    std::unique_ptr<model::StackInterner> m_interner;
    std::unordered_map<uint64_t, model::StackId> m_stacks; // source id -> the snapshot's
    model::TraceNumbering m_numbering;
    model::StringId m_noContext, m_start, m_end;
};

} // namespace memscope::viewer
