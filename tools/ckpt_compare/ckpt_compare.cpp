#include "ckpt_compare.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "errors.h"
#include "pyjson.h"
#include "safe_path.h"

namespace tprobe {

namespace fs = std::filesystem;

namespace {

// --- names ------------------------------------------------------------------------------------

void replace_all(std::string &s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  size_t at = 0;
  while ((at = s.find(from, at)) != std::string::npos) {
    s.replace(at, from.size(), to);
    at += to.size();
  }
}

// msprobe's '.'.join([prefix, k]).strip('.')
std::string join_name(const std::string &prefix, const std::string &key) {
  std::string name = prefix + "." + key;
  const size_t first = name.find_first_not_of('.');
  if (first == std::string::npos) return {};
  const size_t last = name.find_last_not_of('.');
  return name.substr(first, last - first + 1);
}

std::string key_text(const pickle_value &k) {
  switch (k.k) {
    case pickle_value::kind::string: return k.s;
    case pickle_value::kind::integer: return std::to_string(k.i);
    default: return {};
  }
}

using named_tensors = std::vector<std::pair<std::string, ckpt_tensor>>;

// msprobe's _get_parameter: dicts are walked, tensors kept, anything else left out.
void flatten(const pickle_value &v, const std::string &prefix, named_tensors &out, int depth, const std::string &source) {
  if (depth > 100) throw usage_error(source + ": state dict nested deeper than 100 levels");
  for (const auto &[k, value] : v.entries) {
    if (k->k != pickle_value::kind::string && k->k != pickle_value::kind::integer) continue;
    const std::string name = join_name(prefix, key_text(*k));
    if (value->k == pickle_value::kind::dict) flatten(*value, name, out, depth + 1, source);
    else if (value->k == pickle_value::kind::tensor) out.emplace_back(name, value->tensor);
  }
}

// megatron_loader.py's get_weights_from_state_dict: "model", or "model0", "model1", … (VPP), mapped
// to mcore names, each name suffixed with "/<vpp stage>". Empty when the dict has neither.
named_tensors megatron_weights(const pickle_value &root, const std::string &source) {
  named_tensors out;
  auto add = [&](const pickle_value &model, int vpp) {
    if (model.k != pickle_value::kind::dict) return;
    named_tensors flat;
    flatten(model, "", flat, 0, source);
    for (auto &[name, t] : flat) out.emplace_back(ckpt_mcore_name(name) + "/" + std::to_string(vpp), std::move(t));
  };
  if (const pickle_value *m = root.get("model")) {
    add(*m, 0);
  } else if (root.get("model0")) {
    for (int vpp = 0; const pickle_value *m = root.get("model" + std::to_string(vpp)); ++vpp) add(*m, vpp);
  }
  return out;
}

bool is_megatron_state(const pickle_value &root) { return root.get("model") || root.get("model0"); }

// --- TP merge, PP and EP numbering (megatron_loader.py) ------------------------------------------

const std::vector<std::string_view> column_parallel{"linear_qkv", "linear_fc1", "word_embeddings.weight",
                                                     "output_layer.weight"};
const std::vector<std::string_view> row_parallel{"linear_fc2.weight", "linear_proj.weight"};

bool contains_any(const std::string &s, const std::vector<std::string_view> &parts) {
  return std::any_of(parts.begin(), parts.end(), [&](std::string_view p) { return s.find(p) != std::string::npos; });
}

// An insertion-ordered map name → value where a later insert of a name replaces its value in place
// (a Python dict).
template <typename T>
class ordered {
 public:
  T &operator[](const std::string &k) {
    const auto [it, inserted] = index_.emplace(k, items_.size());
    if (inserted) items_.emplace_back(k, T{});
    return items_[it->second].second;
  }
  [[nodiscard]] bool contains(const std::string &k) const { return index_.count(k) != 0; }
  std::vector<std::pair<std::string, T>> &items() { return items_; }

