// The one translation unit of libmemscope-agent.so itself: everything else is memscope-agent-core, linked whole.
// Any thread.
#include "memscope/agent.h"

#ifndef MEMSCOPE_AGENT_VERSION
#define MEMSCOPE_AGENT_VERSION "unknown"
#endif

extern "C" const char* memscope_agent_version(void) noexcept { return MEMSCOPE_AGENT_VERSION; }
