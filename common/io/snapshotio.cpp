// File-level loading: read (or decompress) the bytes, detect the format, parse, build, check. See snapshotio.h.
#include "io/snapshotio.h"

#include "io/filebytes.h"
#include "io/jsonreader.h"
#include "io/picklereader.h"
#include "io/snapshotbuilder.h"
#include "io/valuetree.h"
#include "model/consistency.h"
#include "model/forwardframes.h"
#include "model/processmemory.h"

#include <lzma.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

namespace memscope::io {

std::string_view errorCodeName(ErrorCode code)
{
    switch (code) {
    case ErrorCode::None: return "none";
    case ErrorCode::Io: return "io";
    case ErrorCode::Empty: return "empty";
    case ErrorCode::NotPickle: return "not-pickle";
    case ErrorCode::Truncated: return "truncated";
    case ErrorCode::Corrupt: return "corrupt";
    case ErrorCode::Refused: return "refused";
    case ErrorCode::TooNew: return "too-new";
    case ErrorCode::TooDeep: return "too-deep";
    case ErrorCode::TooLarge: return "too-large";
    case ErrorCode::NotSnapshot: return "not-snapshot";
    case ErrorCode::Cancelled: return "cancelled";
    case ErrorCode::Count: break;
    }
    return "?";
}

std::string Error::toString() const
{
    std::string s = path.empty() ? std::string("<input>") : path;
    s += ": ";
    s += message;
    if (hasOffset) {
        s += " (at byte ";
        s += std::to_string(offset);
        s += ')';
    }
    return s;
}

namespace {

Error makeError(ErrorCode code, std::string message, const std::string& path)
{
    Error e;
    e.code = code;
    e.message = std::move(message);
    e.path = path;
    return e;
}


bool isXz(std::span<const uint8_t> data)
{
    static constexpr uint8_t Magic[] = { 0xFD, '7', 'z', 'X', 'Z', 0x00 };
    return data.size() >= sizeof Magic && std::memcmp(data.data(), Magic, sizeof Magic) == 0;
}

bool looksLikeJson(std::span<const uint8_t> data);

// What decompressXz() is reading: any bytes (all of the stream), a snapshot (its first 4 KiB must look like a
// pickle or JSON; a pickle is read to its end), or a pickle (read to its end).
enum class XzContent : uint8_t { Bytes, Snapshot, Pickle };

// Decompresses an .xz stream, bounded four ways, so that a small hostile file costs neither the machine's memory
// nor minutes: a snapshot's first 4 KiB must look like a pickle or JSON (checked as soon as they are out); a pickle
// is decompressed only as far as its parse will read (PickleExtent: to its STOP, or to the opcode the parse fails
// at; what follows is left compressed, as Python's pickle.load leaves it unread in an lzma.open() file); the output
// may not outgrow the memory the machine has free (nor `limit`), checked at once against what the pickle's opcodes
// announce; and running out of memory anyway is an error, not a crash.
Error decompressXz(std::span<const uint8_t> in, std::vector<uint8_t>& out, const std::string& path,
                   XzContent content = XzContent::Bytes, uint64_t limit = uint64_t(16) << 30)
{
    // `limit` is fixed; `room` is what the machine has now (the parse needs at least as much again), so a file is
    // refused past `limit` with the same message whenever it is read, and past `room` with today's figure.
    uint64_t room = limit;
    if (const uint64_t free = model::availableMemory(); free > 0)
        room = std::min(limit, free / 2);
    auto tooLarge = [&](std::string what, uint64_t size) {
        if (size > limit)
            what += ", more than the " + std::to_string(limit >> 20) + " MiB the reader decompresses at most";
        else
            what += ", more than the " + std::to_string(room >> 20)
                + " MiB it may take (half the memory this machine has free)";
        return makeError(ErrorCode::TooLarge, std::move(what), path);
    };
    // A value no snapshot holds (PickleExtent's limits): refused at its length, before its bytes are decompressed.
    auto oversized = [&](const PickleExtent::Oversize& o) {
        const std::string mib = std::to_string(PickleExtent::MaxLongBytes >> 20) + " MiB";
        std::string what = "its pickle holds ";
        if (std::string_view(o.opcode) == "FRAME")
            what += "a FRAME of " + std::to_string(o.length) + " bytes";
        else if (o.lineUnended)
            what += "a " + std::string(o.opcode) + " line of more than " + std::to_string(o.length) + " bytes";
        else
            what += "a " + std::string(o.opcode) + " value of " + std::to_string(o.length) + " bytes";
        what += " at offset " + std::to_string(o.offset) + " of the decompressed data";
        if (std::string_view(o.opcode) == "FRAME")
            what += ", longer than the " + mib + " the reader decompresses for one (CPython's are about 64 KiB)";
        else if (o.length > PickleExtent::MaxLongBytes)
            what += ", longer than the " + mib + " the reader decompresses for strings, bytes and integers of "
                + std::to_string(PickleExtent::LongValue >> 10) + " KiB or more";
        else
            what += ", past the " + mib + " the reader decompresses for strings, bytes and integers of "
                + std::to_string(PickleExtent::LongValue >> 10) + " KiB or more (" + std::to_string(o.longBytes)
                + " bytes of them so far)";
        return makeError(ErrorCode::TooLarge, what + ": no memory snapshot holds one; not decompressed", path);
    };
    lzma_stream strm = LZMA_STREAM_INIT;
    if (lzma_stream_decoder(&strm, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK)
        return makeError(ErrorCode::Io, "cannot start the xz decoder", path);
    struct End {
        lzma_stream* s;
        ~End() { lzma_end(s); }
    } end { &strm };
    constexpr size_t Prefix = 4096;
    // Decoded past the pickle's end before stopping: a stream that ends there (every file PyTorch or we write) is
    // decoded to its end, so its integrity check is still verified.
    constexpr uint64_t Slack = uint64_t(1) << 20;
    PickleExtent extent;
    bool scanning = content == XzContent::Pickle;
    try {
        out.resize(std::min<uint64_t>(std::max<size_t>(in.size() * 8, 1 << 20), room));
        strm.next_in = in.data();
        strm.avail_in = in.size();
        strm.next_out = out.data();
        strm.avail_out = std::min<size_t>(out.size(), Prefix); // the first round: just enough to check
        bool checked = content != XzContent::Snapshot;
        while (true) {
            const lzma_ret ret = lzma_code(&strm, LZMA_FINISH);
            const size_t produced = size_t(strm.next_out - out.data());
            if (!checked && (produced >= Prefix || ret == LZMA_STREAM_END)) {
                const std::span<const uint8_t> head(out.data(), produced);
                if (!looksLikePickle(head) && !looksLikeJson(head))
                    return makeError(ErrorCode::NotPickle,
                                     "the xz file holds neither a pickle nor JSON: not a memory snapshot", path);
                checked = true;
                scanning = looksLikePickle(head); // as loadBytes() will decide
            }
            uint64_t wanted = UINT64_MAX; // the bytes worth decoding: all of them, until the pickle's end is known
            if (scanning && checked) {
                if (extent.scan(std::span<const uint8_t>(out.data(), produced)) == PickleExtent::State::Oversized)
                    return oversized(extent.oversize());
                if (extent.needed() > room)
                    return tooLarge("its pickle needs "
                                        + (extent.needed() == UINT64_MAX ? std::string("more than 2^64")
                                                                         : std::to_string(extent.needed()))
                                        + " bytes decompressed",
                                    extent.needed());
                if (extent.state() != PickleExtent::State::More)
                    wanted = extent.needed() + Slack;
            }
            if (ret == LZMA_STREAM_END)
                break;
            if (ret != LZMA_OK)
                return makeError(ret == LZMA_BUF_ERROR ? ErrorCode::Truncated : ErrorCode::Corrupt,
                                 ret == LZMA_BUF_ERROR ? "the xz stream is truncated" : "the xz stream is corrupt",
                                 path);
            if (produced >= wanted)
                break; // the rest is never read
            if (strm.avail_out == 0) {
                if (produced < out.size()) {
                    strm.avail_out = size_t(std::min<uint64_t>(out.size(), wanted) - produced); // past the first round
                    continue;
                }
                if (produced >= room)
                    return tooLarge("it decompresses to more", produced + 1);
                out.resize(std::min({ uint64_t(produced) * 2, room, wanted }));
                strm.next_out = out.data() + produced;
                strm.avail_out = out.size() - produced;
            }
        }
        uint64_t size = uint64_t(strm.next_out - out.data());
        if (scanning && extent.state() != PickleExtent::State::More)
            size = std::min(size, extent.needed()); // what follows the pickle is no part of the snapshot
        out.resize(size_t(size));
    } catch (const std::bad_alloc&) {
        out.clear();
        out.shrink_to_fit();
        return makeError(ErrorCode::TooLarge, "not enough memory to decompress it", path);
    }
    return {};
}

bool looksLikeJson(std::span<const uint8_t> data)
{
    if (data.size() >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF)
        data = data.subspan(3); // a UTF-8 byte order mark, which parseJson skips too
    for (uint8_t c : data) {
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            continue;
        return c == '{' || c == '[';
    }
    return false;
}

} // namespace

namespace {

// `release(offset)`: the input below `offset` will not be read again, or only a little (it may drop those pages).
LoadResult loadBytes(std::span<const uint8_t> data, const std::string& name, const LoadOptions& options,
                     const std::function<void(std::span<const uint8_t> data, uint64_t offset)>& release)
{
    LoadResult result;
    auto failWith = [&](Error e) {
        e.path = name;
        result.error = std::move(e);
        return result;
    };
    if (data.empty())
        return failWith(makeError(ErrorCode::Empty, "the file is empty", name));

    std::vector<uint8_t> decompressed;
    const size_t fileSize = data.size();
    const bool compressed = isXz(data);
    if (compressed) {
        const XzContent content = options.format == Format::Auto ? XzContent::Snapshot
            : options.format == Format::Pickle                   ? XzContent::Pickle
                                                                 : XzContent::Bytes;
        if (Error e = decompressXz(data, decompressed, name, content))
            return failWith(std::move(e));
        data = decompressed;
        if (data.empty())
            return failWith(makeError(ErrorCode::Empty, "the compressed file holds no data", name));
    }

    Format format = options.format;
    if (format == Format::Auto) {
        if (looksLikePickle(data))
            format = Format::Pickle;
        else if (looksLikeJson(data))
            format = Format::Json;
        else
            return failWith(makeError(ErrorCode::NotPickle,
                                      "neither a pickle nor JSON: not a memory snapshot (expected a file written by "
                                      "torch.cuda.memory._dump_snapshot())",
                                      name));
    }

    try {
        auto snapshot = std::make_shared<model::Snapshot>();
        Error err;
        if (format == Format::Pickle) {
            // Only the file's own pages may go (a mapping, refilled from the file if touched again); decompressed
            // bytes are the only copy.
            ConsumedFn consumed;
            if (release && !compressed)
                consumed = [&](uint64_t offset) { release(data, offset); };
            err = buildSnapshotFromPickle(data, *snapshot, options.directTraces, options.progress, consumed);
        } else {
            ValueTree tree(data);
            NodeId root = NoNode;
            err = parseJson(data, tree, root, options.progress);
            if (!err)
                err = buildSnapshot(tree, root, *snapshot);
        }
        if (err) {
            // The readers count bytes of what they parsed: of an .xz, its decompressed data, not the file.
            if (compressed && err.hasOffset)
                err.message += " (of the decompressed data; the .xz file is " + std::to_string(fileSize) + " bytes)";
            return failWith(std::move(err));
        }
        model::attachForwardStacks(*snapshot);
        // Every load is checked (the builder checked each entry; here one pass over segments and blocks); what is
        // wrong is said, not refused.
        model::WarningCollector warnings;
        model::checkFinalState(*snapshot, warnings);
        warnings.appendTo(snapshot->warnings);
        // One order whoever found them: by kind (model/loadwarning.h).
        std::stable_sort(snapshot->warnings.begin(), snapshot->warnings.end(),
                         [](const model::LoadWarning& a, const model::LoadWarning& b) { return a.kind < b.kind; });
        result.snapshot = std::move(snapshot);
    } catch (const std::bad_alloc&) {
        return failWith(makeError(ErrorCode::TooLarge, "not enough memory to load it", name));
    }
    return result;
}

} // namespace

LoadResult loadSnapshotFromMemory(std::span<const uint8_t> data, const std::string& name, const LoadOptions& options)
{
    return loadBytes(data, name, options, {});
}

Error readFile(const std::string& path, std::vector<uint8_t>& bytes)
{
    FileBytes file;
    if (Error e = file.open(path))
        return e;
    if (isXz(file.bytes()))
        return decompressXz(file.bytes(), bytes, path);
    bytes.assign(file.bytes().begin(), file.bytes().end());
    return {};
}

LoadResult loadSnapshot(const std::string& path, const LoadOptions& options)
{
    FileBytes file;
    if (Error e = file.open(path)) {
        LoadResult r;
        r.error = std::move(e);
        return r;
    }
    if (options.readAhead && !isXz(file.bytes()))
        file.readAhead();
    // A mapped file's pages that the parse has left behind are dropped as it goes (io/filebytes.h), so that a 1 GB
    // file and the model built from it are not both in memory.
    return loadBytes(file.bytes(), path, options, [&](std::span<const uint8_t> data, uint64_t offset) {
        file.consume(data, offset);
    });
}

} // namespace memscope::io
