// `memscope-cli keygen NAME [--force]`: a CURVE key pair for the agent <-> viewer connection (common/client/
// curvekeys.h has the file format): NAME.key, the secret key (mode 0600), and NAME.pub, the public key, each
// created atomically and never over an existing file unless --force; prints the public key. In the static library
// memscope-record, so tests/common/tst_recordcommand can run it. Any thread.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace memscope {

// Exit status: 0 written, 1 a file could not be written (or exists), 2 a bad command line.
int runKeygen(const std::vector<std::string>& args, std::FILE* out = stdout, std::FILE* err = stderr);

} // namespace memscope
