// segment_engine.h: how the device path fills and reduces a batch's arena without an ATen call
// per tensor (TPROBE_DEVICE_STATS=kernel; device_stats.h has the contract, segment_kernel.h the
// kernel).
//
// For a CUDA device the engine is the CUDA driver's (libcuda.so.1) and the kernel is compiled at
// run time by NVRTC (TPROBE_NVRTC_LIBRARY, else the libnvrtc the process or the loader finds;
// python/tprobe points the variable at the one a pip torch ships), for the device's architecture,
// once per process and device. Both are opened with dlopen: nothing of CUDA is linked or included,
// so the capture builds the same against a CPU-only LibTorch, where the engine is simply absent.
// Torch's current stream is the stream the copies and the launch go to (its cudaStream_t read
// through libc10_cuda's CUDAStream::stream()), so they are ordered with the training's kernels
// as ATen's copy_ would be. For CPU tensors (TPROBE_DEVICE_PATH_ON_CPU=1, the device path's tests)
// the engine is the host's: memcpy and segment_kernel.h's host twin, at once.
//
// Thread-safety: called under the capture state's mutex (capture_state.h); an engine is made once
// and lives as long as the process.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

namespace tprobe::torch_capture {

class segment_engine {
 public:
  virtual ~segment_engine() = default;
  // Enqueues on `stream` a copy of `bytes` from `source` (the device's memory) into `destination`
  // (the arena). Throws std::runtime_error naming the driver's error.
  virtual void copy(void *destination, const void *source, size_t bytes, const std::optional<c10::Stream> &stream) = 0;
  // Enqueues on `stream` the kernel over `count` segments (tprobe_segment, in the device's memory)
  // of `arena`, into `out` ([6, count] float64, the device's). Throws as copy does.
  virtual void reduce(const void *arena, const void *segments, unsigned int count, double *out,
                      const std::optional<c10::Stream> &stream) = 0;
};

// The engine for tensors on `device`, made on first use; nullptr where there is none (a device
// other than CPU and CUDA; no driver, no NVRTC, a failed compile), with the reason in `why`.
segment_engine *segment_engine_for(const at::Device &device, std::string &why);

}  // namespace tprobe::torch_capture
