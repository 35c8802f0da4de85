// Endpoint conventions of the agent and its viewers (endpoint.h).
#include "wire/endpoint.h"

#include <algorithm>
#include <cstdlib>

#include <unistd.h>

namespace memscope::wire {

namespace {

    bool allDigits(std::string_view text)
    {
        return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    }

    // The port of a tcp:// endpoint, 0 when it has none or a bad one (the state socket takes port + 1, so 65535 is
    // not a port an agent can publish on).
    unsigned long tcpPort(std::string_view endpoint)
    {
        const size_t colon = endpoint.rfind(':');
        if (colon == std::string_view::npos || colon < TcpScheme.size())
            return 0;
        const std::string_view text = endpoint.substr(colon + 1);
        if (!allDigits(text) || text.size() > 5)
            return 0;
        const unsigned long port = std::strtoul(std::string(text).c_str(), nullptr, 10);
        return port >= 1 && port <= 65534 ? port : 0;
    }

} // namespace

std::string endpointProblem(std::string_view endpoint)
{
    constexpr std::string_view NotOurs = "not an ipc:// or tcp://HOST:PORT endpoint";
    if (endpoint.starts_with(IpcScheme)) {
        const std::string_view path = endpoint.substr(IpcScheme.size());
        if (path.empty())
            return std::string(NotOurs) + " (ipc:// needs a path: ipc:///PATH)";
        if (path.front() == '@')
            return "an abstract ipc endpoint (ipc://@NAME) has no file, so no owner to check and no permissions: any "
                   "local user could bind it or read the job's memory; use ipc:///PATH";
        return {};
    }
    if (endpoint.starts_with(TcpScheme)) {
        if (endpoint.rfind(':') < TcpScheme.size())
            return "a tcp endpoint needs a port (tcp://HOST:PORT, or tcp://:PORT for 127.0.0.1)";
        if (tcpPort(endpoint) == 0)
            return "the port must be a number from 1 to 65534 (the state socket takes the next one)";
        return {};
    }
    if (endpoint.starts_with("inproc://"))
        return std::string(NotOurs)
            + " (inproc:// joins the sockets of one ZeroMQ context only, and the agent's publisher has its own: no "
              "viewer could connect)";
    return std::string(NotOurs);
}

std::string stateEndpointFor(std::string_view endpoint)
{
    if (!endpointProblem(endpoint).empty())
        return {};
    if (endpoint.starts_with(TcpScheme)) {
        const size_t colon = endpoint.rfind(':');
        return std::string(endpoint.substr(0, colon + 1)) + std::to_string(tcpPort(endpoint) + 1);
    }
    return std::string(endpoint) + std::string(StateSuffix);
}

std::string socketName(long pid) { return std::string(SocketNamePrefix) + std::to_string(pid); }

SocketName parseSocketName(std::string_view name)
{
    SocketName out;
    if (!name.starts_with(SocketNamePrefix))
        return out;
    out.memscope = true;
    std::string_view rest = name.substr(SocketNamePrefix.size());
    if (rest.size() > StateSuffix.size() && rest.ends_with(StateSuffix)) {
        out.state = true;
        rest.remove_suffix(StateSuffix.size());
    }
    if (allDigits(rest) && rest.size() <= 9)
        out.pid = std::strtol(std::string(rest).c_str(), nullptr, 10);
    return out;
}

std::string runtimeSocketFolder()
{
    const char* runtime = std::getenv("XDG_RUNTIME_DIR");
    return runtime ? std::string(runtime) : std::string();
}

std::string fallbackSocketFolder() { return "/tmp/memscope-" + std::to_string(::getuid()); }

} // namespace memscope::wire
