// Forward stacks of backward allocations. See forwardframes.h.
#include "model/forwardframes.h"

#include <charconv>

namespace memscope::model {

std::optional<TracebackLine> parseTracebackLine(std::string_view text)
{
    // CPython's traceback.FrameSummary formatting (Lib/traceback.py, StackSummary.format_frame_summary):
    // '  File "{filename}", line {lineno}, in {name}\n' and the source line indented below it.
    constexpr std::string_view FileTag = "File \"", LineTag = "\", line ", InTag = ", in ";
    const size_t file = text.find(FileTag);
    if (file == std::string_view::npos)
        return std::nullopt;
    const size_t nameStart = file + FileTag.size();
    const size_t lineTag = text.find(LineTag, nameStart);
    if (lineTag == std::string_view::npos)
        return std::nullopt;
    TracebackLine out;
    out.filename = text.substr(nameStart, lineTag - nameStart);
    const char* digits = text.data() + lineTag + LineTag.size();
    const char* end = text.data() + text.size();
    uint64_t line = 0;
    const auto [after, ec] = std::from_chars(digits, end, line);
    if (ec != std::errc() || after == digits)
        return std::nullopt;
    out.line = LineNumber::fromUnsigned(line);
    std::string_view rest(after, size_t(end - after));
    if (!rest.starts_with(InTag))
        return std::nullopt;
    rest.remove_prefix(InTag.size());
    out.name = rest.substr(0, rest.find('\n'));
    return out;
}

void attachForwardStacks(Snapshot& s)
{
    bool any = false;
    for (const Extras& e : s.extras)
        for (const auto& [key, value] : e)
            any = any || key == "forward_frames";
    if (!any)
        return;
    StackInterner interner(s);
    std::vector<StackId> byExtras(s.extras.size(), EmptyStack);
    for (size_t x = 0; x < s.extras.size(); ++x) {
        for (const auto& [key, value] : s.extras[x]) {
            if (key != "forward_frames" || value.kind != Value::Kind::List)
                continue;
            std::vector<FrameId> frames;
            for (auto it = value.items.rbegin(); it != value.items.rend(); ++it) { // innermost first
                if (it->kind != Value::Kind::String)
                    continue;
                if (const auto t = parseTracebackLine(it->text))
                    frames.push_back(interner.frame(s.strings.intern(t->name), s.strings.intern(t->filename), t->line));
            }
            if (!frames.empty())
                byExtras[x] = interner.stack(frames);
        }
    }
    s.forwardStacks.assign(s.entryForms.size(), EmptyStack);
    for (size_t f = 0; f < s.entryForms.size(); ++f) {
        const uint32_t x = s.entryForms.get(FormId { uint32_t(f) }).extraIndex;
        if (x < byExtras.size())
            s.forwardStacks[f] = byExtras[x];
    }
}

} // namespace memscope::model
