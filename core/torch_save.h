// torch_save.h: PyTorch's torch.save file format for one tensor, written and read without LibTorch
// (the tensor files msprobe writes for PyTorch dumps, docs/msprobe-compat.md §2.3: `NAME.pt`).
//
// The file is what torch >= 1.6 writes for torch.save(t) of a contiguous CPU tensor (msprobe saves
// tensor.clone().contiguous().detach()): a zip archive, every member stored (method 0, never
// compressed), each member's data starting at a multiple of 64 bytes (torch's kFieldAlignment; the
// padding is an extra field "FB" of 'Z' bytes, as torch writes it), members in this order:
//
//   {stem}/data.pkl     pickle protocol 2: torch._utils._rebuild_tensor_v2(
//                         persistent_id(("storage", torch.<T>Storage, "0", "cpu", numel)),
//                         0, size, stride, False, collections.OrderedDict())
//   {stem}/byteorder    "little" (torch >= 2.1 writes it; older torch ignores it)
//   {stem}/data/0       the tensor's elements, C order, little-endian, in the tensor's own dtype
//                       (bfloat16 stays bfloat16: 2 bytes per element)
//   {stem}/version      "3\n"
//
// {stem} is the file name without directory and extension, as torch names it. A member larger than
// 0xFFFFFFFF bytes, or starting beyond that offset, gets zip64 fields; the zip64 end records are
// always written, as torch does. Sizes and CRC-32 are in the local headers (no data descriptors).
// dtype → storage: float64 Double, float32 Float, float16 Half, bfloat16 BFloat16, int8 Char,
// int16 Short, int32 Int, int64 Long, uint8 Byte, bool Bool, complex64 ComplexFloat, complex128
// ComplexDouble. The storage location is always "cpu", so torch.load needs no device.
//
// The reader takes what torch.save writes for a tensor or an nn.Parameter (pickle protocols 2-5,
// any archive name, zip64, data descriptors, a storage offset and any strides within the storage,
// the 7-argument _rebuild_tensor_v2 of newer torch); it returns the elements in C order. It does
// not run arbitrary pickles: any global other than the tensor, storage and OrderedDict ones is a
// usage_error, so a torch.save of something else (a dict, a quantized tensor), the legacy non-zip
// format, or a compressed member is refused with a message naming the file.
//
// Errors: usage_error "PATH: <what is wrong>" for a bad file or arguments; system_error for I/O.
// A partly written file is removed. Thread-safe: no shared state.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtype.h"

namespace tprobe {

class safe_dir;  // safe_path.h

struct torch_save_options {
  // Give every member zip64 size and offset fields even when they would fit in 32 bits. Only for
  // tests: it exercises the >4 GiB layout on small files.
  bool force_zip64 = false;
};

// Writes `data` (C order, dtype_size(type) bytes per element, little-endian) as a torch.save file
// at `path` through safe_open_for_write (no symbolic links, mode `mode`). Shape {} is a 0-d tensor;
// a dimension may be 0 (empty tensor). Throws usage_error if data.size() does not match the shape
// or a dimension is negative.
void torch_save_write(const std::string &path, dtype type, std::span<const int64_t> shape,
                      std::span<const std::byte> data, mode_t mode = 0640, const torch_save_options &options = {});
// The same, as the file `name` in the open directory `dir` (safe_dir::open_for_write).
void torch_save_write(const safe_dir &dir, const std::string &name, dtype type, std::span<const int64_t> shape,
                      std::span<const std::byte> data, mode_t mode = 0640, const torch_save_options &options = {});

// The storage class name torch pickles for a dtype, e.g. "FloatStorage", "BFloat16Storage".
[[nodiscard]] std::string_view torch_storage_name(dtype type);

// One member of a zip archive as its central directory lists it.
struct zip_member {
  std::string name;
  uint16_t method = 0;        // 0 = stored
  uint32_t crc32 = 0;
  uint64_t size = 0;          // uncompressed
  uint64_t compressed_size = 0;
  uint64_t header_offset = 0;  // of the local header
  uint64_t data_offset = 0;    // of the member's bytes (after the local header)
  bool zip64 = false;          // the central directory entry had a zip64 extra field
};

// The members of the zip archive `file` (a whole file in memory), from its central directory,
// each checked against its local header. `source` names the file in messages.
[[nodiscard]] std::vector<zip_member> zip_members(std::span<const std::byte> file, const std::string &source);

// A tensor read from a torch.save file. The file is memory-mapped; data() points into the map
// when the saved tensor is C-contiguous, into a C-order copy otherwise. Move-only.
class torch_save_tensor {
 public:
  explicit torch_save_tensor(const std::string &path);
  ~torch_save_tensor();
  torch_save_tensor(torch_save_tensor &&other) noexcept;
  torch_save_tensor &operator=(torch_save_tensor &&other) noexcept;
  torch_save_tensor(const torch_save_tensor &) = delete;
  torch_save_tensor &operator=(const torch_save_tensor &) = delete;

  [[nodiscard]] dtype type() const { return type_; }
  [[nodiscard]] const std::vector<int64_t> &shape() const { return shape_; }  // {} for 0-d
  [[nodiscard]] bool requires_grad() const { return requires_grad_; }
  [[nodiscard]] const std::string &archive_name() const { return archive_; }  // "{stem}"
  [[nodiscard]] size_t element_count() const;
  [[nodiscard]] std::span<const std::byte> data() const { return data_; }  // C order

 private:
  void unmap() noexcept;

  dtype type_ = dtype::float32;
  std::vector<int64_t> shape_;
  bool requires_grad_ = false;
  std::string archive_;
  void *map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<std::byte> copy_;
  std::span<const std::byte> data_;
};

}  // namespace tprobe
