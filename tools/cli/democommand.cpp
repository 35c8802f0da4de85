// `memscope-cli demo`: see democommand.h. The workload imitates a training loop: parameters and optimizer state
// allocated once and kept; each step allocates activations in the forward pass (the large ones on the default
// stream, some on two side streams), frees them in reverse in the backward pass while gradients come and go,
// and with --leak keeps one small tensor per step that is never freed. Every allocation carries a few Python-like
// frames of the call site a real job would show (train.py -> model.py -> torch), published as the agent publishes
// stacks (topic "S", docs/protocol.md) through Publisher::defineFrame / setThreadStack, so a newcomer without a GPU
// sees the call tree, the insights and the leak point at lines of a program.
#include "democommand.h"

#include "agent/allocator.h"
#include "agent/dump.h"
#include "agent/hostbackend.h"
#include "agent/publisher.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace memscope {

using namespace memscope::agent;

namespace {

    constexpr const char* DemoUsage
        = "usage: memscope-cli demo [--endpoint E] [--events N] [--rate N] [--leak] [--no-stacks] "
          "[--delay MS] [--linger MS]\n"
          "  --endpoint E  where to publish (default ipc://$XDG_RUNTIME_DIR/memscope-<pid>)\n"
          "  --events N    stop after about N allocator events (default 100000)\n"
          "  --rate N      at most N events per second (default 20000; 0: unlimited)\n"
          "  --leak        keep one small tensor per step (a leak to find)\n"
          "  --no-stacks   publish no call stacks (by default every allocation carries the Python-like frames of\n"
          "                its call site: train.py -> model.py -> torch)\n"
          "  --delay MS    wait before the first step, for viewers to connect (default 1000)\n"
          "  --linger MS   after the last step, stay (publishing heartbeats, answering state requests) this long\n"
          "                before saying goodbye (default 0)\n"
          "With MEMSCOPE_DUMP_ON=exit it writes its final state to MEMSCOPE_DUMP_PATH before saying goodbye, as an\n"
          "agent in a job does.\n";

    bool parseNumber(const std::string& text, unsigned long long& out)
    {
        char* end = nullptr;
        out = std::strtoull(text.c_str(), &end, 10);
        return !text.empty() && end && *end == '\0';
    }

    // The demo's program, as frames (innermost first). Made-up addresses name them (no code lives below 4096); the
    // files imitate a GPT training script and the PyTorch files its tensors come from.
    struct DemoFrame {
        const char* name;
        const char* file;
        int line;
    };
    constexpr DemoFrame Frames[] = {
        /* 0 */ { "<module>", "/workspace/gpt/train.py", 88 },
        /* 1 */ { "main", "/workspace/gpt/train.py", 78 },
        /* 2 */ { "train_step", "/workspace/gpt/train.py", 42 },
        /* 3 */ { "forward", "/workspace/gpt/model.py", 140 },
        /* 4 */ { "attention", "/workspace/gpt/model.py", 118 },
        /* 5 */ { "linear", "/usr/lib/python3/dist-packages/torch/nn/functional.py", 2138 },
        /* 6 */ { "mlp", "/workspace/gpt/model.py", 131 },
        /* 7 */ { "gelu", "/usr/lib/python3/dist-packages/torch/nn/functional.py", 1720 },
        /* 8 */ { "layer_norm", "/usr/lib/python3/dist-packages/torch/nn/functional.py", 2910 },
        /* 9 */ { "forward", "/workspace/gpt/model.py", 97 },
        /* 10 */ { "__next__", "/workspace/gpt/data.py", 33 },
        /* 11 */ { "train_step", "/workspace/gpt/train.py", 40 },
        /* 12 */ { "all_reduce_bucket", "/workspace/gpt/comm.py", 57 },
        /* 13 */ { "train_step", "/workspace/gpt/train.py", 49 },
        /* 14 */ { "_engine_run_backward", "/usr/lib/python3/dist-packages/torch/autograd/graph.py", 825 },
        /* 15 */ { "backward", "/usr/lib/python3/dist-packages/torch/_tensor.py", 626 },
        /* 16 */ { "train_step", "/workspace/gpt/train.py", 45 },
        /* 17 */ { "log_step", "/workspace/gpt/metrics.py", 23 },
        /* 18 */ { "train_step", "/workspace/gpt/train.py", 54 },
        /* 19 */ { "__init__", "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", 106 },
        /* 20 */ { "__init__", "/workspace/gpt/model.py", 61 },
        /* 21 */ { "main", "/workspace/gpt/train.py", 64 },
        /* 22 */ { "_init_group", "/usr/lib/python3/dist-packages/torch/optim/adamw.py", 118 },
        /* 23 */ { "step", "/usr/lib/python3/dist-packages/torch/optim/adamw.py", 205 },
        /* 24 */ { "train_step", "/workspace/gpt/train.py", 51 },
    };
    constexpr uintptr_t FrameAddress(size_t frame) { return 0x100 + frame * 0x10; }

