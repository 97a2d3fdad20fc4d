// Tests for core/torch_checkpoint: the restricted pickle VM on hand-made pickles (opaque globals are
// never called, nested containers and the memo, argparse.Namespace read as data) and archives made
// here (tensors sharing a storage, strided views, bf16, a truncated file, a view past its storage).
#include "torch_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "errors.h"
#include "half_float.h"
#include "tensor_stats.h"
#include "test_support.h"

namespace tprobe {
namespace {

using kind = pickle_value::kind;
using test::temp_dir;

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char *>(&v), 4); }
std::string u16(uint16_t v) { return std::string(reinterpret_cast<const char *>(&v), 2); }
std::string str(const std::string &s) { return "X" + u32(static_cast<uint32_t>(s.size())) + s; }
std::string global(const std::string &m, const std::string &n) { return "c" + m + "\n" + n + "\n"; }

// A stored zip of `members`, as torch writes it (no alignment padding: the reader must not need it).
std::string zip_of(const std::vector<std::pair<std::string, std::string>> &members) {
  std::string out, central;
  for (const auto &[name, data] : members) {
    const uint32_t crc = crc32_bytes(reinterpret_cast<const std::byte *>(data.data()), data.size());
    const auto offset = static_cast<uint32_t>(out.size());
    out += u32(0x04034b50) + u16(20) + u16(0) + u16(0) + u16(0) + u16(0) + u32(crc) +
           u32(static_cast<uint32_t>(data.size())) + u32(static_cast<uint32_t>(data.size())) +
           u16(static_cast<uint16_t>(name.size())) + u16(0) + name + data;
    central += u32(0x02014b50) + u16(20) + u16(20) + u16(0) + u16(0) + u16(0) + u16(0) + u32(crc) +
               u32(static_cast<uint32_t>(data.size())) + u32(static_cast<uint32_t>(data.size())) +
               u16(static_cast<uint16_t>(name.size())) + u16(0) + u16(0) + u16(0) + u16(0) + u32(0) + u32(offset) + name;
  }
  const auto cd_offset = static_cast<uint32_t>(out.size());
  out += central + u32(0x06054b50) + u16(0) + u16(0) + u16(static_cast<uint16_t>(members.size())) +
         u16(static_cast<uint16_t>(members.size())) + u32(static_cast<uint32_t>(central.size())) + u32(cd_offset) + u16(0);
  return out;
}

void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// _rebuild_tensor_v2(persistent storage, offset, size, stride, False, OrderedDict())
std::string tensor_pickle(const std::string &storage_type, const std::string &key, int numel, int offset,
                          const std::string &size, const std::string &stride) {
  return global("torch._utils", "_rebuild_tensor_v2") + "((" + str("storage") + global("torch", storage_type) +
         str(key) + str("cpu") + "K" + std::string(1, static_cast<char>(numel)) + "tQ" + "K" +
         std::string(1, static_cast<char>(offset)) + size + stride + "\x89" + global("collections", "OrderedDict") +
         ")RtR";
}

TEST(TorchCheckpoint, OpaqueGlobalsAreNeverCalled) {
  temp_dir dir;
  const std::string marker = dir / "ran";
  // os.system("touch MARKER"), a Namespace made with NEWOBJ and BUILD, and _codecs.encode bytes.
  const std::string p = std::string("\x80\x02}(") + str("cmd") + global("os", "system") + "(" +
                        str("touch " + marker) + "tR" + str("args") + global("argparse", "Namespace") + ")\x81}(" +
                        str("tensor_model_parallel_size") + "K\x02" + str("lr") + "G" +
                        std::string("\x3f\x1a\x36\xe2\xeb\x1c\x43\x2d", 8) + "ub" + str("blob") +
                        global("_codecs", "encode") + str("abc") + str("latin1") + "\x86R" + "u.";
  const pickle_ref root = pickle_load(p, "hand.pkl");
  ASSERT_EQ(root->k, kind::dict);
  EXPECT_FALSE(std::filesystem::exists(marker));
  const pickle_value *cmd = root->get("cmd");
  ASSERT_NE(cmd, nullptr);
  EXPECT_EQ(cmd->k, kind::opaque);
  EXPECT_EQ(cmd->s, "os.system");
  ASSERT_EQ(cmd->items.size(), 1u);
  EXPECT_EQ(cmd->items[0]->s, "touch " + marker);
  const pickle_value *args = root->get("args");
  ASSERT_NE(args, nullptr);
  EXPECT_EQ(args->s, "argparse.Namespace");
  const pickle_value *tp = opaque_state_get(*args, "tensor_model_parallel_size");
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ(tp->i, 2);
  EXPECT_DOUBLE_EQ(opaque_state_get(*args, "lr")->f, 1e-4);
  EXPECT_EQ(opaque_state_get(*args, "missing"), nullptr);
  EXPECT_EQ(root->get("blob")->k, kind::opaque);
}

TEST(TorchCheckpoint, NestedContainersAndMemo) {
  // {"a": [1, (2, "x"), {"b": None}], "c": <memo of the list>, "d": OrderedDict(k=True), "a": -5}
  const std::string p = std::string("\x80\x02}(") + str("a") + "](K\x01K\x02" + str("x") + "\x86}" + str("b") +
                        "Nsq\x01" "eq\x02" + str("c") + "h\x02" + str("d") + global("collections", "OrderedDict") +
                        ")R" + str("k") + "\x88s" + str("e") + "J" + u32(static_cast<uint32_t>(-5)) + "u.";
  const pickle_ref root = pickle_load(p, "nested.pkl");
  ASSERT_EQ(root->k, kind::dict);
  ASSERT_EQ(root->entries.size(), 4u);
  const pickle_value *a = root->get("a");
  ASSERT_EQ(a->k, kind::list);
  ASSERT_EQ(a->items.size(), 3u);
  EXPECT_EQ(a->items[0]->i, 1);
  EXPECT_EQ(a->items[1]->k, kind::tuple);
  EXPECT_EQ(a->items[1]->items[1]->s, "x");
  EXPECT_EQ(a->items[2]->get("b")->k, kind::none);
  EXPECT_EQ(root->get("c"), a);  // the memo gives the same object
  EXPECT_EQ(root->get("d")->k, kind::dict);
  EXPECT_EQ(root->get("d")->get("k")->k, kind::boolean);
  EXPECT_EQ(root->get("e")->i, -5);
}

