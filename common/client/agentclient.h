// AgentClient: the viewer side of one agent endpoint (docs/protocol.md), the Clone pattern of the ZeroMQ Guide
// (chapter 5) with its resynchronisation and reconnection. It owns a SUB socket (topics "E", "S", "G") and a
// DEALER socket (state requests) and decodes every frame (viewer/decoder.h); what it learns goes to a Listener, in
// order, on the thread that calls poll():
//
// - onState: the agent's state. `Initial` for the first one (and, as long as no event has been delivered since,
//   a fresher one that replaces it: ZeroMQ's slow joiner); `Resync` after a sequence jump or a record with
//   lost > 0 (the client asked for it itself); `Restarted` when a job answers after a goodbye or silence with
//   another pid or a lower lastSequence. With a StateChange::reason for viewer::Recorder::resync().
// - onEvents: records, each exactly once, in sequence order, only those newer than the applied state, without
//   jumps (a record after a jump or with lost > 0 waits, with everything after it, for a fresh state; those newer
//   than it follow it). Heartbeats included. flush() is the one exception: see there.
// - onLost and onMissing: what went missing that neither a delivered record nor a StateChange carries (flush(),
//   and the end of a job run at its goodbye). The client is the one place that follows sequences: a Listener
//   counts what it is told.
// - onStackDef, onGoodbye; onLink when the link changes (joining, live, resyncing, silent, gone); onError with one
//   line naming the endpoint and the reason.
//
// Fresh state requests are rate-limited (at most one outstanding; at most one per resyncInterval); each goes out on
// a new DEALER socket, so a reply to an abandoned request can never be taken for a newer one. After a goodbye or
// silenceLimit without any message (not even a heartbeat) the client keeps what it has and keeps listening:
// libzmq reconnects the SUB by itself (an ipc path that reappears, a tcp port that answers again), and the first
// message heard then makes it ask who is there.
//
// One thread owns an AgentClient (and its sockets) from start() to destruction; it must not be shared. No Qt.
#pragma once

#include "viewer/decoder.h"
#include "viewer/recorder.h"
#include "wire/protocol.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::client {

struct ClientOptions {
    std::string endpoint; // the job's MEMSCOPE_ENDPOINT: ipc://PATH or tcp://HOST:PORT
    // No state reply this long after start(): onError(NoAnswer) (once; the client keeps asking).
    std::chrono::milliseconds answerTimeout { 5000 };
    // The agent heartbeats at least once a second (docs/protocol.md): this long without any message is silence.
    std::chrono::milliseconds silenceLimit { 2000 };
    // At most one fresh state request per this (a flood with losses must not turn into a flood of states).
    std::chrono::milliseconds resyncInterval { 250 };
    // An unanswered state request is sent again (on a new DEALER) after this.
    std::chrono::milliseconds retryInterval { 1000 };
    // Records held while waiting for a state; beyond it the oldest go (another resync follows).
    size_t maxBuffered = size_t(1) << 20;
    // CURVE (ZeroMQ RFC 26): both or neither. The agent's public key file and our own secret key file (our
    // public key is derived from it); wire/keyfile.h has the format.
    std::string curveServerKeyFile;
    std::string curveSecretKeyFile;
};

enum class StateKind : uint8_t { Initial, Resync, Restarted };

struct StateChange {
    StateKind kind = StateKind::Initial;
    viewer::ResyncReason reason; // for Resync and Restarted: what went missing, and when
    uint32_t previousPid = 0; // Restarted: the job before
};

enum class Link : uint8_t {
    Joining, // waiting for the first state
    Live, // in sync
    Resyncing, // a fresh state is on its way; records are held
    Silent, // nothing heard for silenceLimit (a hung or dead job); listening
    Gone, // the job said goodbye; listening for a restarted one
};

enum class ErrorKind : uint8_t {
    BadEndpoint, // wire::endpointProblem refuses it (neither ipc:///PATH nor tcp://HOST:PORT)
    Curve, // a key file is missing, malformed or too open, or libzmq has no CURVE
    NoAnswer, // no state reply within answerTimeout
    Incompatible, // a frame of another protocol or version (fatal: the client stops)
    Malformed, // a frame that does not decode (skipped; reported once per kind of frame)
    Socket, // a ZeroMQ call failed
    Untrusted, // an ipc:// socket another user owns (someone else's job, or one pretending to be ours; fatal)
};

struct ClientError {
    ErrorKind kind = ErrorKind::Socket;
    bool fatal = false; // the client stopped (failed() is true)
    std::string message; // "ENDPOINT: reason", one line
};

struct ClientStats {
    uint64_t stateRequests = 0;
    uint64_t messages = 0; // received on the SUB socket
    uint64_t states = 0; // replies received
    uint64_t resyncs = 0; // states delivered as Resync or Restarted
    uint64_t restarts = 0; // as Restarted
    uint64_t stale = 0; // records dropped because the applied state already holds them
    uint64_t malformed = 0; // frames skipped
    uint64_t dropped = 0; // held records dropped at maxBuffered
    uint64_t unknownTopics = 0; // messages on a topic of a newer agent, skipped
    uint64_t stacksRequests = 0; // Request{Stacks} sent (a state taken before our subscription was in effect)
};