 private:
  std::vector<std::pair<std::string, T>> items_;
  std::unordered_map<std::string, size_t> index_;
};

ckpt_param consolidate(const std::string &key, std::vector<ckpt_piece> pieces) {
  ckpt_param p;
  const bool column = contains_any(key, column_parallel), row = !column && contains_any(key, row_parallel);
  if ((column || row) && pieces.size() > 1) {
    p.cat_dim = column ? 0 : 1;
    const auto &first = pieces.front().tensor.shape;
    if (static_cast<int>(first.size()) <= p.cat_dim)
      throw usage_error(fmt::format("{}: TP shards of {} dimensions cannot be concatenated on dim {}", key,
                                    first.size(), p.cat_dim));
    p.shape = first;
    p.shape[static_cast<size_t>(p.cat_dim)] = 0;
    for (const auto &piece : pieces) {
      auto s = piece.tensor.shape;
      if (s.size() != first.size()) throw usage_error(key + ": TP shards of different ranks");
      p.shape[static_cast<size_t>(p.cat_dim)] += s[static_cast<size_t>(p.cat_dim)];
      s[static_cast<size_t>(p.cat_dim)] = first[static_cast<size_t>(p.cat_dim)];
      if (s != first)
        throw usage_error(fmt::format("{}: TP shards of shapes [{}] and [{}] cannot be concatenated on dim {}", key,
                                      fmt::join(first, ", "), fmt::join(piece.tensor.shape, ", "), p.cat_dim));
    }
    p.pieces = std::move(pieces);
  } else {
    p.shape = pieces.front().tensor.shape;
    p.pieces.push_back(pieces.front());
    p.replicas.assign(pieces.begin() + 1, pieces.end());
  }
  return p;
}

const std::regex layer_pattern(R"(layers\.(\d+)\.)");
const std::regex expert_pattern(R"(experts\.(\d+)\.)");

int layers_per_stage(ordered<std::vector<ckpt_piece>> &partition) {
  int most = -1;
  for (const auto &[key, pieces] : partition.items()) {
    std::smatch m;
    if (std::regex_search(key, m, layer_pattern)) most = std::max(most, std::stoi(m[1].str()));
  }
  return most < 0 ? 1 : most + 1;
}

// _parse_real_layer_idx: drops the "/<vpp>" suffix and makes the layer number global.
std::string global_layer_name(const std::string &key, int per_stage, int pp_size, int pp_rank) {
  const size_t slash = key.rfind('/');
  std::string name = key.substr(0, slash);
  const int vpp = std::stoi(key.substr(slash + 1));
  std::smatch m;
  if (!std::regex_search(key, m, layer_pattern)) return name;
  const long local = std::stol(m[1].str());
  const long real = local + static_cast<long>(pp_size * vpp + pp_rank) * per_stage;
  replace_all(name, "layers." + std::to_string(local), "layers." + std::to_string(real));
  return name;
}

std::string global_expert_name(std::string name, int per_rank, int ep_rank) {
  std::smatch m;
  if (!std::regex_search(name, m, expert_pattern)) return name;
  const long local = std::stol(m[1].str());
  replace_all(name, "experts." + std::to_string(local), "experts." + std::to_string(local + static_cast<long>(ep_rank) * per_rank));
  return name;
}

int64_t int_attr(const pickle_value *args, std::string_view name, int64_t fallback) {
  const pickle_value *v = args ? opaque_state_get(*args, name) : nullptr;
  return v && v->k == pickle_value::kind::integer ? v->i : fallback;
}

// megatron_loader.py's parse_iteration: the tracker file names the iteration folder.
std::string megatron_iteration_dir(const std::string &path) {
  const fs::path tracker = fs::path(path) / "latest_checkpointed_iteration.txt";
  std::string dir = path;
  if (fs::exists(tracker)) {
    std::ifstream in(tracker);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && !in.eof()) throw system_error_from_errno("read", tracker.string(), errno);
    text.erase(0, text.find_first_not_of(" \t\r\n"));
    text.erase(text.find_last_not_of(" \t\r\n") + 1);
    if (text == "release") {
      dir = (fs::path(path) / "release").string();
    } else {
      char *end = nullptr;
      const long it = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || it < 0)
        throw usage_error(tracker.string() + ": holds \"" + text + "\", not an iteration number or release");
      dir = (fs::path(path) / fmt::format("iter_{:07d}", it)).string();
    }
    if (!fs::is_directory(dir)) throw usage_error(tracker.string() + ": names " + dir + ", which is not a folder");
  }
  return dir;
}

