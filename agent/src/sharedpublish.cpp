// Part of libmemscope-agent.so only (not of memscope-agent-core): turns publishing on by default there
// (agentapi.cpp reads it through a weak reference, so the static core used by tests and tools does not publish
// unless asked). Any thread.
extern "C" __attribute__((visibility("hidden"))) bool memscopeAgentPublishesByDefault();

extern "C" bool memscopeAgentPublishesByDefault() { return true; }
