// The CUDA driver ABI the agent declares itself (agent/src/cudadriver.h) against the toolkit's cuda.h, where it is
// installed: every constant equal, every struct of the same size with each field at the same offset. Compiled only
// where the toolkit's headers are found; the checks are static, the test function says what was compared.
#include "cudadriver.h"

#include <cuda.h>

#include <QTest>

#include <cstddef>
#include <type_traits>

namespace cu = memscope::agent::cu;

static_assert(cu::Success == CUDA_SUCCESS);
static_assert(cu::ErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(cu::ErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(sizeof(cu::Result) == sizeof(CUresult));
static_assert(std::is_same_v<cu::Device, CUdevice>);
static_assert(std::is_same_v<cu::Context, CUcontext>);
static_assert(std::is_same_v<cu::Stream, CUstream>);
static_assert(std::is_same_v<cu::Event, CUevent>);
static_assert(std::is_same_v<cu::DeviceAddress, CUdeviceptr>);
static_assert(std::is_same_v<cu::MemHandle, CUmemGenericAllocationHandle>);
static_assert(cu::EventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(cu::MemAllocationTypePinned == CU_MEM_ALLOCATION_TYPE_PINNED);
static_assert(cu::MemLocationTypeDevice == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(cu::MemAccessFlagsProtReadWrite == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

static_assert(sizeof(cu::MemLocation) == sizeof(CUmemLocation));
static_assert(offsetof(cu::MemLocation, type) == offsetof(CUmemLocation, type));
static_assert(offsetof(cu::MemLocation, id) == offsetof(CUmemLocation, id));
static_assert(sizeof(cu::MemAllocationProp) == sizeof(CUmemAllocationProp));
static_assert(offsetof(cu::MemAllocationProp, type) == offsetof(CUmemAllocationProp, type));
static_assert(offsetof(cu::MemAllocationProp, requestedHandleTypes)
              == offsetof(CUmemAllocationProp, requestedHandleTypes));
static_assert(offsetof(cu::MemAllocationProp, location) == offsetof(CUmemAllocationProp, location));
static_assert(offsetof(cu::MemAllocationProp, win32HandleMetaData)
              == offsetof(CUmemAllocationProp, win32HandleMetaData));
static_assert(offsetof(cu::MemAllocationProp, allocFlags) == offsetof(CUmemAllocationProp, allocFlags));
static_assert(sizeof(cu::MemAccessDesc) == sizeof(CUmemAccessDesc));
static_assert(offsetof(cu::MemAccessDesc, location) == offsetof(CUmemAccessDesc, location));
static_assert(offsetof(cu::MemAccessDesc, flags) == offsetof(CUmemAccessDesc, flags));

class TestCudaAbi : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void declarationsMatchCudaH()
    {
        // The static_asserts above compiled: say what they compared against.
        qInfo("checked against cuda.h of CUDA %d.%d", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
        QVERIFY(sizeof(cu::MemAllocationProp) == sizeof(CUmemAllocationProp));
    }
};

QTEST_GUILESS_MAIN(TestCudaAbi)
#include "tst_cudaabi.moc"
