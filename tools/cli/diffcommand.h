// `memscope-cli diff A[@INDEX] B[@INDEX] [OPTIONS]`: what changed between two allocator states. The command itself
// (options, reports, exit codes) is model::runDiffCommand in common/model/diff.h, so the tests run the same code
// in-process; this front end adds the snapshot reader (io::loadSnapshot) and standard output/error.
//
// Single-threaded; reads the files, writes nothing but stdout/stderr.
#pragma once

#include <string>
#include <vector>

namespace memscope {

// `args`: the command's arguments after "diff". Writes the report to `out` and messages to `err`; returns the exit
// code (0 done, 1 a file cannot be read, 2 a bad command line or index, 3 growth over --fail-if-growth).
int runDiff(const std::vector<std::string>& args, std::string& out, std::string& err);

// runDiff writing to stdout/stderr. For tools/cli/main.cpp.
int runDiff(const std::vector<std::string>& args);

} // namespace memscope
