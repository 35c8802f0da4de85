// `memscope-cli insights FILE... [--format text|json]` and `memscope-cli insights --diff A[@MOMENT] B[@MOMENT]`:
// the answers of report/insights.h (the peak's top consumers, leak suspects, pending-free stalls, fragmentation and
// OOMs explained; for a diff, what grew) as text or JSON. Like the diff command it runs behind an injected file
// reader (runInsightsCommand), so the tests run the very code the CLI runs in-process.
//
// Single-threaded; reads the files, writes nothing but stdout/stderr.
#pragma once

#include "diffcommand.h"

#include <string>
#include <vector>

namespace memscope {

// The usage of `memscope-cli insights`.
extern const char* const InsightsUsage;

// The command; `args` are the arguments after "insights". Exit codes: 0 done, 1 a file unreadable, 2 a bad command
// line or moment.
DiffCommandOutput runInsightsCommand(const std::vector<std::string>& args, const DiffLoader& load);

// runInsightsCommand with io::loadSnapshot, writing to stdout/stderr. For tools/cli/main.cpp.
int runInsights(const std::vector<std::string>& args);

} // namespace memscope
