// CURVE key files, as the agent (MEMSCOPE_CURVE_SECRET, MEMSCOPE_CURVE_CLIENTS) and viewers (memscope-cli record
// --curve-key, the app's attach dialog) both read them (docs/protocol.md, "TCP and CURVE"): one reader, so the two
// sides cannot disagree on the format. A key file holds one Z85-encoded 32-byte key (40 characters, ZeroMQ RFC 32)
// on its first line that is neither empty nor starts with '#'; spaces, tabs and a CR around it are ignored. A
// secret key file must not be readable by group or others. A clients file lists public keys, one per line, blank
// lines and '#' lines skipped. No ZeroMQ: the Z85 check is RFC 32's alphabet and range. Plain functions; any
// thread; they block on the file system and allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::wire {

constexpr size_t Z85KeyLength = 40; // 32 bytes in Z85 (5 characters per 4 bytes)

enum class KeyKind : uint8_t { Public, Secret };

struct KeyResult {
    std::string key; // the 40 Z85 characters
    std::string error; // "FILE: reason", one line; empty on success
    bool ok() const { return error.empty(); }
};

struct KeyListResult {
    std::vector<std::string> keys; // each 40 Z85 characters, in the file's order; at least one on success
    std::string error; // "FILE: reason" (with the line for a bad key), one line; empty on success
    bool ok() const { return error.empty(); }
};

// True when `key` is 40 characters that decode as Z85: RFC 32's alphabet, and no group of five characters above
// 2^32 - 1 (the checks of libzmq's zmq_z85_decode).
bool isZ85Key(std::string_view key);
// Reads and checks a key file. A Secret file is refused when group or others may read it (checked on the opened
// file, so a swap between check and read cannot get past it).
KeyResult readKeyFile(const std::string& path, KeyKind kind);
// Reads a clients file: every line that is not blank or a '#' comment must be a public key; at least one.
KeyListResult readClientKeys(const std::string& path);

} // namespace memscope::wire
