// torch_checkpoint.h: a torch.save file of any container of tensors (a state dict, Megatron-LM's
// {"model": …, "args": Namespace, "optimizer": …, "rng_state": …}), read without LibTorch and
// without running a line of the file's pickle (tools/ckpt_compare reads checkpoints with it).
//
// The file is torch.save's zip archive (torch >= 1.6; core/torch_save.h reads the one-tensor case):
// {archive}/data.pkl, a pickle whose tensors reference storages by persistent id
// ("storage", torch.<T>Storage, KEY, location, numel), and {archive}/data/KEY, each storage's bytes,
// stored (never compressed). The file is memory-mapped; only data.pkl is read at open, a tensor's
// elements are read when asked for (torch_checkpoint::read), so opening a 14 GB checkpoint costs
// its pickle, and reading one tensor touches that tensor's pages only (release() gives them back).
//
// The pickle is run by a restricted VM that never calls anything. Globals it knows are interpreted:
//   torch._utils._rebuild_tensor(_v2), _rebuild_parameter(_with_state),
//   torch._tensor._rebuild_from_type_v2 (over one of these)    → a tensor (a view of a storage)
//   collections.OrderedDict                                     → a dict
// Every other global (argparse.Namespace, numpy's _reconstruct, _codecs.encode, torch.device, a
// quantized tensor's rebuild …) is an opaque value: REDUCE/NEWOBJ on it give an opaque value that
// keeps the global's name and arguments, BUILD keeps its state (so Megatron's args Namespace can be
// read as data: opaque_state_get). Tensors sharing a storage (views, tied weights) share its key.
//
// At open every tensor is checked against its storage (the member exists, is stored, holds
// storage numel elements, and the view lies inside it), so read() cannot run past the map.
// Storages are not CRC-checked (that would read the whole checkpoint at open); data.pkl is.
//
// Errors: usage_error "PATH: <what is wrong>" for a file that is not such an archive, a truncated
// or malformed pickle, a compressed member, a view outside its storage; system_error for I/O.
// A torch_checkpoint is immutable after construction: read() and release() are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtype.h"

namespace tprobe {

// A tensor as the pickle describes it: a strided view of storage `storage`.
struct ckpt_tensor {
  std::string storage;  // the storage's key (the member data/KEY)
  dtype type = dtype::float32;
  uint64_t storage_numel = 0;
  int64_t offset = 0;  // in elements
  std::vector<int64_t> shape, stride;
  [[nodiscard]] uint64_t numel() const;
};

struct pickle_value;
using pickle_ref = std::shared_ptr<pickle_value>;

// One value of the pickle. Containers are shared (the pickle's memo), so a value seen twice is one
// object; a self-referencing container makes a cycle (walkers must bound their depth).
struct pickle_value {
  enum class kind { none, boolean, integer, floating, string, bytes, tuple, list, set, dict, tensor, storage, global, opaque };
  kind k = kind::none;
  int64_t i = 0;   // integer, boolean
  double f = 0;    // floating
  std::string s;   // string, bytes; global and opaque: "module.name" of the global
  std::vector<pickle_ref> items;  // tuple, list, set; opaque: the arguments it was made with
  std::vector<std::pair<pickle_ref, pickle_ref>> entries;  // dict, in insertion order (keys unique)
  pickle_ref state;  // opaque: what BUILD gave it (null if none)
  ckpt_tensor tensor;  // tensor; storage: its key, type and numel
  std::unordered_map<std::string, size_t> index;  // dict: string and integer keys → entry

  // A dict's value for the string key `key`, or null.
  [[nodiscard]] const pickle_value *get(std::string_view key) const;
};

// An opaque object's attribute `name` from its BUILD state (a dict, as an argparse.Namespace or a
// plain object pickles its __dict__), or null.
[[nodiscard]] const pickle_value *opaque_state_get(const pickle_value &v, std::string_view name);

// Runs the restricted VM over `pickle` (a whole data.pkl) and returns the top value; every tensor
// it makes is appended to `tensors` when given. `source` names it in messages (usage_error
// "SOURCE: data.pkl at byte N: <what>"). For tests and for readers of pickles outside a zip.
[[nodiscard]] pickle_ref pickle_load(std::string_view pickle, const std::string &source,
                                     std::vector<ckpt_tensor> *tensors = nullptr);

class torch_checkpoint {
 public:
  explicit torch_checkpoint(const std::string &path);
  ~torch_checkpoint();
  torch_checkpoint(const torch_checkpoint &) = delete;
  torch_checkpoint &operator=(const torch_checkpoint &) = delete;

  [[nodiscard]] const std::string &path() const { return path_; }
  [[nodiscard]] const pickle_value &root() const { return *root_; }
  [[nodiscard]] size_t tensor_count() const { return tensors_; }

  // Elements [first, first + n) of `t` (a tensor of this checkpoint's pickle) in C order,
  // converted to double (bool as 0/1). Throws usage_error for complex tensors and for a range
  // outside the tensor.
  void read(const ckpt_tensor &t, uint64_t first, size_t n, double *out) const;
  // Hands the pages `t` spans back to the kernel (they stay in the page cache): a reader that
  // walks a whole checkpoint keeps a few tensors resident, not the file.
  void release(const ckpt_tensor &t) const;
  // The same for the pages wholly before element `to` of a C-contiguous `t`, from the page holding
  // element `from` on (a no-op for other views): a reader walking a large tensor in order calls it
  // with the previous call's `to` as `from`, so at most a window of the tensor stays resident.
  void release(const ckpt_tensor &t, uint64_t from, uint64_t to) const;

 private:
  std::string path_;
  void *map_ = nullptr;
  size_t map_size_ = 0;
  pickle_ref root_;
  size_t tensors_ = 0;
  std::unordered_map<std::string, std::span<const std::byte>> storages_;
};

}  // namespace tprobe