std::vector<std::string> rank_dirs(const std::string &dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && e.path().filename().string().starts_with("mp_rank_")) out.push_back(e.path().filename().string());
  if (ec) throw system_error_from_errno("list", dir, ec.value());
  std::sort(out.begin(), out.end());
  return out;
}

void load_megatron(const std::string &path, ckpt_side &side) {
  const std::string dir = megatron_iteration_dir(path);
  const auto ranks = rank_dirs(dir);
  if (ranks.empty()) throw usage_error(dir + ": no mp_rank_* folders (not a Megatron-LM checkpoint iteration)");
  auto open = [&](const std::string &rank) -> const torch_checkpoint & {
    side.files.push_back(std::make_unique<torch_checkpoint>((fs::path(dir) / rank / "model_optim_rng.pt").string()));
    return *side.files.back();
  };
  // The parallel sizes from the first rank's args (an argparse.Namespace, read as data); without
  // args, from the folder names (mp_rank_TT_PPP is read as a pipeline rank).
  const torch_checkpoint &first = open(ranks.front());
  const pickle_value *args = first.root().get("args");
  int64_t tp = 0, pp = 1, ep = 1;
  for (const auto &r : ranks) {
    int64_t t = 0, p = 0, e = 0;
    const int n = std::sscanf(r.c_str(), "mp_rank_%ld_%ld_%ld", &t, &p, &e);
    tp = std::max(tp, t + 1);
    if (n >= 2) pp = std::max(pp, p + 1);
    if (n >= 3) ep = std::max(ep, e + 1);
  }
  tp = int_attr(args, "tensor_model_parallel_size", tp);
  pp = int_attr(args, "pipeline_model_parallel_size", pp);
  ep = int_attr(args, "expert_model_parallel_size", ep);
  const int64_t experts = int_attr(args, "num_experts", 0);
  if (tp < 1 || pp < 1 || ep < 1 || tp > 4096 || pp > 4096 || ep > 4096)
    throw usage_error(fmt::format("{}: parallel sizes TP {} PP {} EP {} are not valid", first.path(), tp, pp, ep));
  side.description = fmt::format("Megatron checkpoint {} (TP {}, PP {}, EP {})", fs::path(dir).filename().string(), tp, pp, ep);
  side.files.clear();  // reopened below in rank order

  ordered<ckpt_param> combined;
  for (int64_t e = 0; e < ep; ++e) {
    int per_stage = 0;
    for (int64_t p = 0; p < pp; ++p) {
      ordered<std::vector<ckpt_piece>> partition;
      for (int64_t t = 0; t < tp; ++t) {
        std::string rank = pp > 1 ? fmt::format("mp_rank_{:02d}_{:03d}", t, p) : fmt::format("mp_rank_{:02d}", t);
        if (ep > 1) rank += fmt::format("_{:03d}", e);
        const torch_checkpoint &file = open(rank);
        for (auto &[key, tensor] : megatron_weights(file.root(), file.path())) partition[key].push_back({&file, tensor});
      }
      if (partition.items().empty()) throw usage_error(fmt::format("{}: no model state in the ranks of PP {} EP {}", dir, p, e));
      if (!per_stage) per_stage = layers_per_stage(partition);
      for (auto &[key, pieces] : partition.items()) {
        std::string name = global_layer_name(key, per_stage, static_cast<int>(pp), static_cast<int>(p));
        if (experts) name = global_expert_name(name, static_cast<int>(experts / ep), static_cast<int>(e));
        combined[name] = consolidate(name, std::move(pieces));
      }
    }
  }
  side.params = std::move(combined.items());
}