    // One call site: its frames' addresses, innermost first.
    struct Site {
        uintptr_t frames[8];
        unsigned count;
    };
    constexpr Site site(std::initializer_list<size_t> frames)
    {
        Site s {};
        for (size_t f : frames)
            s.frames[s.count++] = FrameAddress(f);
        return s;
    }
    constexpr Site Parameters = site({ 19, 20, 21, 0 });
    constexpr Site OptimizerState = site({ 22, 23, 24, 1, 0 });
    constexpr Site Attention = site({ 5, 4, 3, 2, 1, 0 });
    constexpr Site Mlp = site({ 7, 6, 3, 2, 1, 0 });
    constexpr Site LayerNorm = site({ 8, 9, 3, 2, 1, 0 });
    constexpr Site Batch = site({ 10, 11, 1, 0 });
    constexpr Site Comms = site({ 12, 13, 1, 0 });
    constexpr Site Gradients = site({ 14, 15, 16, 1, 0 });
    constexpr Site Leak = site({ 17, 18, 1, 0 });

    void at(const Site& s) { Publisher::setThreadStack(s.frames, s.count); }

    struct Workload {
        CachingAllocator& allocator;
        std::vector<DevicePtr> kept;

        DevicePtr alloc(size_t bytes, uintptr_t stream)
        {
            const MallocResult r = allocator.malloc(0, bytes, StreamId { stream });
            return r.status == Status::Ok ? r.ptr : DevicePtr {};
        }
        void release(DevicePtr p)
        {
            if (raw(p))
                allocator.free(0, p);
        }
    };

} // namespace

