// CURVE key files for the agent <-> viewer connection (CurveZMQ, ZeroMQ RFC 26; keys in Z85, RFC 32): reading,
// checking and generating them. The format is shared with the agent's server side (MEMSCOPE_CURVE_SECRET,
// MEMSCOPE_CURVE_CLIENTS): a key file holds one Z85-encoded 32-byte key, 40 characters, on its first line that is
// neither empty nor starts with '#' (other '#' lines are comments); a secret key file must not be readable by group
// or others. Plain functions over libzmq (zmq_z85_decode, zmq_curve_public, zmq_curve_keypair); any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace memscope::client {

constexpr size_t Z85KeyLength = 40; // 32 bytes in Z85 (5 characters per 4 bytes)

enum class KeyKind : uint8_t { Public, Secret };

struct KeyResult {
    std::string key; // the 40 Z85 characters
    std::string error; // "FILE: reason", one line; empty on success
    bool ok() const { return error.empty(); }
};

struct KeyPair {
    std::string publicKey; // Z85, 40 characters
    std::string secretKey;
    std::string error; // empty on success
    bool ok() const { return error.empty(); }
};

// True when this libzmq was built with CURVE (libsodium).
bool curveAvailable();
// True when `key` is 40 characters that decode as Z85.
bool isZ85Key(std::string_view key);
// Reads and checks a key file. A Secret file is refused when group or others may read it (checked on the opened
// file, so a swap between check and read cannot get past it). Blocks on the file system.
KeyResult readKeyFile(const std::string& path, KeyKind kind);
// The public key that belongs to a Z85 secret key; empty when `secret` is not one.
std::string publicKeyOf(std::string_view secret);
// A new key pair from libsodium's random generator.
KeyPair generateKeyPair();
// Writes NAME.key (the secret key, mode 0600) and NAME.pub (the public key, mode 0644), each first to a temporary
// file in the same folder that then takes its name in one step (link(2), which never replaces a file; with
// `force`, rename(2), which does), so a reader never sees half a key and a secret key is never readable by others
// even for a moment. Without `force` nothing is written when either file exists. Returns "" or one line naming
// the file and the reason.
std::string writeKeyPair(const std::string& name, const KeyPair& keys, bool force);

} // namespace memscope::client
