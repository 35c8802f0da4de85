// The error every reader and writer in common/io returns: a code a program can test, and a message a person can
// read, naming the input and the reason. Plain value type; any thread.
#pragma once

#include <cstdint>
#include <string>

namespace memscope::io {

enum class ErrorCode : uint8_t {
    None,
    Io, // cannot open, read or write the file
    Empty, // zero bytes
    NotPickle, // neither a pickle nor JSON
    Truncated, // ended before the pickle's STOP / the JSON document's end
    Corrupt, // malformed: bad opcode, bad memo reference, wrong types on the stack, trailing garbage
    Refused, // an opcode that would execute code in Python's unpickler (GLOBAL, REDUCE, ...)
    TooNew, // pickle protocol above 5
    TooDeep, // nesting or memo beyond the reader's limits
    TooLarge, // an integer beyond 64 bits, a length beyond the file
    NotSnapshot, // a valid pickle/JSON that is not a memory snapshot
    Cancelled, // the progress callback asked to stop
    Count
};

struct Error {
    ErrorCode code = ErrorCode::None;
    std::string message; // the reason, without the path
    std::string path; // the file (or the name given for an in-memory buffer)
    uint64_t offset = 0; // byte offset in the input where the problem was found
    bool hasOffset = false;

    explicit operator bool() const { return code != ErrorCode::None; }
    // "PATH: REASON (at byte N)": one line for a user.
    std::string toString() const;
};

std::string_view errorCodeName(ErrorCode code);

} // namespace memscope::io
