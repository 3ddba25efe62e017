// FUSEOPS_HD: a function shared by host and device code (inlined on both); plain inline in host-only builds.
#pragma once

#if defined(__CUDACC__)
#define FUSEOPS_HD __host__ __device__ __forceinline__
#else
#define FUSEOPS_HD inline
#endif
