// KeyPlans: which keys a writer emits for each object, and in what order. An object whose file recorded a key order
// (a LayoutId) is written in that order, its unknown keys taken from its extras; an object made in code gets
// PyTorch's key order (torch/csrc/cuda/memory_snapshot.cpp) followed by its extras. Shared by the pickle and JSON
// writers, so both write the same keys in the same order. Built once per encode; one thread.
#pragma once

#include "io/schema.h"
#include "model/snapshot.h"

#include <array>
#include <initializer_list>
#include <span>
#include <vector>

namespace memscope::io {

// The kinds of objects whose key order the model records, and which keys the builder reads for each.
enum class ObjectKind : uint8_t { Top, Segment, Block, Entry, Count };

struct KeyPlanItem {
    schema::Field field = schema::Field::Unknown; // Unknown: the value comes from the object's extras
    bool keyFromExtras = false; // the key is the next one of the object's extras (no recorded layout)
    model::StringId key = model::EmptyString; // the key as recorded in the layout
};

class KeyPlans {
public:
    explicit KeyPlans(const model::Snapshot& snapshot);

    // The keys of one object: its recorded layout, or `defaults` then one item per extra.
    std::span<const KeyPlanItem> plan(ObjectKind kind, model::LayoutId layout, std::initializer_list<schema::Field> defaults,
                                      const model::Extras* extras);

private:
    std::array<std::vector<std::vector<KeyPlanItem>>, size_t(ObjectKind::Count)> m_plans;
    std::array<std::vector<KeyPlanItem>, size_t(ObjectKind::Count)> m_scratch;
};

} // namespace memscope::io
