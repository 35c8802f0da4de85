// The publisher's endpoints (endpointpolicy.h): POSIX file calls, libzmq's bind and Z85 decoder.
#include "endpointpolicy.h"

#include "curve.h"
#include "wire/endpoint.h"
#include "wire/keyfile.h"

#include <zmq.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string_view>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::agent {
namespace {

    // The sockets of this user's jobs that died without a clean stop (killed, crashed: no one removed them), in the
    // default endpoints' folder: memscope-PID and memscope-PID-state whose PID no longer runs. Removed when the next
    // job starts there, so that the attach dialog lists running jobs, not old files. A socket another user owns, or
    // whose PID runs (perhaps reused by another process), is left alone.
    void removeStaleSockets(const std::string& dir)
    {
        DIR* d = ::opendir(dir.c_str());
        if (!d)
            return;
        while (const dirent* entry = ::readdir(d)) {
            const wire::SocketName name = wire::parseSocketName(entry->d_name);
            const pid_t pid = pid_t(name.pid);
            if (!name.memscope || pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH)
                continue;
            const std::string path = dir + "/" + entry->d_name;
            struct stat st { };
            if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == ::getuid())
                ::unlink(path.c_str());
        }
        ::closedir(d);
    }

} // namespace

std::string defaultEndpoint(std::string* error)
{
    std::string dir = wire::runtimeSocketFolder();
    struct stat st { };
    if (!dir.empty() && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ::access(dir.c_str(), W_OK) == 0) {
        // $XDG_RUNTIME_DIR: this user's own (the XDG Base Directory Specification), mode 0700.
    } else {
        dir = wire::fallbackSocketFolder();
        if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
            if (error)
                *error = "cannot create " + dir + ": " + std::strerror(errno);
            return {};
        }
        // Someone else's folder, or one others may enter, is refused: the sockets would be theirs to read.
        if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) {
            if (error)
                *error = dir + " is not a folder owned by this user";
            return {};
        }
        if ((st.st_mode & 0777) != 0700)
            ::chmod(dir.c_str(), 0700);
    }
    removeStaleSockets(dir);
    return std::string(wire::IpcScheme) + dir + "/" + wire::socketName(::getpid());
}

std::optional<BindPlan> planEndpoint(const std::string& endpoint, const std::string& secretFile,
                                     const std::string& clientsFile, bool insecureTcp, std::string* error)
{
    // ipc:///PATH or tcp://HOST:PORT, as the viewers' rule (wire/endpoint.h) is.
    if (const std::string why = wire::endpointProblem(endpoint); !why.empty()) {
        *error = endpoint + ": " + why;
        return std::nullopt;
    }
    BindPlan plan;
    plan.endpoint = endpoint;
    // tcp: loopback needs nothing; anything else only with CURVE keys (docs/protocol.md, "TCP and CURVE").
    if (endpoint.rfind("tcp://", 0) == 0) {
        const TcpEndpoint tcp = parseTcpEndpoint(endpoint);
        plan.endpoint = tcp.bind;
        plan.ipv6 = tcp.ipv6;
        const bool curve = !tcp.loopback || !secretFile.empty() || !clientsFile.empty();
        // Loopback is no boundary between the users of one machine: any of them may connect, read every event,
        // stack, host name and pid, and send the job data. Without keys only when the user says so.
        if (!curve && !insecureTcp) {
            *error = "refusing to bind " + endpoint
                + " without CURVE keys: any local user could connect to it and read the job's events; use an ipc:// "
                  "endpoint (the default: only you can connect; from another machine, over SSH), set "
                  "MEMSCOPE_CURVE_SECRET and MEMSCOPE_CURVE_CLIENTS, or set MEMSCOPE_INSECURE_TCP=1 to accept the risk";
            return std::nullopt;
        }
        if (curve) {
            const std::string refuse = "refusing to bind " + endpoint + ": ";
            const std::string what = tcp.loopback ? "CURVE (asked for by MEMSCOPE_CURVE_SECRET/_CLIENTS) needs"
                                                  : "an endpoint other than loopback needs CURVE:";
            if (secretFile.empty() || clientsFile.empty()) {
                *error = refuse + what + " both MEMSCOPE_CURVE_SECRET (the agent's secret key file) and "
                    + "MEMSCOPE_CURVE_CLIENTS (the authorised client public keys); "
                    + (secretFile.empty() ? "MEMSCOPE_CURVE_SECRET" : "MEMSCOPE_CURVE_CLIENTS") + " is not set";
                return std::nullopt;
            }
            const wire::KeyResult secret = wire::readKeyFile(secretFile, wire::KeyKind::Secret);
            if (!secret.ok()) {
                *error = refuse + "MEMSCOPE_CURVE_SECRET: " + secret.error;
                return std::nullopt;
            }
            const wire::KeyListResult clients = wire::readClientKeys(clientsFile);
            if (!clients.ok()) {
                *error = refuse + "MEMSCOPE_CURVE_CLIENTS: " + clients.error;
                return std::nullopt;
            }
            if (!publicKeyOf(secret.key)) {
                *error = refuse + "MEMSCOPE_CURVE_SECRET: " + secretFile + ": ZeroMQ cannot use this key ("
                    + zmq_strerror(zmq_errno()) + ")";
                return std::nullopt;
            }
            plan.secretKey = secret.key;
            for (const std::string& k : clients.keys) {
                std::array<uint8_t, 32> binary {};
                zmq_z85_decode(binary.data(), k.c_str());
                plan.clientKeys.push_back(binary);
            }
        }
    }
    plan.stateEndpoint = wire::stateEndpointFor(plan.endpoint);
    return plan;
}

// An ipc socket is bound under a temporary name beside the endpoint, made 0600, and renamed into place: ZeroMQ makes
// the socket file with the process's umask (022 or 000 would let any local user read the job's state), and
// rename(2) is atomic (in a sticky folder such as /tmp it fails for a path another user holds, which is then
// refused). Abstract endpoints (ipc://@NAME), which have no file and no permissions at all, never get here
// (wire::endpointProblem). Other endpoints: a plain zmq_bind.
bool bindPrivate(void* socket, const std::string& endpoint, std::string* error, ino_t* inode)
{
    *inode = 0;
    if (endpoint.rfind("ipc://", 0) != 0) {
        if (zmq_bind(socket, endpoint.c_str()) == 0)
            return true;
        *error = zmq_strerror(zmq_errno());
        return false;
    }
    const std::string path = endpoint.substr(wire::IpcScheme.size());
    struct stat st { };
    if (::lstat(path.c_str(), &st) == 0 && st.st_uid != ::geteuid()) {
        *error = "the path belongs to another user (uid " + std::to_string(st.st_uid) + ")";
        return false;
    }
    const std::string temp = path + ".bind-" + std::to_string(::getpid());
    if (zmq_bind(socket, ("ipc://" + temp).c_str()) != 0) {
        *error = zmq_strerror(zmq_errno());
        return false;
    }
    if (::chmod(temp.c_str(), 0600) != 0 || ::rename(temp.c_str(), path.c_str()) != 0) {
        *error = std::strerror(errno);
        zmq_unbind(socket, ("ipc://" + temp).c_str());
        ::unlink(temp.c_str());
        return false;
    }
    if (::lstat(path.c_str(), &st) == 0)
        *inode = st.st_ino;
    return true;
}

} // namespace memscope::agent