// Callbacks, on the thread that calls AgentClient::poll(); they must not call back into the client. Spans and
// decoded views are valid only during the call.
class Listener {
public:
    virtual ~Listener() = default;
    virtual void onState(const viewer::DecodedState& state, const StateChange& change) = 0;
    virtual void onEvents(std::span<const wire::EventRecord> events) = 0;
    virtual void onStackDef(const viewer::DecodedStackDef&) { }
    virtual void onNote(const viewer::DecodedNote&) { } // a named scope entered or left (topic "A")
    virtual void onSettings(const viewer::DecodedSettings&) { } // the allocator's settings (topic "C")
    // Records the agent dropped (EventRecord::lost) that reach the listener neither on a delivered record nor in
    // a StateChange's reason (flush() at the end of a wait that no state ended). Every loss is reported exactly
    // once over the three.
    virtual void onLost(uint64_t /*records*/) { }
    // Records that never arrived and that no StateChange's reason counts: the sequence jumps among the records
    // flush() delivers, and at a goodbye, the records between the last one delivered (or the state's) and the
    // goodbye's lastSequence. `gaps` jumps skipped `missing` records in all.
    virtual void onMissing(uint64_t /*gaps*/, uint64_t /*missing*/) { }
    virtual void onGoodbye(const wire::Goodbye&) { }
    virtual void onSilence(std::chrono::milliseconds /*quiet*/) { }
    virtual void onLink(Link) { }
    virtual void onError(const ClientError&) { }
};

// A Listener that records into a viewer::Recorder (Initial: setState; Resync and Restarted: resync). Override the
// other callbacks (calling these ones' base versions is not needed: they only feed the Recorder).
class RecordingListener : public Listener {
public:
    void onState(const viewer::DecodedState& state, const StateChange& change) override;
    void onEvents(std::span<const wire::EventRecord> events) override { m_recorder.addEvents(events); }
    void onStackDef(const viewer::DecodedStackDef& def) override { m_recorder.addStackDef(def); }
    void onNote(const viewer::DecodedNote& note) override { m_recorder.addNote(note); }
    void onSettings(const viewer::DecodedSettings& settings) override { m_recorder.setSettings(settings); }
    void onGoodbye(const wire::Goodbye& goodbye) override { m_recorder.setGoodbye(goodbye); }
    void onLost(uint64_t records) override { m_recorder.addLost(records); }
    void onMissing(uint64_t gaps, uint64_t missing) override { m_recorder.addMissing(gaps, missing); }
    viewer::Recorder& recorder() { return m_recorder; }
    const viewer::Recorder& recorder() const { return m_recorder; }

private:
    viewer::Recorder m_recorder;
};

class AgentClient {
public:
    AgentClient(ClientOptions options, Listener& listener);
    ~AgentClient();
    AgentClient(const AgentClient&) = delete;
    AgentClient& operator=(const AgentClient&) = delete;

    // Checks the endpoint, loads the CURVE keys, connects the SUB (subscribed first, so nothing published after
    // the state is taken is missed) and the DEALER, and sends the first state request. False (after onError) when
    // it cannot start. Does not block on the network.
    bool start();
    // Waits up to `timeout` for messages, handles all that arrived (and the timers: silence, retries, the answer
    // timeout), calling the listener. Returns at once when failed().
    void poll(std::chrono::milliseconds timeout);
    // Delivers the records still held for a state that has not come (a recording ends while resyncing) as they
    // are: after a jump, or after the state they were held for never came. Only records newer than the last
    // delivered one, in order; the jumps among them go to onMissing, their losses to onLost. A viewer::Recorder
    // then applies what fits and counts the rest.
    void flush();

    Link link() const { return m_link; }
    bool failed() const { return m_failed; }
    bool hasState() const { return m_hasState; }
    // While Silent: whether the job closed the connection (it exited or was killed without a goodbye reaching
    // us), rather than keeping it open and saying nothing (hung, stopped, or a network gone quiet).
    bool silenceIsClosed() const { return m_link == Link::Silent && m_silenceClosed; }
    const ClientStats& stats() const { return m_stats; }
    const ClientOptions& options() const { return m_options; }
    const std::string& stateEndpoint() const { return m_stateEndpoint; }
    uint32_t pid() const { return m_pid; } // the agent's, from its last state
    uint64_t lastSequence() const { return m_applied; } // the last record delivered (or the state's)
    bool curve() const { return !m_serverKey.empty(); }

private:
    struct Sockets;
    struct Held { // a message held while waiting for a state, in arrival order
        std::vector<wire::EventRecord> events; // one batch
        std::vector<uint8_t> stackDef; // or one stack definition frame
    };
    struct HeldCheck {
        viewer::ResyncReason reason; // gaps, missing and lost among the held records up to the state
        bool clean = true; // no jump and no loss among them
        bool complete = false; // clean, and every record up to the state is here
        uint64_t firstAfterNs = 0; // the time of the first held record after the state
    };