// One state-dict file: Megatron's rank layout with one rank when it has "model"/"model0", else
// "module", "state_dict" or the dict itself.
void file_weights(const torch_checkpoint &file, std::vector<std::pair<std::string, ckpt_param>> &params) {
  const pickle_value &root = file.root();
  if (root.k != pickle_value::kind::dict) throw usage_error(file.path() + ": the saved object is not a dict (a state dict)");
  named_tensors out;
  if (is_megatron_state(root)) {
    ordered<std::vector<ckpt_piece>> partition;
    for (auto &[key, tensor] : megatron_weights(root, file.path())) partition[key].push_back({&file, tensor});
    const int per_stage = layers_per_stage(partition);
    for (auto &[key, pieces] : partition.items()) params.emplace_back(global_layer_name(key, per_stage, 1, 0), consolidate(key, pieces));
    return;
  }
  const pickle_value *tree = &root;
  for (const char *k : {"module", "state_dict"})
    if (const pickle_value *v = root.get(k); v && v->k == pickle_value::kind::dict) {
      tree = v;
      break;
    }
  flatten(*tree, "", out, 0, file.path());
  for (auto &[name, t] : out) {
    ckpt_param p;
    p.shape = t.shape;
    p.pieces.push_back({&file, t});
    params.emplace_back(name, std::move(p));
  }
}

void load_files(const std::string &path, const std::vector<std::string> &relative, ckpt_side &side) {
  std::vector<std::vector<std::pair<std::string, ckpt_param>>> per_file;
  std::set<std::string> seen;
  bool collide = false;
  for (const auto &rel : relative) {
    const std::string file = relative.size() == 1 && rel.empty() ? path : (fs::path(path) / rel).string();
    side.files.push_back(std::make_unique<torch_checkpoint>(file));
    per_file.emplace_back();
    file_weights(*side.files.back(), per_file.back());
    for (const auto &[name, p] : per_file.back()) collide |= !seen.insert(name).second;
  }
  if (collide) side.warnings.push_back(path + ": a parameter name occurs in two files; names are prefixed with each file's path");
  for (size_t i = 0; i < per_file.size(); ++i)
    for (auto &[name, p] : per_file[i]) side.params.emplace_back(collide ? relative[i] + "/" + name : name, std::move(p));
}

bool is_checkpoint_file(const fs::path &p) {
  const std::string ext = p.extension().string();
  return ext == ".pt" || ext == ".pth" || ext == ".bin";
}

// --- the pass over one pair ------------------------------------------------------------------------

// A parameter's elements in C order, chunk by chunk, read from its pieces in place: for each index
// of the dimensions before cat_dim, each piece's block of the dimensions from cat_dim on.
class param_stream {
 public:
  explicit param_stream(const ckpt_param &p) : p_(p) {
    if (p.pieces.size() == 1) {
      outer_ = 1;
      blocks_.push_back(p.pieces[0].tensor.numel());
    } else {
      outer_ = 1;
      for (int d = 0; d < p.cat_dim; ++d) outer_ *= static_cast<uint64_t>(p.shape[static_cast<size_t>(d)]);
      for (const auto &piece : p.pieces) {
        uint64_t b = 1;
        for (size_t d = static_cast<size_t>(p.cat_dim); d < piece.tensor.shape.size(); ++d) b *= static_cast<uint64_t>(piece.tensor.shape[d]);
        blocks_.push_back(b);
      }
    }
  }
  size_t next(double *out, size_t max) {
    size_t done = 0;
    while (done < max && o_ < outer_) {
      const uint64_t block = blocks_[k_];
      const size_t n = static_cast<size_t>(std::min<uint64_t>(max - done, block - at_));
      const ckpt_piece &piece = p_.pieces[k_];
      if (n) piece.file->read(piece.tensor, o_ * block + at_, n, out + done);
      done += n;
      at_ += n;
      // Pages read are given back every few MiB: a 250 MB embedding is not held whole per side.
      const uint64_t end = o_ * block + at_;
      if ((end - released_[k_]) * dtype_size(piece.tensor.type) >= (uint64_t{4} << 20)) {
        piece.file->release(piece.tensor, released_[k_], end);
        released_[k_] = end;
      }
      if (at_ == block) {
        at_ = 0;
        if (++k_ == blocks_.size()) {
          k_ = 0;
          ++o_;
        }
      }
    }
    return done;
  }

