// TCP endpoint rules, key files and the ZAP decision of the publisher (curve.h).
#include "curve.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <arpa/inet.h>
#include <sys/stat.h>

namespace memscope::agent {
namespace {

    constexpr size_t Z85KeyChars = 40;

    std::string trimRight(std::string line)
    {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
            line.pop_back();
        return line;
    }

    std::optional<Z85Key> toKey(const std::string& text)
    {
        if (text.size() != Z85KeyChars)
            return std::nullopt;
        uint8_t bytes[32];
        if (!zmq_z85_decode(bytes, text.c_str())) // checks the alphabet
            return std::nullopt;
        Z85Key key {};
        std::memcpy(key.data(), text.data(), Z85KeyChars);
        return key;
    }

    const char* keyFormat()
    {
        return "a key file holds one Z85-encoded 32-byte key (40 characters) on its first line that is not empty "
               "and does not start with '#'";
    }

} // namespace

std::optional<TcpEndpoint> parseTcpEndpoint(const std::string& endpoint, std::string* error)
{
    const std::string rest = endpoint.substr(6); // after "tcp://"
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) {
        *error = endpoint + ": a tcp endpoint needs a port (tcp://HOST:PORT, or tcp://:PORT for 127.0.0.1)";
        return std::nullopt;
    }
    const std::string host = rest.substr(0, colon);
    const std::string portText = rest.substr(colon + 1);
    char* end = nullptr;
    errno = 0;
    const unsigned long port = std::strtoul(portText.c_str(), &end, 10);
    if (portText.empty() || errno != 0 || *end != '\0' || !std::all_of(portText.begin(), portText.end(), ::isdigit)
        || port == 0 || port >= 65535) {
        *error = endpoint + ": the port must be a number from 1 to 65534 (the state socket takes the next one)";
        return std::nullopt;
    }
    TcpEndpoint out;
    out.bind = endpoint;
    if (host.empty() || host == "localhost") {
        // No host (or localhost): this machine only. A literal address, so that no resolver decides for us.
        out.bind = "tcp://127.0.0.1:" + portText;
        out.loopback = true;
        return out;
    }
    in_addr v4 {};
    if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
        out.loopback = (ntohl(v4.s_addr) >> 24) == 127; // 127.0.0.0/8 (RFC 1122 3.2.1.3)
        return out;
    }
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        const std::string inner = host.substr(1, host.size() - 2);
        in6_addr v6 {};
        if (inet_pton(AF_INET6, inner.c_str(), &v6) == 1) {
            out.ipv6 = true;
            out.loopback = IN6_IS_ADDR_LOOPBACK(&v6);
            return out;
        }
    }
    out.loopback = false; // "*", 0.0.0.0, an interface, a host name: reachable from elsewhere
    return out;
}

std::optional<Z85Key> readKeyFile(const std::string& path, bool secret, std::string* error)
{
    struct stat st { };
    if (::stat(path.c_str(), &st) != 0) {
        *error = path + ": " + std::strerror(errno);
        return std::nullopt;
    }
    if (!S_ISREG(st.st_mode)) {
        *error = path + ": not a regular file";
        return std::nullopt;
    }
    if (secret && (st.st_mode & (S_IRGRP | S_IROTH))) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
        *error = path + ": a secret key file must not be readable by group or others (mode " + mode + "; chmod 600 "
            + path + ")";
        return std::nullopt;
    }
    std::ifstream in(path);
    if (!in) {
        *error = path + ": " + std::strerror(errno);
        return std::nullopt;
    }
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        line = trimRight(line);
        if (line.empty() || line[0] == '#')
            continue;
        if (std::optional<Z85Key> key = toKey(line))
            return key;
        *error = path + ": line " + std::to_string(number) + " is not a Z85-encoded 32-byte key (" + keyFormat() + ")";
        return std::nullopt;
    }
    *error = path + ": no key (" + std::string(keyFormat()) + ")";
    return std::nullopt;
}

std::optional<std::vector<Z85Key>> readClientKeys(const std::string& path, std::string* error)
{
    std::ifstream in(path);
    if (!in) {
        *error = path + ": " + std::strerror(errno);
        return std::nullopt;
    }
    std::vector<Z85Key> keys;
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        line = trimRight(line);
        if (line.empty() || line[0] == '#')
            continue;
        std::optional<Z85Key> key = toKey(line);
        if (!key) {
            *error = path + ": line " + std::to_string(number)
                + " is not a Z85-encoded 32-byte client public key (40 characters; one per line, '#' comments)";
            return std::nullopt;
        }
        keys.push_back(*key);
    }
    if (in.bad()) {
        *error = path + ": " + std::strerror(errno);
        return std::nullopt;
    }
    if (keys.empty()) {
        *error = path + ": lists no client public keys (one Z85 key of 40 characters per line)";
        return std::nullopt;
    }
    return keys;
}

std::optional<Z85Key> publicKeyOf(const Z85Key& secret)
{
    Z85Key out {};
    if (zmq_curve_public(out.data(), secret.data()) != 0)
        return std::nullopt;
    return out;
}

std::string zapDecision(const std::vector<std::string>& request, const std::vector<std::array<uint8_t, 32>>& clients,
                        std::string* why)
{
    // RFC 27: version "1.0", request id, domain, address, identity, mechanism, then the mechanism's credentials
    // (CURVE: the client's 32-byte long-term public key).
    if (request.size() < 7 || request[0] != "1.0" || request[5] != "CURVE" || request[6].size() != 32) {
        *why = "only CURVE clients with a listed key are accepted";
        return "400";
    }
    for (const auto& key : clients) {
        if (std::memcmp(key.data(), request[6].data(), 32) == 0) {
            *why = "OK";
            return "200";
        }
    }
    *why = "client key not authorised";
    return "400";
}

} // namespace memscope::agent
