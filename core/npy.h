// npy.h: NumPy .npy files (format 1.0), the tensor files of a tprobe dump (docs/msprobe-compat.md §2.3).
//
// The writer produces the bytes np.save() writes for the same array: magic "\x93NUMPY", version
// 1.0, the header dict "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" followed by
// numpy's spare space and padding to a multiple of 64 bytes, then the raw little-endian data.
// bfloat16 has no NumPy type: it is stored as float32 ('<f4'), exactly (bits << 16).
// The readers accept format versions 1.0, 2.0 and 3.0, any fixed-size descr ('<f4', '>i8',
// '|b1', '<U5', ...; no object or structured dtypes), C or Fortran order; the data is returned
// as stored (no byte swapping, no reordering). Data after the array's bytes is ignored, as
// np.load does.
//
// Errors: usage_error "PATH: <what is wrong>" for malformed files; system_error for I/O.
// Thread-safe: no shared state.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtype.h"

namespace tprobe {

class safe_dir;  // safe_path.h

// The complete header (magic, version, length, dict, padding, '\n') for an array of `type` with
// `shape` in C order. Shape () is a 0-d array, (5,) 1-d. Throws usage_error for a negative
// dimension.
[[nodiscard]] std::string npy_header(dtype type, std::span<const int64_t> shape);

// Write `data` (C order, native = little-endian layout, dtype_size(type) bytes per element) as
// an .npy file at `path`, through safe_open_for_write (no symbolic links, mode `mode`).
// bfloat16 data is converted to float32. Throws usage_error if data.size() does not match the
// shape; a partly written file is removed on error.
void npy_write(const std::string &path, dtype type, std::span<const int64_t> shape,
               std::span<const std::byte> data, mode_t mode = 0640);
// The same, as the file `name` in the open directory `dir` (safe_dir::open_for_write).
void npy_write(const safe_dir &dir, const std::string &name, dtype type, std::span<const int64_t> shape,
               std::span<const std::byte> data, mode_t mode = 0640);

struct npy_array {
  std::string descr;           // e.g. "<f4", "|b1", ">i8"
  std::vector<int64_t> shape;  // empty for a 0-d array
  bool fortran_order = false;
  std::vector<std::byte> data;  // element_count() * itemsize() bytes, as stored

  [[nodiscard]] size_t element_count() const;
  [[nodiscard]] size_t itemsize() const;
  // The tprobe dtype of descr, if it is one (little-endian or byte-order-free); float32 for '<f4'
  // (a bfloat16 tensor stored as float32 reads back as float32).
  [[nodiscard]] std::optional<dtype> type() const;
};

// Read a whole .npy file into memory.
[[nodiscard]] npy_array npy_read(const std::string &path);

// tprobe dtype for a NumPy descr: "<f4" → float32, "|b1" → boolean, "|u1" → uint8, "<c8" →
// complex64, ...; "=" and a missing byte order count as little-endian; nullopt otherwise.
[[nodiscard]] std::optional<dtype> npy_descr_dtype(std::string_view descr);

// Bytes per element of a NumPy descr; throws usage_error (naming `source`) if unsupported.
[[nodiscard]] size_t npy_descr_itemsize(std::string_view descr, const std::string &source);

// A read-only memory map of an .npy file, for files too large to copy. Move-only; the data span
// stays valid as long as the object lives.
class npy_mapped {
 public:
  explicit npy_mapped(const std::string &path);
  ~npy_mapped();
  npy_mapped(npy_mapped &&other) noexcept;
  npy_mapped &operator=(npy_mapped &&other) noexcept;
  npy_mapped(const npy_mapped &) = delete;
  npy_mapped &operator=(const npy_mapped &) = delete;

  [[nodiscard]] const std::string &path() const { return path_; }
  [[nodiscard]] const std::string &descr() const { return descr_; }
  [[nodiscard]] const std::vector<int64_t> &shape() const { return shape_; }
  [[nodiscard]] bool fortran_order() const { return fortran_order_; }
  [[nodiscard]] size_t element_count() const { return count_; }
  [[nodiscard]] size_t itemsize() const { return itemsize_; }
  [[nodiscard]] std::optional<dtype> type() const { return npy_descr_dtype(descr_); }
  [[nodiscard]] std::span<const std::byte> data() const { return {data_, count_ * itemsize_}; }

 private:
  void unmap() noexcept;

  std::string path_;
  std::string descr_;
  std::vector<int64_t> shape_;
  bool fortran_order_ = false;
  size_t count_ = 0;
  size_t itemsize_ = 0;
  void *map_ = nullptr;
  size_t map_size_ = 0;
  const std::byte *data_ = nullptr;
};

}  // namespace tprobe