 private:
  const ckpt_param &p_;
  uint64_t outer_ = 1;
  std::vector<uint64_t> blocks_;
  std::vector<uint64_t> released_ = std::vector<uint64_t>(p_.pieces.size(), 0);  // per piece: elements given back
  uint64_t o_ = 0, at_ = 0;
  size_t k_ = 0;
};

constexpr size_t chunk = size_t{1} << 15;

// np.allclose(rank0, other): |a − b| <= 1e-8 + 1e-5·|b|, NaN never close.
bool replica_close(const ckpt_piece &rank0, const ckpt_piece &other) {
  if (rank0.tensor.shape != other.tensor.shape) return false;
  ckpt_param a, b;
  a.pieces = {rank0};
  b.pieces = {other};
  a.shape = b.shape = rank0.tensor.shape;
  param_stream sa(a), sb(b);
  std::vector<double> x(chunk), y(chunk);
  for (size_t n; (n = sa.next(x.data(), chunk)) > 0;) {
    (void)sb.next(y.data(), n);
    for (size_t i = 0; i < n; ++i)
      if (!(std::fabs(x[i] - y[i]) <= 1e-8 + 1e-5 * std::fabs(y[i]))) return false;
  }
  return true;
}

void release(const ckpt_param &p) {
  for (const auto &piece : p.pieces) piece.file->release(piece.tensor);
  for (const auto &piece : p.replicas) piece.file->release(piece.tensor);
}

