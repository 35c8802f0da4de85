// Parsing of PYTORCH_CUDA_ALLOC_CONF-style settings. See config.h.
#include "config.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace memscope::agent {

namespace {

    bool isPowerOf2(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

    size_t log2Floor(size_t v) { return v == 0 ? 0 : 63 - static_cast<size_t>(std::countl_zero(uint64_t(v))); }

    // c10::CachingAllocator::ConfigTokenizer: ',', ':', '[' and ']' are tokens of their own, spaces separate
    // nothing and are dropped, everything else accumulates into a word.
    std::vector<std::string> tokenize(std::string_view text)
    {
        std::vector<std::string> tokens;
        std::string word;
        for (char c : text) {
            if (c == ',' || c == ':' || c == '[' || c == ']') {
                if (!word.empty())
                    tokens.push_back(std::move(word));
                word.clear();
                tokens.emplace_back(1, c);
            } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                word.push_back(c);
            }
        }
        if (!word.empty())
            tokens.push_back(std::move(word));
        return tokens;
    }

    class Parser {
    public:
        explicit Parser(std::string_view text)
            : m_tokens(tokenize(text))
        {
        }

        bool parse(AllocatorConfig& c)
        {
            for (m_i = 0; m_i < m_tokens.size(); ++m_i) {
                m_key = m_tokens[m_i];
                if (!parseKey(c))
                    return false;
                if (m_i + 1 < m_tokens.size() && !expect(","))
                    return false;
            }
            return true;
        }

        const std::string& error() const { return m_error; }

    private:
        bool fail(std::string why)
        {
            m_error = m_key.empty() ? std::move(why) : m_key + ": " + std::move(why);
            return false;
        }

        // ConfigTokenizer::checkToken.
        bool expect(std::string_view token)
        {
            ++m_i;
            if (m_i >= m_tokens.size())
                return fail("expected '" + std::string(token) + "' but the text ended");
            if (m_tokens[m_i] != token)
                return fail("expected '" + std::string(token) + "' but found '" + m_tokens[m_i] + "'");
            return true;
        }

        bool nextValue(std::string& out)
        {
            ++m_i;
            if (m_i >= m_tokens.size())
                return fail("expected a value but the text ended");
            out = m_tokens[m_i];
            return true;
        }

        // ConfigTokenizer::toSizeT: a non-negative decimal integer.
        bool toSize(const std::string& s, size_t& out)
        {
            uint64_t v = 0;
            auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (s.empty() || ec != std::errc() || end != s.data() + s.size())
                return fail("'" + s + "' is not a non-negative integer");
            out = static_cast<size_t>(v);
            return true;
        }

        bool toDouble(const std::string& s, double& out)
        {
            char* end = nullptr;
            out = std::strtod(s.c_str(), &end);
            if (s.empty() || end != s.c_str() + s.size())
                return fail("'" + s + "' is not a number");
            return true;
        }

        // ConfigTokenizer::toBool accepts True/False; the lower-case spellings are accepted too.
        bool toBool(const std::string& s, bool& out)
        {
            if (s == "True" || s == "true" || s == "1") {
                out = true;
                return true;
            }
            if (s == "False" || s == "false" || s == "0") {
                out = false;
                return true;
            }
            return fail("expected True or False, found '" + s + "'");
        }

        bool sizeValue(size_t& out)
        {
            std::string v;
            return expect(":") && nextValue(v) && toSize(v, out);
        }

        bool boolValue(bool& out)
        {
            std::string v;
            return expect(":") && nextValue(v) && toBool(v, out);
        }

        // AcceleratorAllocatorConfig::parseMaxSplitSize / parseMaxNonSplitRoundingSize: megabytes, at least
        // kLargeBuffer / 1 MiB (20), capped so that the byte count cannot overflow.
        bool megabytesAtLeastLargeBuffer(size_t& out)
        {
            size_t mb = 0;
            if (!sizeValue(mb))
                return false;
            constexpr size_t minMb = LargeBuffer / MiB;
            if (mb < minMb)
                return fail("too small: " + std::to_string(mb) + ", must be >= " + std::to_string(minMb));
            mb = std::min(mb, std::numeric_limits<size_t>::max() / MiB);
            out = mb * MiB;
            return true;
        }

