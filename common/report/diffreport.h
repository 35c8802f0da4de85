// Reports of a memory diff (model/diff.h's DiffResult): a readable text, the documented JSON (docs/diff-json.md),
// and folded stacks for flame graphs. What `memscope-cli diff` prints; pure functions of the result, any thread.
#pragma once

#include "model/diff.h"

#include <cstddef>
#include <string>

namespace memscope::report {

struct DiffReportOptions {
    model::DiffGrouping by = model::DiffGrouping::Stack;
    size_t top = 0; // rows per list; 0: all (the CLI's text shows 10 unless told)
    size_t maxFrames = 8; // text: frames shown per stack
    model::DiffGrowthMetric growthMetric = model::DiffGrowthMetric::Active;
};

// A readable report: both sides, the totals table, per device/pool/stream deltas, segments, lifetimes, then the top
// growth and top shrink rows of `by`.
std::string diffText(const model::DiffResult& result, const DiffReportOptions& options = {});
// The documented JSON (docs/diff-json.md): stable keys, integers for every byte count.
std::string diffJson(const model::DiffResult& result, const DiffReportOptions& options = {});
// Folded stacks, one line per stack whose bytes changed: `frame;frame;frame <signed delta bytes>`, outermost frame
// first, frames as PyTorch prints them (basename:line:name), filtered. With StackAndSize the last frame is the block
// size (`<512 B>`). `top` limits the lines (0: all). Segment grouping has no stacks: returns "".
std::string diffFolded(const model::DiffResult& result, const DiffReportOptions& options = {});
// Two-column folded stacks, `stack <bytes A> <bytes B>`, every stack live on either side: what FlameGraph's
// difffolded.pl writes and flamegraph.pl draws as a differential flame graph (flamegraph.pl reads no negative
// counts, so the signed form above is for tools that do).
std::string diffFoldedTwoColumn(const model::DiffResult& result, const DiffReportOptions& options = {});

} // namespace memscope::report