TEST(TorchCheckpoint, MalformedPicklesAreRefused) {
  const std::string good = std::string("\x80\x02}") + str("a") + "K\x01s.";
  EXPECT_NO_THROW((void)pickle_load(good, "p"));
  for (size_t cut = 1; cut < good.size(); ++cut) EXPECT_THROW((void)pickle_load(good.substr(0, cut), "p"), usage_error) << cut;
  EXPECT_THROW((void)pickle_load("\x80\x02K\x01s.", "p"), usage_error);    // SETITEM without a dict
  EXPECT_THROW((void)pickle_load("\x80\x02h\x07.", "p"), usage_error);     // undefined memo
  EXPECT_THROW((void)pickle_load("\x80\x02\x82\x01.", "p"), usage_error);  // EXT1: not read
  try {
    (void)pickle_load("\x80\x02}K", "x.pt");
    FAIL();
  } catch (const usage_error &e) {
    EXPECT_NE(std::string(e.what()).find("x.pt: data.pkl at byte"), std::string::npos) << e.what();
  }
}

TEST(TorchCheckpoint, TensorsSharingAStorage) {
  temp_dir dir;
  // {"w": 2x3 float32 [0..5], "col": w[:, 1] (offset 1, stride 3), "t": w.t(), "h": bf16 [1.5, -2]}
  const std::string pkl = std::string("\x80\x02}(") + str("w") +
                          tensor_pickle("FloatStorage", "0", 6, 0, "K\x02K\x03\x86", "K\x03K\x01\x86") + str("col") +
                          tensor_pickle("FloatStorage", "0", 6, 1, "K\x02\x85", "K\x03\x85") + str("t") +
                          tensor_pickle("FloatStorage", "0", 6, 0, "K\x03K\x02\x86", "K\x01K\x03\x86") + str("h") +
                          tensor_pickle("BFloat16Storage", "1", 2, 0, "K\x02\x85", "K\x01\x85") + "u.";
  std::string floats(24, '\0'), halves(4, '\0');
  for (int i = 0; i < 6; ++i) {
    const float f = static_cast<float>(i);
    std::memcpy(floats.data() + 4 * i, &f, 4);
  }
  const uint16_t h[2] = {float_to_bfloat16(1.5f), float_to_bfloat16(-2.0f)};
  std::memcpy(halves.data(), h, 4);
  write_file(dir / "c.pt", zip_of({{"c/data.pkl", pkl}, {"c/data/0", floats}, {"c/data/1", halves}, {"c/version", "3\n"}}));
  const torch_checkpoint ckpt(dir / "c.pt");
  EXPECT_EQ(ckpt.tensor_count(), 4u);
  auto values = [&](const char *name) {
    const pickle_value *v = ckpt.root().get(name);
    EXPECT_NE(v, nullptr);
    EXPECT_EQ(v->k, kind::tensor);
    std::vector<double> out(v->tensor.numel());
    ckpt.read(v->tensor, 0, out.size(), out.data());
    ckpt.release(v->tensor);
    return out;
  };
  EXPECT_EQ(values("w"), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values("col"), (std::vector<double>{1, 4}));
  EXPECT_EQ(values("t"), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(values("h"), (std::vector<double>{1.5, -2}));
  EXPECT_EQ(ckpt.root().get("col")->tensor.storage, ckpt.root().get("w")->tensor.storage);
  // A part of a strided view, from the middle.
  std::vector<double> part(3);
  ckpt.read(ckpt.root().get("t")->tensor, 2, 3, part.data());
  EXPECT_EQ(part, (std::vector<double>{1, 4, 2}));
  EXPECT_THROW(ckpt.read(ckpt.root().get("t")->tensor, 4, 3, part.data()), usage_error);

  // Truncated anywhere: refused, naming the file.
  std::ifstream in(dir / "c.pt", std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const size_t cut : {whole.size() / 4, whole.size() / 2, whole.size() - 10}) {
    write_file(dir / "cut.pt", whole.substr(0, cut));
    try {
      const torch_checkpoint bad(dir / "cut.pt");
      FAIL() << cut;
    } catch (const usage_error &e) {
      EXPECT_EQ(std::string(e.what()).rfind(dir / "cut.pt", 0), 0u) << e.what();
    }
  }
  // A view past its storage, and a missing storage member.
  const std::string past = std::string("\x80\x02}(") + str("w") +
                           tensor_pickle("FloatStorage", "0", 6, 4, "K\x03\x85", "K\x01\x85") + "u.";
  write_file(dir / "past.pt", zip_of({{"p/data.pkl", past}, {"p/data/0", floats}}));
  EXPECT_THROW(torch_checkpoint(dir / "past.pt"), usage_error);
  write_file(dir / "none.pt", zip_of({{"n/data.pkl", past}}));
  EXPECT_THROW(torch_checkpoint(dir / "none.pt"), usage_error);
}

}  // namespace
}  // namespace tprobe
