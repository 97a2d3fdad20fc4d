// segment_engine.cpp: the host's engine and the CUDA driver's (segment_engine.h has the contract).
#include "segment_engine.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "segment_kernel.h"
#include "segment_kernel_source.h"  // generated: segment_kernel.h as the string segment_kernel_source

namespace tprobe::torch_capture {

namespace {

class host_engine final : public segment_engine {
 public:
  void copy(void *destination, const void *source, size_t bytes, const std::optional<c10::Stream> &) override {
    std::memcpy(destination, source, bytes);
  }
  void reduce(const void *arena, const void *segments, unsigned int count, double *out,
              const std::optional<c10::Stream> &) override {
    tprobe_segment_statistics_on_host(static_cast<const unsigned char *>(arena),
                                      static_cast<const tprobe_segment *>(segments), count, out);
  }
};

// The parts of the CUDA driver API and of NVRTC used here, declared as cuda.h and nvrtc.h do
// (their ABI is stable: the entry points below have had these signatures since CUDA 4 and 7).
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUdeviceptr = unsigned long long;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram *;

// Points `f` at `library`'s entry point `name`; throws naming both if it has none.
template <class F>
void bind(F &f, void *library, const char *library_name, const char *name) {
  void *entry = dlsym(library, name);
  if (!entry) throw std::runtime_error(std::string(library_name) + " has no " + name);
  f = reinterpret_cast<F>(entry);
}

// The first of `names` that is already loaded, else the first the loader finds.
void *open_first(const std::vector<std::string> &names, std::string &tried) {
  for (const int mode : {RTLD_NOW | RTLD_NOLOAD, RTLD_NOW})
    for (const std::string &name : names)
      if (void *h = dlopen(name.c_str(), mode)) return h;
  for (const std::string &name : names) tried += (tried.empty() ? "" : ", ") + name;
  return nullptr;
}

struct driver_api {
  CUresult (*init)(unsigned int);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*device_attribute)(int *, int, CUdevice);
  CUresult (*primary_context)(CUcontext *, CUdevice);
  CUresult (*context_current)(CUcontext *);
  CUresult (*context_set)(CUcontext);
  CUresult (*module_load)(CUmodule *, const void *);
  CUresult (*module_function)(CUfunction *, CUmodule, const char *);
  CUresult (*launch)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                     unsigned int, CUstream, void **, void **);
  CUresult (*copy)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*error_string)(CUresult, const char **);

  void check(CUresult r, const char *what) const {
    if (r == 0) return;
    const char *text = nullptr;
    if (error_string(r, &text) != 0 || !text) text = "unknown error";
    throw std::runtime_error(std::string("CUDA driver: ") + what + ": " + text + " (" + std::to_string(r) + ")");
  }
};

struct nvrtc_api {
  nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
  nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*log_size)(nvrtcProgram, size_t *);
  nvrtcResult (*log)(nvrtcProgram, char *);
  nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
  nvrtcResult (*cubin)(nvrtcProgram, char *);
  nvrtcResult (*ptx_size)(nvrtcProgram, size_t *);
  nvrtcResult (*ptx)(nvrtcProgram, char *);
  nvrtcResult (*destroy)(nvrtcProgram *);
  const char *(*error_string)(nvrtcResult);
};

// The kernel compiled for an architecture: a cubin for sm_XY, or, where this NVRTC does not know
// sm_XY, PTX for compute_XY that the driver compiles at load. Throws with NVRTC's log.
std::string compile_kernel(const nvrtc_api &nvrtc, int major, int minor) {
  const std::string arch = std::to_string(major * 10 + minor);
  std::string failures;
  for (const bool cubin : {true, false}) {
    if (cubin && !nvrtc.cubin) continue;  // NVRTC before 11.1
    nvrtcProgram program = nullptr;
    if (const nvrtcResult r = nvrtc.create(&program, segment_kernel_source, "segment_kernel.h", 0, nullptr, nullptr))
      throw std::runtime_error(std::string("NVRTC: unable to create the program: ") + nvrtc.error_string(r));
    const std::string gpu = std::string("--gpu-architecture=") + (cubin ? "sm_" : "compute_") + arch;
    // No fused multiply-add: the sums are those of the host twin, bit for bit (segment_kernel.h).
    const char *options[] = {gpu.c_str(), "--fmad=false"};
    const nvrtcResult compiled = nvrtc.compile(program, 2, options);
    std::string out;
    if (compiled == 0) {
      size_t size = 0;
      if ((cubin ? nvrtc.cubin_size : nvrtc.ptx_size)(program, &size) == 0) {
        out.resize(size);
        if ((cubin ? nvrtc.cubin : nvrtc.ptx)(program, out.data()) != 0) out.clear();
      }
    } else {
      size_t size = 0;
      std::string log;
      if (nvrtc.log_size(program, &size) == 0 && size > 1) {
        log.resize(size);
        nvrtc.log(program, log.data());
        log.resize(size - 1);
      }
      failures += (failures.empty() ? "" : "; ") + gpu + ": " + nvrtc.error_string(compiled) + (log.empty() ? "" : ": " + log);
    }
    nvrtc.destroy(&program);
    if (!out.empty()) return out;
  }
  throw std::runtime_error("NVRTC: unable to compile the statistics kernel: " + failures);
}

