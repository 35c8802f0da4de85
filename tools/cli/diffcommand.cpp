// The `diff` command (diffcommand.h): its options and exit codes over model::computeDiff and the report functions,
// then io::loadSnapshot as its reader and stdout/stderr.
#include "diffcommand.h"

#include "io/snapshotio.h"
#include "report/diffreport.h"
#include "report/memoryviz.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace memscope {

using namespace memscope::model;

const char* const DiffUsage = R"(usage: memscope-cli diff A[@MOMENT] B[@MOMENT] [OPTIONS]

What changed from A to B: totals per device, pool and stream, segments only in one side, and live allocations
matched by call stack. A and B are snapshot files, or one file twice; @MOMENT picks a state of the trace:
  @INDEX          the state after INDEX entries (0 = before the first)
  @end            the snapshot's own final state (the default)
  @peak           the peak of allocated bytes (@peak-reserved: of reserved bytes), as `info` prints it
  @oom, @oomN     right after the first (the Nth) OOM
  @largest        right after the largest allocation
  @NAME           the start of the first record_function range NAME (@NAME:end: its end), e.g. @step_3

options:
  --by stack|stack+size|segment     rows: per call stack (default), per stack and block size, per segment
  --format text|json|folded|difffolded
                                    text (default); JSON (docs/diff-json.md); folded "stack delta" lines
                                    (signed bytes); difffolded "stack bytesA bytesB" lines (flamegraph.pl)
  --top N                           rows per list (default 10 in text, all otherwise; 0: all)
  --device N|all                    one device only (default all; needed with @MOMENT when several devices
                                    have traces)
  --no-frame-filter                 match stacks with every frame, not only those PyTorch's viewers show
  --fail-if-growth BYTES            exit status 3 when the growth exceeds BYTES (e.g. 0, 512MiB, 1.5GiB)
  --growth-of active|allocated|reserved
                                    what growth means (default active: bytes of live blocks, B - A)

exit status: 0 done, 1 a file cannot be read, 2 a bad command line or index, 3 growth over --fail-if-growth
)";

bool parseByteCount(const std::string& text, ByteCount& bytes)
{
    if (text.empty() || text[0] == '-' || text[0] == '+')
        return false;
    size_t pos = 0;
    while (pos < text.size() && ((text[pos] >= '0' && text[pos] <= '9') || text[pos] == '.'))
        ++pos;
    const std::string number = text.substr(0, pos);
    std::string unit = text.substr(pos);
    if (number.empty() || std::count(number.begin(), number.end(), '.') > 1 || number == ".")
        return false;
    double scale = 1;
    if (!unit.empty()) {
        const char u = char(std::toupper(static_cast<unsigned char>(unit[0])));
        std::string rest = unit.substr(1);
        if (u == 'B' && rest.empty()) {
            scale = 1;
        } else {
            const std::string units = "KMGT";
            const size_t k = units.find(u);
            if (k == std::string::npos || !(rest.empty() || rest == "B" || rest == "iB" || rest == "ib"))
                return false;
            scale = std::pow(1024.0, double(k + 1));
        }
    }
    const double value = std::strtod(number.c_str(), nullptr) * scale;
    if (!(value >= 0) || value > 9.0e18)
        return false;
    bytes = ByteCount(std::llround(value));
    return true;
}

