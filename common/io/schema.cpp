// Name -> Field lookup for the snapshot schema. See schema.h.
#include "io/schema.h"

#include <unordered_map>

namespace memscope::io::schema {

Field fieldFor(std::string_view key)
{
    static const std::unordered_map<std::string_view, Field> table = [] {
        std::unordered_map<std::string_view, Field> t;
        for (size_t i = 1; i < size_t(Field::Count); ++i)
            t.emplace(FieldNames[i], Field(i));
        return t;
    }();
    auto it = table.find(key);
    return it == table.end() ? Field::Unknown : it->second;
}

} // namespace memscope::io::schema