    void fail(ErrorKind kind, const std::string& reason);
    void report(ErrorKind kind, const std::string& reason); // not fatal
    void malformed(int frameKind, const std::string& message); // reported once per frame kind
    void setLink(Link link);
    bool openDealer();
    void wantState(std::chrono::steady_clock::time_point now);
    void trySendRequest(std::chrono::steady_clock::time_point now);
    // Asks the agent for its stack definitions again once the subscription is in effect, when m_stacksWanted.
    void trySendStacksRequest();
    void askForGoodbye(); // Request{Goodbye} on the current DEALER
    // The run ended (a Goodbye on the SUB, or on the state connection): held records out, what never came counted.
    void endOfRun(const viewer::DecodedGoodbye& bye);
    void readMonitor();
    // Moves the silence and answer timers past time this client did not listen (poll's own overrun, the caller away).
    void notListened(std::chrono::steady_clock::time_point before, std::chrono::steady_clock::time_point after,
                     std::chrono::milliseconds timeout);
    void onSubMessage(std::string_view topic, bool hasBody, std::span<const uint8_t> body);
    void onBatch(std::span<const wire::EventRecord> events);
    void onStateReply(std::span<const uint8_t> frame);
    void settlePending(bool timedOut);
    void applyState(const viewer::DecodedState& state, StateChange change);
    HeldCheck checkHeld(uint64_t lastSequence) const;
    void account(std::span<const wire::EventRecord> events); // losses, once per record (m_seen)
    // Walks records in order from the applied sequence: delivers contiguous ones, drops stale ones, and on a jump,
    // a loss or a record of another job run holds the rest and asks for a state.
    void process(std::span<const wire::EventRecord> events);
    void deliver(std::vector<wire::EventRecord>& out);
    void hold(std::span<const wire::EventRecord> events);
    void releaseHeld();
    void timers(std::chrono::steady_clock::time_point now);
    std::string noAnswerMessage() const;

    ClientOptions m_options;
    Listener& m_listener;
    std::string m_stateEndpoint;
    std::string m_serverKey, m_secretKey, m_publicKey; // Z85; empty without CURVE
    std::unique_ptr<Sockets> m_sockets;

    Link m_link = Link::Joining;
    bool m_started = false;
    bool m_failed = false;
    bool m_hasState = false;
    bool m_deliveredSinceFirstState = false; // any record delivered since the first state (no more Initial)
    bool m_holding = false; // records wait in m_held for a state
    bool m_goodbye = false; // the job said goodbye (any state after it is a restart)
    bool m_stateWanted = false; // a state request is due (sent when the rate limit allows)
    bool m_requestOutstanding = false;
    bool m_noAnswerReported = false;
    bool m_silenceReported = false;
    bool m_silenceClosed = false;
    bool m_closedWithoutGoodbye = false; // the SUB's connection went down with no goodbye heard (until it is up again)
    std::chrono::steady_clock::time_point m_lastPollEnd {};
    // When this poll found the SUB empty (its return), else zero: silence is measured up to it (timers()).
    std::chrono::steady_clock::time_point m_quietAt {};
    static constexpr std::chrono::milliseconds DisconnectGrace { 200 };
    bool m_heardSub = false; // anything on the SUB socket since start()
    // A message arrived on the SUB socket since its connection (re)opened: its one subscription is in effect.
    bool m_subscribed = false;
    // The lowest sequence heard since the connection (re)opened: a state whose lastSequence is at least this was
    // taken, and its stack definitions sent again, after the subscription took effect (docs/protocol.md).
    uint64_t m_lowestHeard = UINT64_MAX;
    bool m_stacksWanted = false; // a state came that the definitions sent with it may have missed: Request{Stacks}
    uint32_t m_pid = 0;
    uint64_t m_applied = 0; // the last sequence delivered (or the last state's)
    uint64_t m_stateSequence = 0; // the last state's lastSequence
    uint64_t m_seen = 0; // the highest sequence heard from this job run (loss accounting)
    uint64_t m_unreportedLost = 0; // Σ lost of records heard, not yet in a reason, a delivery or onLost
    std::deque<Held> m_held;
    size_t m_heldRecords = 0;
    std::vector<uint8_t> m_pendingState; // a state reply waiting for records in flight (onStateReply)
    // The job's Goodbye as it came on the state connection, waiting for the events queued before it (timers()).
    std::optional<viewer::DecodedGoodbye> m_lateGoodbye;
    uint32_t m_reportedKinds = 0;
    std::chrono::steady_clock::time_point m_start, m_lastHeard, m_requestSent, m_lastRequest, m_pendingSince;
    ClientStats m_stats;
};

} // namespace memscope::client
