// CURVE keys for the agent <-> viewer connection (CurveZMQ, ZeroMQ RFC 26; keys in Z85, RFC 32): what needs
// libzmq (the public key of a secret key, new key pairs) and writing key files. Reading them is wire/keyfile.h's,
// the one reader the agent's server side uses too. Plain functions over libzmq (zmq_curve_public,
// zmq_curve_keypair); any thread.
#pragma once

#include "wire/keyfile.h"

#include <string>
#include <string_view>

namespace memscope::client {

struct KeyPair {
    std::string publicKey; // Z85, 40 characters
    std::string secretKey;
    std::string error; // empty on success
    bool ok() const { return error.empty(); }
};

// True when this libzmq was built with CURVE (libsodium).
bool curveAvailable();
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