        // AcceleratorAllocatorConfig::parseRoundUpPower2Divisions: either one power of two for every interval, or
        // `[boundary_mb:divisions, ..., >:divisions]` where the first entry also covers every interval below it
        // and `>` covers every interval above the last boundary.
        bool roundupDivisions(AllocatorConfig& c)
        {
            if (!expect(":"))
                return false;
            std::string v;
            if (!nextValue(v))
                return false;
            auto& d = c.roundupPower2Divisions;
            if (v != "[") {
                size_t value = 0;
                if (!toSize(v, value))
                    return false;
                if (!isPowerOf2(value))
                    return fail("the divisions have to be a power of 2, found " + std::to_string(value));
                d.fill(value);
                return true;
            }
            bool first = true;
            size_t lastIndex = 0;
            while (true) {
                std::string boundary;
                if (!nextValue(boundary))
                    return fail("expected a closing ']' but the text ended");
                if (boundary == "]")
                    return true;
                std::string valueText;
                size_t value = 0;
                if (!expect(":") || !nextValue(valueText) || !toSize(valueText, value))
                    return false;
                if (value != 0 && !isPowerOf2(value))
                    return fail("the divisions have to be a power of 2 or 0, found " + std::to_string(value));
                if (boundary == ">") {
                    std::fill(d.begin() + std::min(lastIndex + 1, d.size()), d.end(), value);
                } else {
                    size_t b = 0;
                    if (!toSize(boundary, b))
                        return false;
                    if (!isPowerOf2(b))
                        return fail("the interval boundaries have to be powers of 2 (in MB), found " + boundary);
                    const size_t index = std::min(log2Floor(b), d.size() - 1);
                    if (first) {
                        std::fill(d.begin(), d.begin() + index, value);
                        first = false;
                    }
                    d[index] = value;
                    lastIndex = index;
                }
                if (m_i + 1 >= m_tokens.size())
                    return fail("expected a closing ']' but the text ended");
                if (m_tokens[m_i + 1] != "]" && !expect(","))
                    return false;
            }
        }

        bool parseKey(AllocatorConfig& c)
        {
            const std::string& key = m_key;
            if (key == "max_split_size_mb")
                return megabytesAtLeastLargeBuffer(c.maxSplitSize);
            if (key == "max_non_split_rounding_mb")
                return megabytesAtLeastLargeBuffer(c.maxNonSplitRoundingSize);
            if (key == "garbage_collection_threshold") {
                std::string v;
                double t = 0;
                if (!expect(":") || !nextValue(v) || !toDouble(v, t))
                    return false;
                // AcceleratorAllocatorConfig::parseGarbageCollectionThreshold
                if (!(t > 0.0 && t < 1.0))
                    return fail("must be in (0.0, 1.0), found " + v);
                c.garbageCollectionThreshold = t;
                return true;
            }
            if (key == "roundup_power2_divisions")
                return roundupDivisions(c);
            if (key == "expandable_segments")
                return boolValue(c.expandableSegments);
            if (key == "per_process_memory_fraction") {
                std::string v;
                double f = 0;
                if (!expect(":") || !nextValue(v) || !toDouble(v, f))
                    return false;
                if (!(f >= 0.0 && f <= 1.0))
                    return fail("must be in [0.0, 1.0], found " + v);
                c.perProcessMemoryFraction = f;
                return true;
            }
            if (key == "backend") {
                std::string v;
                if (!expect(":") || !nextValue(v))
                    return false;
                // CUDAAllocatorConfig::parseAllocatorConfig knows native and cudaMallocAsync; memscope is a
                // native caching allocator only.
                if (v == "native")
                    return true;
                if (v == "cudaMallocAsync")
                    return fail("cudaMallocAsync is not supported: memscope is the native caching allocator");
                return fail("unknown allocator backend '" + v + "', options are native and cudaMallocAsync");
            }
            if (key == "release_lock_on_cudamalloc" || key == "release_lock_on_device_malloc")
                return boolValue(c.releaseLockOnMalloc);
            if (key == "graph_capture_record_stream_reuse")
                return boolValue(c.graphCaptureRecordStreamReuse);
            // Pinned host memory settings (CUDAAllocatorConfig / AcceleratorAllocatorConfig): checked, unused.
            if (key == "pinned_use_cuda_host_register" || key == "pinned_use_device_host_register"
                || key == "pinned_use_background_threads") {
                bool unused = false;
                return boolValue(unused);
            }
            if (key == "pinned_num_register_threads") {
                size_t n = 0;
                if (!sizeValue(n))
                    return false;
                if (!isPowerOf2(n) || n > 128)
                    return fail("has to be a power of 2 no larger than 128, found " + std::to_string(n));
                return true;
            }
            if (key == "pinned_reserve_segment_size_mb") {
                size_t n = 0;
                if (!sizeValue(n))
                    return false;
                return n > 0 ? true : fail("has to be greater than 0");
            }
            if (key == "," || key == ":" || key == "[" || key == "]") {
                const std::string found = key;
                m_key.clear();
                return fail("expected a key, found '" + found + "'");
            }
            // CUDAAllocatorConfig::parseArgs: "Unrecognized key '...' in CUDA allocator config."
            const std::string unknown = key;
            m_key.clear();
            return fail("unrecognized key '" + unknown + "'");
        }

