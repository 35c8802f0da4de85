// The `diff` command's front end: model::runDiffCommand with io::loadSnapshot as its reader, then stdout/stderr.
#include "diffcommand.h"

#include "io/snapshotio.h"
#include "model/diff.h"

#include <cstdio>

namespace memscope {

int runDiff(const std::vector<std::string>& args, std::string& out, std::string& err)
{
    const model::DiffLoader load = [](const std::string& path, std::string& error) {
        io::LoadResult r = io::loadSnapshot(path);
        if (!r.ok())
            error = r.error.toString();
        return r.snapshot;
    };
    model::DiffCommandOutput result = model::runDiffCommand(args, load);
    out = std::move(result.out);
    err = std::move(result.err);
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
