// KeyPlans: key order for the writers. See keyplan.h.
#include "io/keyplan.h"

namespace memscope::io {

using schema::Field;

namespace {
    constexpr uint64_t bit(Field f) { return uint64_t(1) << unsigned(f); }
    static_assert(size_t(Field::Count) <= 64);
    // The keys the SnapshotBuilder reads for each ObjectKind; any other key of such an object is in its extras.
    constexpr uint64_t KnownFields[] = {
        bit(Field::Segments) | bit(Field::DeviceTraces) | bit(Field::AllocatorSettings) | bit(Field::ExternalAnnotations),
        bit(Field::Device) | bit(Field::Address) | bit(Field::TotalSize) | bit(Field::AllocatedSize)
            | bit(Field::ActiveSize) | bit(Field::RequestedSize) | bit(Field::Stream) | bit(Field::SegmentType)
            | bit(Field::SegmentPoolId) | bit(Field::IsExpandable) | bit(Field::Frames) | bit(Field::Blocks),
        bit(Field::Address) | bit(Field::Size) | bit(Field::RequestedSize) | bit(Field::State) | bit(Field::Frames)
            | bit(Field::History),
        bit(Field::Action) | bit(Field::Addr) | bit(Field::DeviceFree) | bit(Field::Size) | bit(Field::Stream)
            | bit(Field::TimeUs) | bit(Field::CompileContext) | bit(Field::UserMetadata) | bit(Field::Frames),
    };
    static_assert(std::size(KnownFields) == size_t(ObjectKind::Count));
} // namespace

KeyPlans::KeyPlans(const model::Snapshot& snapshot)
{
    const size_t layoutCount = snapshot.layouts.size();
    for (auto& plans : m_plans)
        plans.resize(layoutCount);
    for (size_t l = 1; l < layoutCount; ++l) {
        for (model::StringId key : snapshot.layouts.get(model::LayoutId { static_cast<uint16_t>(l) })) {
            const Field f = schema::fieldFor(snapshot.str(key));
            for (size_t k = 0; k < size_t(ObjectKind::Count); ++k) {
                const bool known = (KnownFields[k] & bit(f)) != 0;
                m_plans[k][l].push_back(KeyPlanItem { known ? f : Field::Unknown, false, key });
            }
        }
    }
}

std::span<const KeyPlanItem> KeyPlans::plan(ObjectKind kind, model::LayoutId layout,
                                            std::initializer_list<Field> defaults, const model::Extras* extras)
{
    if (model::raw(layout) != 0 && model::raw(layout) < m_plans[size_t(kind)].size())
        return m_plans[size_t(kind)][model::raw(layout)];
    std::vector<KeyPlanItem>& items = m_scratch[size_t(kind)];
    items.clear();
    for (Field f : defaults)
        items.push_back(KeyPlanItem { f, false, model::EmptyString });
    if (extras) {
        for (size_t i = 0; i < extras->size(); ++i)
            items.push_back(KeyPlanItem { Field::Unknown, true, model::EmptyString });
    }
    return items;
}

} // namespace memscope::io
