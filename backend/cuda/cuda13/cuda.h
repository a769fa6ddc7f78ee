// Building gorgonia.org/cu v0.9.6 against CUDA 13 headers (make cuda CUDA_COMPAT=cuda13).
//
// CUDA 13 pointed five driver API names that cu calls at new versions with new parameter
// lists (cuCtxCreate -> _v4, cuMemAdvise and cuMemPrefetchAsync -> _v2 with a
// CUmemLocation, cuGraphAddDependencies and cuGraphGetEdges -> _v2 with edge data), so cu
// no longer compiles. This header, named cuda.h so that it stands in for the real one, maps
// those names back to the versions cu was written for. It is found first because its
// folder comes first on the include path (CGO_CFLAGS precede cu's own -I flags) and takes
// the real header with #include_next. The driver keeps exporting them for
// programs built with CUDA 12, so the binary runs on CUDA 12 and 13 drivers alike. moerun
// itself calls none of the five (it uses the primary context, and no managed memory or
// graphs through cu); this only lets cu compile.
#ifndef MOERUN_CUDA13_COMPAT_H
#define MOERUN_CUDA13_COMPAT_H

#include_next <cuda.h>

#if CUDA_VERSION >= 13000
#undef cuCtxCreate
#define cuCtxCreate cuCtxCreate_v2
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

#undef cuMemAdvise
CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);

#undef cuMemPrefetchAsync
CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);

#undef cuGraphAddDependencies
CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                        size_t numDependencies);

#undef cuGraphGetEdges
CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges);
#endif

#endif