std::string shape_text(const std::vector<int64_t> &s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

uint64_t ckpt_param::numel() const {
  uint64_t n = 1;
  for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string ckpt_mcore_name(std::string name) {
  // name_mapping.yaml of msprobe 8.3.3, in its order.
  static const std::pair<std::string_view, std::string_view> mapping[] = {
      {"self_attention.linear_qkv.layer_norm_", "input_layernorm."},
      {"language_model.", ""},
      {"encoder", "decoder"},
      {".input_norm.", ".input_layernorm."},
      {"query_key_value", "linear_qkv"},
      {".dense.", ".linear_proj."},
      {"post_attention_norm", "pre_mlp_layernorm"},
      {"dense_h_to_4h", "linear_fc1"},
      {"dense_4h_to_h", "linear_fc2"},
      {"mlp.local_experts", "mlp.experts.local_experts"},
      {"final_norm", "final_layernorm"},
      {"word_embeddings_for_head", "output_layer"},
  };
  for (const auto &[from, to] : mapping) replace_all(name, from, to);
  return name;
}

ckpt_side ckpt_load(const std::string &path) {
  ckpt_side side;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw system_error_from_errno("open", path, errno);
  if (!S_ISDIR(st.st_mode)) {
    side.description = "state dict file";
    load_files(path, {""}, side);
  } else if (fs::exists(fs::path(path) / "latest_checkpointed_iteration.txt") || !rank_dirs(path).empty()) {
    load_megatron(path, side);
  } else {
    std::vector<std::string> relative;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file() && is_checkpoint_file(it->path())) relative.push_back(fs::relative(it->path(), path).string());
    if (ec) throw system_error_from_errno("list", path, ec.value());
    if (relative.empty()) throw usage_error(path + ": no checkpoint (no latest_checkpointed_iteration.txt, mp_rank_* folder or .pt, .pth, .bin file)");
    std::sort(relative.begin(), relative.end());
    side.description = fmt::format("folder of {} state dict file{}", relative.size(), relative.size() == 1 ? "" : "s");
    load_files(path, relative, side);
  }
  return side;
}

ckpt_metrics ckpt_compare_param(const ckpt_param &a, const ckpt_param &b) {
  ckpt_metrics m;
  m.shape_a = a.shape;
  m.shape_b = b.shape;
  m.numel_a = a.numel();
  m.numel_b = b.numel();
  try {
    for (const auto &p : {&a, &b})
      for (const auto &r : p->replicas)
        if (!replica_close(p->pieces.front(), r)) m.warning = "its values differ across TP ranks (rank 0's are compared)";
    if (a.shape != b.shape) return m;  // l2 and cos null, as msprobe's in_different_shape
    param_stream sa(a), sb(b);
    std::vector<double> x(chunk), y(chunk);
    double d2 = 0, ab = 0, aa = 0, bb = 0;
    for (size_t n; (n = sa.next(x.data(), chunk)) > 0;) {
      if (sb.next(y.data(), n) != n) throw usage_error("the two tensors ended at different elements");
      double cd = 0, cab = 0, caa = 0, cbb = 0;  // per chunk, then summed: two-level accumulation
      for (size_t i = 0; i < n; ++i) {
        const double d = x[i] - y[i];
        cd += d * d;
        cab += x[i] * y[i];
        caa += x[i] * x[i];
        cbb += y[i] * y[i];
      }
      d2 += cd;
      ab += cab;
      aa += caa;
      bb += cbb;
    }
    m.l2 = std::sqrt(d2);
    const double na = std::sqrt(aa), nb = std::sqrt(bb);
    if (na == 0 && nb == 0) m.cos = 1.0;
    else if (na == 0 || nb == 0) m.cos = std::nullopt;
    else {
      // sqrt(aa·bb) rather than ‖a‖·‖b‖: for a == b it is aa exactly, so cos is 1.0, not 1 ± 1 ulp.
      const double denominator = std::sqrt(aa * bb);
      m.cos = ab / (std::isfinite(denominator) && denominator > 0 ? denominator : na * nb);
    }
  } catch (const std::exception &e) {
    m.error = true;
    m.error_message = e.what();
    m.l2 = m.cos = std::nullopt;
  }
  return m;
}

nlohmann::ordered_json ckpt_result_json(const ckpt_compare_report &r) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto &[name, m] : r.rows) {
    nlohmann::ordered_json row = nlohmann::ordered_json::object();
    const bool failed = m.error;  // named: clang (the fuzz build) does not capture a structured binding
    auto real = [failed](const std::optional<double> &v) -> nlohmann::ordered_json {
      if (failed) return "error";
      return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
    };
    row["l2"] = real(m.l2);
    row["cos"] = real(m.cos);
    row["numel"] = m.numel_a == m.numel_b ? nlohmann::ordered_json(m.numel_a) : nlohmann::ordered_json::array({m.numel_a, m.numel_b});
    row["shape"] = m.shape_a == m.shape_b ? nlohmann::ordered_json(m.shape_a)
                                          : nlohmann::ordered_json::array({nlohmann::ordered_json(m.shape_a), nlohmann::ordered_json(m.shape_b)});
    out[name] = std::move(row);
  }
  return out;
}

