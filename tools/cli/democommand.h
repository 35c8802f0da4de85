// `memscope-cli demo [--endpoint E] [--events N] [--rate N] [--leak]`: a training-like workload run through
// memscope's real caching allocator on the host backend (address space only, no GPU), publishing its events
// exactly like an agent in a PyTorch job, so that viewers (`memscope-cli record`, the app) can be tried without a
// GPU. Prints the endpoint on the first line of stdout, then runs, then says goodbye.
//
// Single-threaded (plus the publisher's own thread).
#pragma once

#include <string>
#include <vector>

namespace memscope {

// `args`: the command's arguments after "demo". Returns the exit code: 0 done, 1 the endpoint cannot be bound,
// 2 a bad command line.
int runDemo(const std::vector<std::string>& args);

} // namespace memscope
