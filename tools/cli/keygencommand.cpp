// The `keygen` command (keygencommand.h) over client::generateKeyPair and client::writeKeyPair.
#include "keygencommand.h"

#include "client/curvekeys.h"

namespace memscope {

int runKeygen(const std::vector<std::string>& args, std::FILE* out, std::FILE* err)
{
    auto usage = [&](const std::string& message) {
        std::fprintf(err, "memscope-cli: %s\nusage: memscope-cli keygen NAME [--force]\n", message.c_str());
        return 2;
    };
    std::string name;
    bool force = false;
    for (const std::string& a : args) {
        if (a == "--force")
            force = true;
        else if (a.size() > 1 && a[0] == '-')
            return usage("unknown option '" + a + "' for 'keygen'");
        else if (name.empty())
            name = a;
        else
            return usage("'keygen' takes one NAME, got '" + name + "' and '" + a + "'");
    }
    if (name.empty())
        return usage("'keygen' needs a NAME (writes NAME.key and NAME.pub)");
    if (!client::curveAvailable()) {
        std::fprintf(err, "memscope-cli: this libzmq was built without CURVE (libsodium): no keys can be made\n");
        return 1;
    }
    const client::KeyPair keys = client::generateKeyPair();
    if (!keys.ok()) {
        std::fprintf(err, "memscope-cli: %s\n", keys.error.c_str());
        return 1;
    }
    if (const std::string error = client::writeKeyPair(name, keys, force); !error.empty()) {
        std::fprintf(err, "memscope-cli: %s\n", error.c_str());
        return 1;
    }
    std::fprintf(out, "%s\n", keys.publicKey.c_str());
    std::fprintf(err, "memscope-cli: wrote %s.key (secret, mode 0600) and %s.pub (public)\n", name.c_str(),
                 name.c_str());
    return 0;
}

} // namespace memscope