int runDemo(const std::vector<std::string>& args)
{
    PublisherOptions options;
    unsigned long long events = 100000;
    unsigned long long rate = 20000;
    unsigned long long delayMs = 1000;
    unsigned long long lingerMs = 0;
    bool leak = false;
    bool stacks = true;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&](unsigned long long& out) { return i + 1 < args.size() && parseNumber(args[++i], out); };
        if (a == "--endpoint" && i + 1 < args.size()) {
            options.endpoint = args[++i];
        } else if (a == "--events") {
            if (!value(events))
                return std::fprintf(stderr, "memscope-cli demo: --events needs a number\n%s", DemoUsage), 2;
        } else if (a == "--rate") {
            if (!value(rate))
                return std::fprintf(stderr, "memscope-cli demo: --rate needs a number\n%s", DemoUsage), 2;
        } else if (a == "--delay") {
            if (!value(delayMs))
                return std::fprintf(stderr, "memscope-cli demo: --delay needs a number\n%s", DemoUsage), 2;
        } else if (a == "--linger") {
            if (!value(lingerMs))
                return std::fprintf(stderr, "memscope-cli demo: --linger needs a number\n%s", DemoUsage), 2;
        } else if (a == "--leak") {
            leak = true;
        } else if (a == "--no-stacks") {
            stacks = false;
        } else {
            std::fprintf(stderr, "memscope-cli demo: unexpected argument '%s'\n%s", a.c_str(), DemoUsage);
            return 2;
        }
    }

    HostBackend backend;
    CachingAllocator allocator(backend, AllocatorConfig {});
    if (stacks && options.stackDepth < 0)
        options.stackDepth = 16; // the demo's own frames (at()) stand in for native stacks
    Publisher publisher(allocator, options);
    for (size_t f = 0; f < std::size(Frames); ++f)
        publisher.defineFrame(FrameAddress(f), Frames[f].name, Frames[f].file, Frames[f].line);
    std::string error;
    if (!publisher.start(&error)) {
        std::fprintf(stderr, "memscope-cli demo: cannot publish: %s\n", error.c_str());
        return 1;
    }
    allocator.setTraceObserver(&publisher);
    std::printf("%s\n", publisher.endpoint().c_str());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));

    constexpr size_t MiB = size_t(1) << 20;
    Workload w { allocator, {} };
    // Parameters and Adam's two moments: kept for the whole run.
    for (int layer = 0; layer < 24; ++layer) {
        const size_t bytes = (layer % 4 == 0 ? 64 : 16) * MiB + size_t(layer) * 4096;
        for (int copy = 0; copy < 3; ++copy) {
            at(copy == 0 ? Parameters : OptimizerState);
            w.kept.push_back(w.alloc(bytes, 0));
        }
    }

    const auto start = std::chrono::steady_clock::now();
    unsigned long long step = 0;
    std::vector<DevicePtr> activations;
    while (publisher.recorded() < events) {
        // Each step a named scope, as a PyTorch job's record_function("step_N") (topic "A").
        const std::string stepName = "step_" + std::to_string(step);
        publisher.annotate(0, true, stepName);
        // Forward: activations, mostly on the default stream, some on two side streams (data loading, comms).
        for (int layer = 0; layer < 24; ++layer) {
            const uintptr_t stream = layer % 8 == 7 ? 2 : (layer % 5 == 4 ? 1 : 0);
            at(stream == 1 ? Batch : stream == 2 ? Comms : layer % 2 ? Mlp : Attention);
            activations.push_back(w.alloc(size_t(8 + (layer + step) % 5 * 4) * MiB, stream));
            at(stream == 0 ? LayerNorm : stream == 1 ? Batch : Comms);
            activations.push_back(w.alloc(size_t(4096 * (1 + layer % 16)), stream)); // small: the 2 MiB pool
        }
        // Backward: gradients appear while activations go, in reverse.
        std::vector<DevicePtr> grads;
        at(Gradients);
        while (!activations.empty()) {
            w.release(activations.back());
            activations.pop_back();
            if (activations.size() % 6 == 0)
                grads.push_back(w.alloc(16 * MiB, 0));
        }
        // Optimizer step: gradients consumed.
        at(OptimizerState);
        for (DevicePtr g : grads)
            w.release(g);
        if (leak) {
            at(Leak);
            w.kept.push_back(w.alloc(size_t(256) << 10, 0));
        }
        publisher.annotate(0, false, stepName);
        ++step;
        if (rate) {
            // Keep the published rate at or below --rate.
            const double due = double(publisher.recorded()) / double(rate);
            const auto dueAt = start + std::chrono::duration<double>(due);
            std::this_thread::sleep_until(std::chrono::time_point_cast<std::chrono::steady_clock::duration>(dueAt));
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The end of the job: its final state on disk first (MEMSCOPE_DUMP_ON=exit, as agentapi.cpp does at exit),
    // then a while for late viewers, then the goodbye.
    const DumpSettings dump = dumpSettingsFromEnvironment();
    if (dump.onExit) {
        std::string written, why;
        if (!dumpSnapshot(allocator, dump.path, &written, &why,
                          [&publisher](uint32_t stackId) { return publisher.stackFrames(stackId); }))
            std::fprintf(stderr, "memscope-cli demo: %s\n", why.c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(lingerMs));
    publisher.stop(2000);
    allocator.setTraceObserver(nullptr);
    Publisher::setThreadStack(nullptr, 0);
    std::fprintf(stderr, "memscope-cli demo: %llu steps, %llu events in %.2f s, %llu lost%s\n", step,
                 static_cast<unsigned long long>(publisher.lastPublished()), seconds,
                 static_cast<unsigned long long>(publisher.lost()), leak ? ", leaking 256 KiB per step" : "");
    return 0;
}

} // namespace memscope