class cuda_engine final : public segment_engine {
 public:
  cuda_engine() {
    std::string tried;
    void *driver_library = open_first({"libcuda.so.1", "libcuda.so"}, tried);
    if (!driver_library) throw std::runtime_error("no CUDA driver library (" + tried + ")");
    bind(driver_.init, driver_library, "libcuda", "cuInit");
    bind(driver_.device_get, driver_library, "libcuda", "cuDeviceGet");
    bind(driver_.device_attribute, driver_library, "libcuda", "cuDeviceGetAttribute");
    bind(driver_.primary_context, driver_library, "libcuda", "cuDevicePrimaryCtxRetain");
    bind(driver_.context_current, driver_library, "libcuda", "cuCtxGetCurrent");
    bind(driver_.context_set, driver_library, "libcuda", "cuCtxSetCurrent");
    bind(driver_.module_load, driver_library, "libcuda", "cuModuleLoadData");
    bind(driver_.module_function, driver_library, "libcuda", "cuModuleGetFunction");
    bind(driver_.launch, driver_library, "libcuda", "cuLaunchKernel");
    bind(driver_.copy, driver_library, "libcuda", "cuMemcpyAsync");
    bind(driver_.error_string, driver_library, "libcuda", "cuGetErrorString");
    driver_.check(driver_.init(0), "cuInit");

    // torch's cudaStream_t of a c10::Stream: c10::cuda::CUDAStream::stream(), a const member
    // function of a class whose one member is the c10::Stream (c10/cuda/CUDAStream.h, torch 1.x
    // and 2.x alike), so the c10::Stream is its `this`.
    tried.clear();
    void *c10_cuda = open_first({"libc10_cuda.so"}, tried);
    if (!c10_cuda) throw std::runtime_error("torch's libc10_cuda.so is not loaded");
    bind(stream_of_, c10_cuda, "libc10_cuda.so", "_ZNK3c104cuda10CUDAStream6streamEv");

    std::vector<std::string> nvrtc_names;
    if (const char *env = std::getenv("TPROBE_NVRTC_LIBRARY"); env && *env) nvrtc_names.emplace_back(env);
    for (const char *name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}) nvrtc_names.emplace_back(name);
    tried.clear();
    void *nvrtc_library = open_first(nvrtc_names, tried);
    if (!nvrtc_library)
      throw std::runtime_error("no NVRTC library (" + tried + "; TPROBE_NVRTC_LIBRARY names one: a pip torch's is "
                               "nvidia/cuda_nvrtc/lib/libnvrtc.so.* in site-packages)");
    bind(nvrtc_.create, nvrtc_library, "libnvrtc", "nvrtcCreateProgram");
    bind(nvrtc_.compile, nvrtc_library, "libnvrtc", "nvrtcCompileProgram");
    bind(nvrtc_.log_size, nvrtc_library, "libnvrtc", "nvrtcGetProgramLogSize");
    bind(nvrtc_.log, nvrtc_library, "libnvrtc", "nvrtcGetProgramLog");
    bind(nvrtc_.ptx_size, nvrtc_library, "libnvrtc", "nvrtcGetPTXSize");
    bind(nvrtc_.ptx, nvrtc_library, "libnvrtc", "nvrtcGetPTX");
    bind(nvrtc_.destroy, nvrtc_library, "libnvrtc", "nvrtcDestroyProgram");
    bind(nvrtc_.error_string, nvrtc_library, "libnvrtc", "nvrtcGetErrorString");
    nvrtc_.cubin_size = reinterpret_cast<decltype(nvrtc_.cubin_size)>(dlsym(nvrtc_library, "nvrtcGetCUBINSize"));
    nvrtc_.cubin = reinterpret_cast<decltype(nvrtc_.cubin)>(dlsym(nvrtc_library, "nvrtcGetCUBIN"));
    if (!nvrtc_.cubin_size) nvrtc_.cubin = nullptr;
  }

  // Loads the kernel for device `index` (its primary context: the one torch's runtime uses).
  void prepare(int index) { on_device(index); }

  void copy(void *destination, const void *source, size_t bytes, const std::optional<c10::Stream> &stream) override {
    const device_state &d = on_device(stream->device_index());
    const context_guard guard(driver_, d.context);
    driver_.check(driver_.copy(reinterpret_cast<CUdeviceptr>(destination), reinterpret_cast<CUdeviceptr>(source), bytes,
                               native(*stream)),
                  "cuMemcpyAsync");
  }

  void reduce(const void *arena, const void *segments, unsigned int count, double *out,
              const std::optional<c10::Stream> &stream) override {
    const device_state &d = on_device(stream->device_index());
    const context_guard guard(driver_, d.context);
    void *params[] = {&arena, &segments, &count, &out};
    driver_.check(driver_.launch(d.kernel, count, 1, 1, TPROBE_SEGMENT_THREADS, 1, 1, 0, native(*stream), params, nullptr),
                  "cuLaunchKernel");
  }

 private:
  using stream_of_fn = void *(*)(const c10::Stream *);
  struct device_state {
    CUcontext context = nullptr;
    CUfunction kernel = nullptr;
  };

  // Makes `context` current on this thread for the guard's life, if another is.
  class context_guard {
   public:
    context_guard(const driver_api &driver, CUcontext context) : driver_(driver) {
      driver_.check(driver_.context_current(&previous_), "cuCtxGetCurrent");
      if (previous_ != context) {
        driver_.check(driver_.context_set(context), "cuCtxSetCurrent");
        swapped_ = true;
      }
    }
    ~context_guard() {
      if (swapped_) driver_.context_set(previous_);
    }
    context_guard(const context_guard &) = delete;
    context_guard &operator=(const context_guard &) = delete;

   private:
    const driver_api &driver_;
    CUcontext previous_ = nullptr;
    bool swapped_ = false;
  };

  CUstream native(const c10::Stream &s) const { return static_cast<CUstream>(stream_of_(&s)); }

  const device_state &on_device(int index) {
    const auto it = devices_.find(index);
    if (it != devices_.end()) return it->second;
    device_state d;
    CUdevice device = 0;
    driver_.check(driver_.device_get(&device, index), "cuDeviceGet");
    driver_.check(driver_.primary_context(&d.context, device), "cuDevicePrimaryCtxRetain");
    int major = 0, minor = 0;
    driver_.check(driver_.device_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "cuDeviceGetAttribute");
    driver_.check(driver_.device_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "cuDeviceGetAttribute");
    const std::string image = compile_kernel(nvrtc_, major, minor);
    const context_guard guard(driver_, d.context);
    CUmodule module = nullptr;
    driver_.check(driver_.module_load(&module, image.data()), "cuModuleLoadData");
    driver_.check(driver_.module_function(&d.kernel, module, "tprobe_segment_statistics"), "cuModuleGetFunction");
    return devices_.emplace(index, d).first->second;
  }

  driver_api driver_{};
  nvrtc_api nvrtc_{};
  stream_of_fn stream_of_ = nullptr;
  std::map<int, device_state> devices_;
};

}  // namespace

segment_engine *segment_engine_for(const at::Device &device, std::string &why) {
  static std::mutex made;
  const std::lock_guard lock(made);
  if (device.is_cpu()) {
    static host_engine host;
    return &host;
  }
  if (!device.is_cuda()) {
    why = "no statistics kernel for " + device.str() + " tensors";
    return nullptr;
  }
  // Never destroyed: the driver may be gone when static objects are.
  static cuda_engine *cuda = nullptr;
  static std::string cuda_failure;
  static std::map<int, std::string> device_failures;
  if (!cuda && cuda_failure.empty()) {
    try {
      cuda = new cuda_engine();
    } catch (const std::exception &e) {
      cuda_failure = e.what();
    }
  }
  if (!cuda) {
    why = cuda_failure;
    return nullptr;
  }
  const int index = device.has_index() ? device.index() : 0;
  if (const auto it = device_failures.find(index); it != device_failures.end()) {
    why = it->second;
    return nullptr;
  }
  try {
    cuda->prepare(index);
  } catch (const std::exception &e) {
    why = device_failures[index] = e.what();
    return nullptr;
  }
  return cuda;
}

}  // namespace tprobe::torch_capture