DiffCommandOutput runDiffCommand(const std::vector<std::string>& args, const DiffLoader& load)
{
    DiffCommandOutput r;
    auto usage = [&](const std::string& message) {
        r.exitCode = 2;
        r.err = "memscope-cli: diff: " + message + "\n\n" + DiffUsage;
        return r;
    };
    enum class Format { Text, Json, Folded, DiffFolded };
    Format format = Format::Text;
    report::DiffReportOptions shown;
    bool topGiven = false;
    int device = AllDevices;
    DiffOptions diffOptions;
    bool failIfGrowth = false;
    ByteCount threshold = 0;
    std::vector<std::string> files;

    for (size_t i = 0; i < args.size(); ++i) {
        std::string arg = args[i];
        std::string value;
        bool hasValue = false;
        if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
            if (const size_t eq = arg.find('='); eq != std::string::npos) {
                value = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
                hasValue = true;
            }
        }
        auto needValue = [&] {
            if (hasValue)
                return true;
            if (i + 1 >= args.size())
                return false;
            value = args[++i];
            hasValue = true;
            return true;
        };
        if (arg == "--by") {
            if (!needValue())
                return usage("--by needs a value: stack, stack+size or segment");
            if (value == "stack")
                shown.by = DiffGrouping::Stack;
            else if (value == "stack+size")
                shown.by = DiffGrouping::StackAndSize;
            else if (value == "segment")
                shown.by = DiffGrouping::Segment;
            else
                return usage("unknown --by '" + value + "': use stack, stack+size or segment");
        } else if (arg == "--format") {
            if (!needValue())
                return usage("--format needs a value: text, json, folded or difffolded");
            if (value == "text")
                format = Format::Text;
            else if (value == "json")
                format = Format::Json;
            else if (value == "folded")
                format = Format::Folded;
            else if (value == "difffolded")
                format = Format::DiffFolded;
            else
                return usage("unknown format '" + value + "': use text, json, folded or difffolded");
        } else if (arg == "--top") {
            if (!needValue())
                return usage("--top needs a number");
            if (value.empty() || value.size() > 9
                || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
                return usage("--top needs a number, not '" + value + "'");
            shown.top = size_t(std::stoul(value));
            topGiven = true;
        } else if (arg == "--device") {
            if (!needValue())
                return usage("--device needs a device number or 'all'");
            if (value == "all")
                device = AllDevices;
            else if (!value.empty() && value.size() <= 6
                     && std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
                device = std::stoi(value);
            else
                return usage("--device needs a device number or 'all', not '" + value + "'");
        } else if (arg == "--fail-if-growth") {
            if (!needValue())
                return usage("--fail-if-growth needs a byte count");
            if (!parseByteCount(value, threshold))
                return usage("--fail-if-growth needs a byte count (e.g. 0, 1048576, 512MiB), not '" + value + "'");
            failIfGrowth = true;
        } else if (arg == "--growth-of") {
            if (!needValue())
                return usage("--growth-of needs a value: active, allocated or reserved");
            if (value == "active")
                shown.growthMetric = DiffGrowthMetric::Active;
            else if (value == "allocated")
                shown.growthMetric = DiffGrowthMetric::Allocated;
            else if (value == "reserved")
                shown.growthMetric = DiffGrowthMetric::Reserved;
            else
                return usage("unknown --growth-of '" + value + "': use active, allocated or reserved");
        } else if (arg == "--no-frame-filter" && !hasValue) {
            diffOptions.frameFilter = false;
        } else if (arg.size() > 1 && arg[0] == '-') {
            return usage("unknown option '" + args[i] + "'");
        } else {
            files.push_back(arg);
        }
    }
    if (files.size() != 2)
        return usage("needs exactly two snapshots: A[@MOMENT] B[@MOMENT]");
    if ((format == Format::Folded || format == Format::DiffFolded) && shown.by == DiffGrouping::Segment)
        return usage("folded output is by call stack: use --by stack or --by stack+size");
    if (!topGiven && format == Format::Text)
        shown.top = 10;

    DiffSide sides[2];
    std::string paths[2];
    Moment moments[2];
    for (int i = 0; i < 2; ++i) {
        std::string error;
        if (!parseDiffSideSpec(files[i], paths[i], moments[i], error))
            return usage(error);
        sides[i].device = device;
        sides[i].name = files[i];
    }
    // One file named twice is loaded once: both sides then share a snapshot, and the diff is a same-trace diff.
    for (int i = 0; i < 2; ++i) {
        if (i == 1 && paths[1] == paths[0]) {
            sides[1].snapshot = sides[0].snapshot;
            continue;
        }
        std::string error;
        sides[i].snapshot = load(paths[i], error);
        if (!sides[i].snapshot) {
            r.exitCode = 1;
            r.err = "memscope-cli: " + (error.empty() ? paths[i] + ": cannot be read" : error) + "\n";
            return r;
        }
    }

    // @peak, @oom, @NAME...: resolved in each side's trace (the replays built for that serve the diff too).
    std::unique_ptr<Replay> replays[2];
    for (int i = 0; i < 2; ++i) {
        std::string error;
        if (i == 1 && sides[1].snapshot == sides[0].snapshot)
            sides[1].replay = sides[0].replay; // one file twice: one replay
        if (!resolveDiffSide(sides[i], moments[i], replays[i], error)) {
            r.exitCode = 2;
            r.err = "memscope-cli: diff: " + error + "\n";
            return r;
        }
    }

    const DiffResult result = computeDiff(sides[0], sides[1], diffOptions);
    if (!result.ok()) {
        r.exitCode = 2;
        r.err = "memscope-cli: diff: " + result.error
            + (result.errorCode == DiffErrorCode::AmbiguousTrace ? " with --device N\n" : "\n");
        return r;
    }
    switch (format) {
    case Format::Text:
        r.out = report::diffText(result, shown);
        break;
    case Format::Json:
        r.out = report::diffJson(result, shown);
        break;
    case Format::Folded:
        r.out = report::diffFolded(result, shown);
        break;
    case Format::DiffFolded:
        r.out = report::diffFoldedTwoColumn(result, shown);
        break;
    }
    if (failIfGrowth) {
        const ByteCount growth = diffGrowth(result, shown.growthMetric);
        if (growth > threshold) {
            r.exitCode = 3;
            r.err = "memscope-cli: diff: " + std::string(diffGrowthMetricName(shown.growthMetric)) + " bytes grew by "
                + report::formatSize(double(growth)) + " (" + std::to_string(growth) + " B), more than "
                + std::to_string(threshold) + " B (--fail-if-growth)\n";
        }
    }
    return r;
}

int runDiff(const std::vector<std::string>& args, std::string& out, std::string& err)
{
    std::string warnings; // a file's load warnings, one stderr line per kind (as every command prints them)
    const DiffLoader load = [&warnings](const std::string& path, std::string& error) {
        io::LoadResult r = io::loadSnapshot(path);
        if (!r.ok())
            error = r.error.toString();
        else
            for (const model::LoadWarning& w : r.snapshot->warnings)
                warnings += "memscope-cli: " + model::warningLine(path, w) + "\n";
        return r.snapshot;
    };
    DiffCommandOutput result = runDiffCommand(args, load);
    out = std::move(result.out);
    err = warnings + result.err;
    return result.exitCode;
}

int runDiff(const std::vector<std::string>& args)
{
    std::string out, err;
    int status = runDiff(args, out, err);
    if (!out.empty() && std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) {
        std::fprintf(stderr, "memscope-cli: cannot write to standard output\n");
        return 1;
    }
    if (std::fflush(stdout) != 0) {
        std::fprintf(stderr, "memscope-cli: cannot write to standard output\n");
        return 1;
    }
    if (!err.empty())
        std::fputs(err.c_str(), stderr);
    return status;
}

} // namespace memscope
