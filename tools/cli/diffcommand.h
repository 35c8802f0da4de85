// `memscope-cli diff A[@INDEX] B[@INDEX] [OPTIONS]`: what changed between two allocator states. The command
// (options, reports, exit codes) runs behind an injected file reader (runDiffCommand), so that the tests run the
// very code the CLI runs in-process; runDiff adds io::loadSnapshot and standard output/error. The diff itself and
// its reports are model::computeDiff and friends (common/model/diff.h).
//
// Single-threaded; reads the files, writes nothing but stdout/stderr.
#pragma once

#include "model/diff.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace memscope {

// "1048576", "512KiB", "1.5GiB", "10MB" (K/M/G/T, with or without "iB"/"B", powers of 1024) -> bytes. False when
// malformed or negative.
bool parseByteCount(const std::string& text, model::ByteCount& bytes);

// Loads one file for the command; on failure returns null and sets `error` to one line naming the file and the
// reason.
using DiffLoader = std::function<std::shared_ptr<const model::Snapshot>(const std::string& path, std::string& error)>;

struct DiffCommandOutput {
    int exitCode = 0; // 0 done; 1 a file unreadable; 2 a bad command line or index; 3 growth over --fail-if-growth
    std::string out; // the report
    std::string err; // messages, and the usage after a bad command line
};

// The usage of `memscope-cli diff`.
extern const char* const DiffUsage;

// The command; `args` are the arguments after "diff". A path given twice is loaded once, so both sides then share
// one snapshot (a same-trace diff).
DiffCommandOutput runDiffCommand(const std::vector<std::string>& args, const DiffLoader& load);

// runDiffCommand with io::loadSnapshot as its reader: the report to `out`, messages to `err`; the exit code.
int runDiff(const std::vector<std::string>& args, std::string& out, std::string& err);

// runDiff writing to stdout/stderr. For tools/cli/main.cpp.
int runDiff(const std::vector<std::string>& args);

} // namespace memscope
