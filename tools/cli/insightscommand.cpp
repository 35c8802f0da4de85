// `memscope-cli insights`: see insightscommand.h.
#include "insightscommand.h"

#include "io/snapshotio.h"
#include "model/prefault.h"
#include "report/insights.h"

#include <cstdio>

namespace memscope {

using namespace memscope::model;

const char* const InsightsUsage = R"(usage: memscope-cli insights FILE... [--format text|json] [--top N]
       memscope-cli insights --diff A[@MOMENT] B[@MOMENT] [--format text|json] [--top N]

What a snapshot says at first sight, computed from its trace: the peak of allocated bytes and the call stacks that
hold it (with their share), fragmentation at the peak, every OOM explained (the memory there but in pieces, the
process's cap, or the device full; PyTorch's max_split_size_mb / expandable_segments advice where it applies), leak
suspects (stacks whose live bytes grow step over step across repeated record_function ranges such as step_N, or
blocks allocated late and never freed) and record_stream stalls. Each item names the entry to go to.
With --diff: what grew from A to B (@MOMENT as in `memscope-cli diff`: an index, end, peak, oom, an annotation).

options:
  --format text|json   text (default), or JSON {"format": "memscope-insights", "version": 1, "items": [...]}
  --top N              call stacks per list (default 5)
  --diff               A and B: insights of their diff
)";

namespace {

    DiffCommandOutput usage(const std::string& message)
    {
        DiffCommandOutput r;
        r.exitCode = 2;
        r.err = "memscope-cli: insights: " + message + "\n\n" + InsightsUsage;
        return r;
    }

} // namespace

DiffCommandOutput runInsightsCommand(const std::vector<std::string>& args, const DiffLoader& load)
{
    DiffCommandOutput r;
    bool json = false, diff = false;
    report::InsightOptions options;
    std::vector<std::string> files;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--format" || a.starts_with("--format=")) {
            std::string v;
            if (a == "--format") {
                if (i + 1 >= args.size())
                    return usage("--format needs a value: text or json");
                v = args[++i];
            } else {
                v = a.substr(9);
            }
            if (v != "text" && v != "json")
                return usage("unknown format '" + v + "': use text or json");
            json = v == "json";
        } else if (a == "--top") {
            if (i + 1 >= args.size())
                return usage("--top needs a number");
            const std::string& v = args[++i];
            if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos)
                return usage("--top needs a number, not '" + v + "'");
            options.topConsumers = options.maxLeaks = size_t(std::stoul(v));
        } else if (a == "--diff") {
            diff = true;
        } else if (a.size() > 1 && a[0] == '-') {
            return usage("unknown option '" + a + "'");
        } else {
            files.push_back(a);
        }
    }
    if (files.empty())
        return usage("needs a FILE");
    if (diff && files.size() != 2)
        return usage("--diff needs exactly two snapshots: A[@MOMENT] B[@MOMENT]");

    if (diff) {
        DiffSide sides[2];
        std::string paths[2];
        Moment moments[2];
        std::unique_ptr<Replay> replays[2];
        for (int i = 0; i < 2; ++i) {
            std::string error;
            if (!parseDiffSideSpec(files[size_t(i)], paths[i], moments[i], error))
                return usage(error);
            sides[i].name = files[size_t(i)];
        }
        for (int i = 0; i < 2; ++i) {
            std::string error;
            sides[i].snapshot = i == 1 && paths[1] == paths[0] ? sides[0].snapshot : load(paths[i], error);
            if (!sides[i].snapshot) {
                r.exitCode = 1;
                r.err = "memscope-cli: " + (error.empty() ? paths[i] + ": cannot be read" : error) + "\n";
                return r;
            }
            if (i == 1 && sides[1].snapshot == sides[0].snapshot)
                sides[1].replay = sides[0].replay;
            if (!resolveDiffSide(sides[i], moments[i], replays[i], error)) {
                r.exitCode = 2;
                r.err = "memscope-cli: insights: " + error + "\n";
                return r;
            }
        }
        const DiffResult result = computeDiff(sides[0], sides[1]);
        if (!result.ok()) {
            r.exitCode = 2;
            r.err = "memscope-cli: insights: " + result.error + "\n";
            return r;
        }
        report::Insights insights = report::computeDiffInsights(result, options);
        insights.source = files[0] + " -> " + files[1];
        r.out = json ? report::insightsJson(insights, *result.frames, options) : report::insightsText(insights);
        return r;
    }

    for (const std::string& path : files) {
        std::string error;
        const std::shared_ptr<const Snapshot> s = load(path, error);
        if (!s) {
            r.exitCode = 1;
            r.err += "memscope-cli: " + (error.empty() ? path + ": cannot be read" : error) + "\n";
            continue;
        }
        const std::vector<Replay> replays = Replay::buildAll(*s);
        report::Insights insights = report::computeInsights(*s, replays, options);
        insights.source = path;
        r.out += json ? report::insightsJson(insights, *s, options) : report::insightsText(insights);
    }
    return r;
}

int runInsights(const std::vector<std::string>& args)
{
    const DiffLoader load = [](const std::string& path, std::string& error) {
        // The replays come next: memory warmed while the parse leaves the second core idle (model/prefault.h).
        WarmPages warm(WarmPages::sizeForFile(path));
        io::LoadResult r = io::loadSnapshot(path);
        warm.release();
        if (!r.ok())
            error = r.error.toString();
        return r.snapshot;
    };
    const DiffCommandOutput r = runInsightsCommand(args, load);
    if (!r.out.empty() && (std::fwrite(r.out.data(), 1, r.out.size(), stdout) != r.out.size() || std::fflush(stdout))) {
        std::fprintf(stderr, "memscope-cli: cannot write to standard output\n");
        return 1;
    }
    if (!r.err.empty())
        std::fputs(r.err.c_str(), stderr);
    return r.exitCode;
}

} // namespace memscope
