// The few CUDA driver API types and constants the CUDA backend uses, declared here so that the agent builds without
// the CUDA toolkit: the driver is loaded with dlopen("libcuda.so.1") at run time and its entry points found by name
// (cudabackend.cpp). Layouts and values are the driver ABI's, as cuda.h defines them (CUresult, CUdevice, the opaque
// context/stream/event handles, CUdeviceptr, CUmemGenericAllocationHandle, CUmemLocation, CUmemAllocationProp,
// CUmemAccessDesc; CUDA 11 to 13 keep them). tests/agent/tst_cudaabi checks each against cuda.h where the toolkit's
// headers are installed.
#pragma once

// The driver's opaque handle types, at global scope as cuda.h declares them (pointers to them are the handles).
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;

namespace memscope::agent::cu {

using Result = int; // CUresult
constexpr Result Success = 0; // CUDA_SUCCESS
constexpr Result ErrorOutOfMemory = 2; // CUDA_ERROR_OUT_OF_MEMORY
constexpr Result ErrorNotReady = 600; // CUDA_ERROR_NOT_READY

using Device = int; // CUdevice
using Context = ::CUctx_st*; // CUcontext
using Stream = ::CUstream_st*; // CUstream
using Event = ::CUevent_st*; // CUevent
using DeviceAddress = unsigned long long; // CUdeviceptr (64-bit)
using MemHandle = unsigned long long; // CUmemGenericAllocationHandle

constexpr unsigned EventDisableTiming = 0x2; // CU_EVENT_DISABLE_TIMING
constexpr unsigned MemAllocationTypePinned = 0x1; // CU_MEM_ALLOCATION_TYPE_PINNED
constexpr unsigned MemLocationTypeDevice = 0x1; // CU_MEM_LOCATION_TYPE_DEVICE
constexpr unsigned MemAccessFlagsProtReadWrite = 0x3; // CU_MEM_ACCESS_FLAGS_PROT_READWRITE

struct MemLocation { // CUmemLocation
    unsigned type; // CUmemLocationType
    int id;
};

struct MemAllocationProp { // CUmemAllocationProp
    unsigned type; // CUmemAllocationType
    unsigned requestedHandleTypes; // CUmemAllocationHandleType
    MemLocation location;
    void* win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
};

struct MemAccessDesc { // CUmemAccessDesc
    MemLocation location;
    unsigned flags; // CUmemAccess_flags
};

} // namespace memscope::agent::cu
