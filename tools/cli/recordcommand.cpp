// The `record` command (recordcommand.h): the ZeroMQ client of the Clone pattern (ZeroMQ Guide, chapter 5). One
// SUB socket on the agent's PUB endpoint (topics "E", "G" and "S") is connected first, so no event published after the
// state is taken can be missed, then one DEALER asks the ROUTER for the state; events that arrive meanwhile are
// buffered by the wire::Recorder, which applies only those newer than the state. Single-threaded: this thread
// owns both sockets.
#include "recordcommand.h"

#include "io/snapshotio.h"
#include "wire/decoder.h"
#include "wire/recorder.h"

#include <zmq.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string_view>

namespace memscope {

namespace {

using Clock = std::chrono::steady_clock;

// How long the agent may stay silent (no event, no heartbeat) before it counts as gone: the agent sends a
// heartbeat at least once a second (docs/protocol.md).
constexpr std::chrono::milliseconds SilenceLimit { 2000 };

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void onSigint(int) { g_interrupted = 1; }

struct Options {
    std::string endpoint;
    std::string output;
    double duration = 0; // seconds; 0: no limit
    uint64_t events = 0; // 0: no limit
    double timeout = 5; // seconds to wait for the agent's state reply
};

bool parseNumber(const std::string& text, double& out)
{
    char* end = nullptr;
    out = std::strtod(text.c_str(), &end);
    return !text.empty() && end && *end == '\0' && out > 0 && out < 1e9;
}

std::span<const uint8_t> bytesOf(const zmq::message_t& m) { return { m.data<uint8_t>(), m.size() }; }

} // namespace

std::string stateEndpointFor(const std::string& endpoint)
{
    constexpr std::string_view Ipc = "ipc://", Tcp = "tcp://";
    if (endpoint.starts_with(Ipc) && endpoint.size() > Ipc.size())
        return endpoint + "-state";
    if (endpoint.starts_with(Tcp)) {
        const size_t colon = endpoint.rfind(':');
        if (colon == std::string::npos || colon < Tcp.size() || colon + 1 >= endpoint.size())
            return {};
        const std::string port = endpoint.substr(colon + 1);
        char* end = nullptr;
        const long value = std::strtol(port.c_str(), &end, 10);
        if (*end != '\0' || value <= 0 || value >= 65535)
            return {};
        return endpoint.substr(0, colon + 1) + std::to_string(value + 1);
    }
    return {};
}

int runRecord(const std::vector<std::string>& args) { return runRecord(args, stdout, stderr); }

int runRecord(const std::vector<std::string>& args, std::FILE* out, std::FILE* err)
{
    auto usage = [&](const std::string& message) {
        std::fprintf(err,
                     "memscope-cli: %s\nusage: memscope-cli record ENDPOINT -o FILE [--duration S] [--events N] "
                     "[--timeout S]\n",
                     message.c_str());
        return 2;
    };
    Options o;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&](std::string& v) {
            if (i + 1 >= args.size())
                return false;
            v = args[++i];
            return true;
        };
        std::string v;
        if (a == "-o" || a == "--output") {
            if (!value(o.output) || o.output.empty())
                return usage("-o needs a FILE");
        } else if (a == "--duration") {
            if (!value(v) || !parseNumber(v, o.duration))
                return usage("--duration needs a positive number of seconds");
        } else if (a == "--timeout") {
            if (!value(v) || !parseNumber(v, o.timeout))
                return usage("--timeout needs a positive number of seconds");
        } else if (a == "--events") {
            double n = 0;
            if (!value(v) || !parseNumber(v, n) || n != double(uint64_t(n)))
                return usage("--events needs a positive whole number");
            o.events = uint64_t(n);
        } else if (a.size() > 1 && a[0] == '-') {
            return usage("unknown option '" + a + "' for 'record'");
        } else if (o.endpoint.empty()) {
            o.endpoint = a;
        } else {
            return usage("'record' takes one ENDPOINT, got '" + o.endpoint + "' and '" + a + "'");
        }
    }
    if (o.endpoint.empty())
        return usage("'record' needs an ENDPOINT (the job's MEMSCOPE_ENDPOINT, e.g. ipc:///tmp/memscope)");
    if (o.output.empty())
        return usage("'record' needs -o FILE");
    const std::string stateEndpoint = stateEndpointFor(o.endpoint);
    if (stateEndpoint.empty())
        return usage("'" + o.endpoint + "' is not an ipc:// or tcp://HOST:PORT endpoint");

    wire::Recorder recorder;
    const char* stopReason = "";
    bool silent = false, goodbye = false;
    uint64_t badFrames = 0;
    try {
        zmq::context_t context(1);
        zmq::socket_t sub(context, zmq::socket_type::sub);
        sub.set(zmq::sockopt::linger, 0);
        sub.set(zmq::sockopt::subscribe, wire::EventsTopic);
        sub.set(zmq::sockopt::subscribe, wire::GoodbyeTopic);
        sub.set(zmq::sockopt::subscribe, wire::StacksTopic); // stack definitions (MEMSCOPE_STACKS=N in the job)
        sub.connect(o.endpoint);
        zmq::socket_t dealer(context, zmq::socket_type::dealer);
        dealer.set(zmq::sockopt::linger, 0);
        dealer.connect(stateEndpoint);
        auto requestState = [&] {
            const std::vector<uint8_t> request = wire::encodeRequest(wire::RequestType::State);
            (void)dealer.send(zmq::buffer(request), zmq::send_flags::dontwait);
        };
        requestState();
        bool freshRequested = false;

        g_interrupted = 0;
        struct sigaction action {}, previous {};
        action.sa_handler = onSigint;
        sigemptyset(&action.sa_mask);
        ::sigaction(SIGINT, &action, &previous);
        struct Restore {
            struct sigaction* previous;
            ~Restore() { ::sigaction(SIGINT, previous, nullptr); }
        } restore { &previous };

        const Clock::time_point start = Clock::now();
        Clock::time_point lastHeard = start;
        bool heardAnything = false;
        const auto answerTimeout = std::chrono::duration<double>(o.timeout);
        const auto durationLimit = std::chrono::duration<double>(o.duration);
        for (;;) {
            if (g_interrupted) {
                stopReason = "interrupted";
                break;
            }
            const Clock::time_point now = Clock::now();
            if (o.duration > 0 && now - start >= durationLimit) {
                stopReason = "duration reached";
                break;
            }
            if (!recorder.hasState() && now - start >= answerTimeout) {
                if (!heardAnything)
                    std::fprintf(err, "memscope-cli: %s: no memscope agent answered (is the job running?)\n",
                                 o.endpoint.c_str());
                else
                    std::fprintf(err, "memscope-cli: %s: the agent publishes events but did not answer the state "
                                      "request on %s\n",
                                 o.endpoint.c_str(), stateEndpoint.c_str());
                return 1;
            }
            if (recorder.hasState() && now - lastHeard >= SilenceLimit) {
                silent = true;
                stopReason = "the agent went silent";
                break;
            }

            zmq::pollitem_t items[] = { { sub.handle(), 0, ZMQ_POLLIN, 0 }, { dealer.handle(), 0, ZMQ_POLLIN, 0 } };
            zmq::poll(items, 2, std::chrono::milliseconds(50));

            if (items[1].revents & ZMQ_POLLIN) {
                // The ROUTER's reply: the state in the last frame (an empty delimiter frame may precede it).
                zmq::message_t frame;
                while (dealer.recv(frame, zmq::recv_flags::dontwait) && frame.more()) { }
                const wire::DecodedState state = wire::decodeState(bytesOf(frame));
                if (!state.ok()) {
                    std::fprintf(err, "memscope-cli: %s\n", state.error.toString(stateEndpoint).c_str());
                    return 1;
                }
                heardAnything = true;
                lastHeard = Clock::now();
                recorder.setState(state);
                freshRequested = false;
            }
            while (items[0].revents & ZMQ_POLLIN) {
                zmq::message_t topic, body;
                if (!sub.recv(topic, zmq::recv_flags::dontwait))
                    break;
                const bool hasBody = topic.more() && sub.recv(body, zmq::recv_flags::dontwait);
                while (body.more()) { // drop unexpected extra frames of one message
                    zmq::message_t extra;
                    if (!sub.recv(extra, zmq::recv_flags::dontwait))
                        break;
                    body = std::move(extra);
                }
                heardAnything = true;
                lastHeard = Clock::now();
                const std::string_view name(topic.data<char>(), topic.size());
                if (hasBody && name == wire::EventsTopic) {
                    const wire::DecodedBatch batch = wire::decodeBatch(bytesOf(body));
                    if (!batch.ok()) {
                        if (batch.error.code == wire::DecodeErrorCode::TooNew
                            || batch.error.code == wire::DecodeErrorCode::BadMagic) {
                            std::fprintf(err, "memscope-cli: %s\n", batch.error.toString(o.endpoint).c_str());
                            return 1;
                        }
                        if (badFrames++ == 0)
                            std::fprintf(err, "memscope-cli: warning: %s (skipped)\n",
                                         batch.error.toString(o.endpoint).c_str());
                        continue;
                    }
                    recorder.addEvents(batch.events);
                } else if (hasBody && name == wire::StacksTopic) {
                    const wire::DecodedStackDef def = wire::decodeStackDef(bytesOf(body));
                    if (def.ok())
                        recorder.addStackDef(def);
                    else if (badFrames++ == 0)
                        std::fprintf(err, "memscope-cli: warning: %s (skipped)\n",
                                     def.error.toString(o.endpoint).c_str());
                } else if (hasBody && name == wire::GoodbyeTopic) {
                    const wire::DecodedGoodbye bye = wire::decodeGoodbye(bytesOf(body));
                    if (bye.ok())
                        recorder.setGoodbye(bye.goodbye);
                    goodbye = true;
                    break;
                } else if (badFrames++ == 0) {
                    std::fprintf(err, "memscope-cli: warning: %s: unexpected message on topic '%.*s' (skipped)\n",
                                 o.endpoint.c_str(), int(std::min<size_t>(name.size(), 16)), name.data());
                }
                if (o.events > 0 && recorder.stats().applied >= o.events)
                    break;
            }
            if (goodbye) {
                if (!recorder.hasState()) {
                    std::fprintf(err, "memscope-cli: %s: the job exited before answering the state request\n",
                                 o.endpoint.c_str());
                    return 1;
                }
                stopReason = "the job said goodbye";
                break;
            }
            if (o.events > 0 && recorder.stats().applied >= o.events) {
                stopReason = "event limit reached";
                break;
            }
            if (recorder.needsFreshState() && !freshRequested) {
                requestState(); // the subscription started late: ask for a state that includes what we missed
                freshRequested = true;
            }
        }
        if (!recorder.hasState()) {
            std::fprintf(err, "memscope-cli: %s: interrupted before the agent answered\n", o.endpoint.c_str());
            return 1;
        }
    } catch (const zmq::error_t& e) {
        std::fprintf(err, "memscope-cli: %s: %s\n", o.endpoint.c_str(), e.what());
        return 1;
    }

    if (silent)
        std::fprintf(err,
                     "memscope-cli: warning: %s: the agent went silent (no goodbye, nothing for %lld s); keeping "
                     "what was received\n",
                     o.endpoint.c_str(), static_cast<long long>(SilenceLimit.count() / 1000));
    const wire::RecorderStats& st = recorder.stats();
    if (st.resyncNeeded())
        std::fprintf(err,
                     "memscope-cli: warning: %s: the recording missed allocator events (%llu lost by the agent, %llu "
                     "sequence gaps, %llu events that did not fit); its trace is incomplete\n",
                     o.endpoint.c_str(), static_cast<unsigned long long>(st.lost),
                     static_cast<unsigned long long>(st.gaps), static_cast<unsigned long long>(st.inconsistent));

    const model::Snapshot snapshot = recorder.snapshot();
    if (io::Error e = io::saveSnapshot(snapshot, o.output)) {
        std::fprintf(err, "memscope-cli: %s\n", e.toString().c_str());
        return 1;
    }
    const wire::Hello& hello = recorder.hello();
    std::fprintf(out,
                 "%s: %llu events from pid %u on %s (%s), %zu segments; lost %llu, gaps %llu (%llu missing), "
                 "inconsistent %llu%s; wrote %s\n",
                 o.endpoint.c_str(), static_cast<unsigned long long>(st.applied), hello.pid, hello.host, stopReason,
                 snapshot.segments.size(), static_cast<unsigned long long>(st.lost),
                 static_cast<unsigned long long>(st.gaps), static_cast<unsigned long long>(st.missing),
                 static_cast<unsigned long long>(st.inconsistent), st.resyncNeeded() ? ", resync needed" : "",
                 o.output.c_str());
    std::fflush(out);
    return 0;
}

} // namespace memscope