ckpt_compare_report ckpt_compare_run(const ckpt_compare_options &o) {
  const auto start = std::chrono::steady_clock::now();
  if (o.threads < 1) throw usage_error("--threads must be at least 1");
  // msprobe's rules for the output: a path it would create, and not an existing file.
  const std::string out = path_check_create(o.output, "output path");
  if (fs::exists(fs::symlink_status(out))) throw usage_error(o.output + ": exists; the output must not exist (msprobe's rule)");
  ckpt_compare_report r;
  const ckpt_side a = ckpt_load(o.a), b = ckpt_load(o.b);
  r.description_a = a.description;
  r.description_b = b.description;
  for (const auto &w : a.warnings) r.warnings.push_back(w);
  for (const auto &w : b.warnings) r.warnings.push_back(w);

  std::unordered_map<std::string, size_t> in_b;
  for (size_t i = 0; i < b.params.size(); ++i) in_b.emplace(b.params[i].first, i);
  std::vector<std::pair<size_t, size_t>> pairs;
  std::set<std::string> in_a;
  for (size_t i = 0; i < a.params.size(); ++i) {
    in_a.insert(a.params[i].first);
    const auto it = in_b.find(a.params[i].first);
    if (it == in_b.end()) r.only_a.push_back(a.params[i].first);
    else pairs.emplace_back(i, it->second);
  }
  for (const auto &[name, p] : b.params)
    if (!in_a.count(name)) r.only_b.push_back(name);

  r.rows.resize(pairs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < pairs.size();) {
      const auto &[name, pa] = a.params[pairs[i].first];
      const auto &pb = b.params[pairs[i].second].second;
      r.rows[i] = {name, ckpt_compare_param(pa, pb)};
      release(pa);
      release(pb);
    }
  };
  const size_t n = std::min<size_t>(static_cast<size_t>(o.threads), std::max<size_t>(pairs.size(), 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto &t : pool) t.join();
  for (const auto &[name, m] : r.rows) {
    if (m.error) r.warnings.push_back(name + ": error when computing l2 and cos: " + m.error_message);
    if (!m.warning.empty()) r.warnings.push_back(name + ": " + m.warning);
    if (m.shape_a != m.shape_b)
      r.warnings.push_back(fmt::format("{}: different shapes {} and {}", name, shape_text(m.shape_a), shape_text(m.shape_b)));
  }
  atomic_write_file(out, pyjson_dump(ckpt_result_json(r), 4));
  r.file = out;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::vector<std::string> ckpt_summary(const ckpt_compare_report &r, size_t top) {
  std::vector<std::string> lines;
  size_t moved = 0, shapes = 0, errors = 0;
  for (const auto &[name, m] : r.rows) {
    moved += m.l2 && *m.l2 > 0;
    shapes += m.shape_a != m.shape_b;
    errors += m.error;
  }
  lines.push_back(fmt::format("compared {} parameters ({}; {}): {} moved (l2 > 0), {} with different shapes, {} errors; "
                              "{} only in the first, {} only in the second; wrote {} in {:.1f} s",
                              r.rows.size(), r.description_a, r.description_b, moved, shapes, errors, r.only_a.size(),
                              r.only_b.size(), r.file, r.seconds));
  auto list = [&](const char *title, auto key) {
    std::vector<std::pair<double, size_t>> order;
    for (size_t i = 0; i < r.rows.size(); ++i)
      if (const auto v = key(r.rows[i].second); v && *v > 0) order.emplace_back(*v, i);
    std::stable_sort(order.begin(), order.end(), [](const auto &x, const auto &y) { return x.first > y.first; });
    if (order.empty()) return;
    lines.push_back(title);
    for (size_t k = 0; k < std::min(top, order.size()); ++k) {
      const auto &[name, m] = r.rows[order[k].second];
      lines.push_back(fmt::format("  {}  l2 {}  cos {}  shape {}", name, m.l2 ? py_float_repr(*m.l2) : "null",
                                  m.cos ? py_float_repr(*m.cos) : "null", shape_text(m.shape_a)));
    }
  };
  list("largest l2:", [](const ckpt_metrics &m) { return m.l2; });
  list("lowest cos (largest 1 - cos):",
       [](const ckpt_metrics &m) { return m.cos ? std::optional<double>(1.0 - *m.cos) : std::nullopt; });
  if (moved == 0 && shapes == 0 && errors == 0 && !r.rows.empty()) lines.push_back("no common parameter differs");
  auto names = [&](const char *title, const std::vector<std::string> &v) {
    if (v.empty()) return;
    const size_t shown = std::min<size_t>(v.size(), 20);
    lines.push_back(fmt::format("{} ({}): {}{}", title, v.size(), fmt::join(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                                shown < v.size() ? fmt::format(", … and {} more", v.size() - shown) : ""));
  };
  names("only in the first", r.only_a);
  names("only in the second", r.only_b);
  return lines;
}

const stage_description &ckpt_compare_stage_description() {
  static const stage_description d{
      "ckpt-compare",
      "compare two checkpoints parameter by parameter: l2, cos, numel, shape (msprobe config_check -c)",
      false,
      false,
      {
          {"output", "string", "./ckpt_similarity.json", "the result JSON (must not exist)", {}, {}, "-o"},
          {"threads", "int", "4", "parameters compared at once", 1, 256},
      }};
  return d;
}

}  // namespace tprobe
