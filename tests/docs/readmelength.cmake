# Fails when README (a path) has MAX_LINES lines or more, naming the file, its length and the bound.
file(READ "${README}" text)
string(REGEX MATCHALL "\n" newlines "${text}")
list(LENGTH newlines count)
if(count GREATER_EQUAL MAX_LINES)
    message(FATAL_ERROR "${README}: ${count} lines, the front door's bound is ${MAX_LINES}: move long material to docs/")
endif()
message(STATUS "${README}: ${count} lines (bound ${MAX_LINES})")
