# Makes the hand-made fixtures of tests/data from a real snapshot of the corpus (tests/data/README.md lists them).
# Run from the checkout: python3 tests/data/make_fixtures.py. Plain pickle.dump, as torch.cuda.memory._dump_snapshot
# writes (Python's default protocol). Deterministic: the same input gives the same bytes.
import copy
import pickle

SOURCE = 'tests/data/corpus/streams_record_stream.pickle'


def load():
    with open(SOURCE, 'rb') as f:
        return pickle.load(f)


def dump(snapshot, name):
    with open('tests/data/' + name, 'wb') as f:
        pickle.dump(snapshot, f, protocol=4)


# Three kinds of inconsistency at once, each in one place.
s = load()
# Segment 0's first block (inactive) grows by 512 B: its blocks no longer tile it.
s['segments'][0]['blocks'][0]['size'] += 512
# Segment 2 (and its blocks) moves 512 B into segment 1, on the same device: they overlap.
delta = s['segments'][1]['address'] + 512 - s['segments'][2]['address']
s['segments'][2]['address'] += delta
for b in s['segments'][2]['blocks']:
    b['address'] += delta
# Trace entry 5 (a free_requested) gets a negative size.
s['device_traces'][0][5] = dict(s['device_traces'][0][5], size=-3)
dump(s, 'inconsistent.pickle')

# Every class of integer a snapshot can hold: exact ones and ones no 64-bit field can hold.
s = load()
entries = s['device_traces'][0]
# Entry 1 (an alloc): a frame line of 2^64 - 1 (torch.compile's, from Python) and one of -1 (the C++ writer's).
frames = [dict(f) for f in entries[1]['frames']]
frames[0]['line'] = 2**64 - 1
frames[1]['line'] = -1
entries[1] = dict(entries[1], frames=frames)
# Entry 2 (an alloc): a time_us of 2^64 - 1, beyond the int64_t PyTorch writes it from: left out.
entries[2] = dict(entries[2], time_us=2**64 - 1)
# Entry 3 (a segment_alloc): a size of 2^70, wider than 64 bits: left out.
entries[3] = dict(entries[3], size=2**70)
# allocator_settings: an unsigned 64-bit value, kept exactly.
s['allocator_settings'] = copy.deepcopy(s['allocator_settings'])
s['allocator_settings']['max_split_size'] = 2**64 - 1
dump(s, 'wide-integers.pickle')

# Two devices, the OOM on the second: the corpus's record_stream job on cuda:0 (no OOM) beside the real OOM
# snapshot's trace and segments moved to cuda:1.
s = load()
with open('tests/data/oom.pickle', 'rb') as f:
    oom = pickle.load(f)
for segment in oom['segments']:
    segment = dict(segment, device=1)
    s['segments'].append(segment)
s['device_traces'] = [s['device_traces'][0], oom['device_traces'][0]]
dump(s, 'oom-on-cuda1.pickle')

# A snapshot without a trace (torch.cuda.memory._snapshot() without _record_memory_history, or its trace dropped):
# the corpus's record_stream job's segments and blocks, with their frames, and an empty trace list.
s = load()
s['device_traces'] = [[]]
dump(s, 'state-only.pickle')

# A trace whose ring overflowed: PyTorch's history keeps the last max_entries events and says it dropped older ones
# (allocator_settings.trace_alloc_overflowed, trace_alloc_max_entries); the record_stream job's last 150 entries.
s = load()
s['device_traces'] = [s['device_traces'][0][-150:]]
s['allocator_settings'] = dict(s['allocator_settings'], trace_alloc_overflowed=True, trace_alloc_max_entries=150)
dump(s, 'ring-overflowed.pickle')
