// The real device backend: the CUDA driver API (libcuda.so.1), opened with dlopen at run time so that nothing links
// against CUDA and the agent loads on machines without a GPU. cuMemAlloc/cuMemFree play cudaMalloc/cudaFree (the
// runtime calls them in the device's primary context, which is the context used here too), events are
// CU_EVENT_DISABLE_TIMING events, and expandable segments use cuMemAddressReserve + cuMemCreate + cuMemMap +
// cuMemSetAccess exactly as PyTorch's ExpandableSegment does. Stream handles are cudaStream_t values (CUstream).
//
// Thread-safe; always built (the driver ABI it uses is declared in cudadriver.h, no toolkit needed).
#pragma once

#include "backend.h"

#include <memory>
#include <string>

namespace memscope::agent {

// Loads the driver and sets up every device; nullptr (with the reason in `error`) when there is no driver or no
// device.
std::unique_ptr<Backend> createCudaBackend(std::string* error);

} // namespace memscope::agent