        std::vector<std::string> m_tokens;
        size_t m_i = 0;
        std::string m_key;
        std::string m_error;
    };

} // namespace

size_t AllocatorConfig::roundupDivisionsFor(size_t size) const
{
    // AcceleratorAllocatorConfig::roundup_power2_divisions: interval index = log2(size) - log2(1 MiB), clamped.
    constexpr size_t intervalStart = 20;
    const size_t logSize = log2Floor(size);
    size_t index = logSize > intervalStart ? logSize - intervalStart : 0;
    index = std::min(index, RoundUpPowerOfTwoIntervals - 1);
    return roundupPower2Divisions[index];
}

ConfigParse parseAllocatorConfig(std::string_view text)
{
    ConfigParse result;
    result.config.text = std::string(text);
    Parser parser(text);
    if (!parser.parse(result.config)) {
        result.ok = false;
        result.error = parser.error();
    }
    return result;
}

ConfigParse allocatorConfigFromEnvironment(std::string* source)
{
    for (const char* name : { "MEMSCOPE_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF" }) {
        if (const char* value = std::getenv(name)) {
            if (source)
                *source = name;
            ConfigParse p = parseAllocatorConfig(value);
            if (!p.ok)
                p.error = std::string(name) + ": " + p.error;
            return p;
        }
    }
    if (source)
        source->clear();
    return {};
}

std::string settingsLines(const AllocatorConfig& config)
{
    std::string out;
    auto line = [&](const char* key, char type, const std::string& value) {
        out += key;
        out += '=';
        out += type;
        out += ':';
        // The text is the user's: a line break in it would end the line (the wire has no escapes).
        for (char c : value)
            out += c == '\n' || c == '\r' ? ' ' : c;
        out += '\n';
    };
    char real[64];
    std::snprintf(real, sizeof real, "%.17g", config.garbageCollectionThreshold);
    line("PYTORCH_CUDA_ALLOC_CONF", 's', config.text);
    line("max_split_size", 'i',
         config.maxSplitSize == std::numeric_limits<size_t>::max() ? "-1" : std::to_string(config.maxSplitSize));
    line("garbage_collection_threshold", 'f', real);
    line("expandable_segments", 'b', config.expandableSegments ? "1" : "0");
    line("pinned_num_register_threads", 'i', "1");
    line("release_lock_on_cudamalloc", 'b', config.releaseLockOnMalloc ? "1" : "0");
    line("pinned_use_cuda_host_register", 'b', "0");
    line("graph_capture_record_stream_reuse", 'b', config.graphCaptureRecordStreamReuse ? "1" : "0");
    std::string divisions;
    for (size_t i = 0; i < RoundUpPowerOfTwoIntervals; ++i) {
        if (i > 0)
            divisions += ',';
        divisions += std::to_string(size_t(1) << i) + ':' + std::to_string(config.roundupPower2Divisions[i]);
    }
    line("roundup_power2_divisions", 'd', divisions);
    return out;
}

} // namespace memscope::agent
