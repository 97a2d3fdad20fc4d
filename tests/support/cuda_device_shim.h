// What NVRTC provides to a kernel's source without an include, for clang's CUDA front end with
// -nocudainc (tests/cmake/test_segment_kernel_ptx.cmake): the qualifiers, blockIdx and threadIdx
// (clang's own header), and the bit casts segment_kernel.h uses.
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __forceinline__ __attribute__((always_inline)) inline
#define __launch_bounds__(threads) __attribute__((launch_bounds(threads)))
#include <__clang_cuda_builtin_vars.h>
__device__ inline float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
__device__ inline unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
