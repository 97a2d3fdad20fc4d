// Tests for core/torch_save: the files parse as torch writes them (zip central directory, 64-byte
// aligned stored members, the pickle's opcodes), every dtype round-trips through the reader, and
// torch.load reads them with the same bytes. The torch checks run /usr/bin/python3 as a subprocess
// and are skipped where it or torch is missing; the reader is also checked on files torch wrote.
#include "torch_save.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "errors.h"
#include "safe_path.h"
#include "test_support.h"

namespace tprobe {
namespace {

using test::read_file;
using test::write_file;

const char *const python = "/usr/bin/python3";

bool have_torch() {
  static const bool ok = [] {
    if (::access(python, X_OK) != 0) return false;
    return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  }();
  return ok;
}

// Runs `script` with /usr/bin/python3 and the directory as argv[1]; returns its exit status.
int run_python(const test::temp_dir &dir, const std::string &script, std::string *output = nullptr) {
  write_file(dir / "check.py", script);
  const auto r = test::run_process({python, dir / "check.py", dir.path()});
  if (output) *output = r.out + r.err;
  if (r.status != 0) ADD_FAILURE() << "python: " << r.out << r.err;
  return r.status;
}

std::span<const std::byte> bytes_of(const std::string &s) { return std::as_bytes(std::span<const char>(s)); }

// Deterministic, dtype-agnostic element bytes that make every byte position matter; booleans 0/1.
std::string sample_bytes(dtype type, size_t count) {
  std::string b(count * dtype_size(type), '\0');
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>((i * 37 + 11) & 0xFF);
  if (type == dtype::boolean)
    for (size_t i = 0; i < count; ++i) b[i] = static_cast<char>(i % 3 == 0);
  // Keep floating values finite and not NaN so that "equal" is unambiguous in torch: clear the
  // top exponent bit of each (real or imaginary) component.
  const size_t component = type == dtype::complex64 ? 4 : type == dtype::complex128 ? 8 : dtype_size(type);
  if (dtype_is_floating(type) || dtype_is_complex(type))
    for (size_t at = component - 1; at < b.size(); at += component) b[at] = static_cast<char>(b[at] & 0x3F);
  return b;
}

constexpr std::array<dtype, 12> all_dtypes{dtype::float64, dtype::float32, dtype::float16,   dtype::bfloat16,
                                           dtype::int8,    dtype::int16,   dtype::int32,     dtype::int64,
                                           dtype::uint8,   dtype::boolean, dtype::complex64, dtype::complex128};

TEST(TorchSave, ZipLayoutIsTorchs) {
  test::temp_dir dir;
  const std::string path = dir / "Functional.linear.0.forward.input.0.pt";
  const std::vector<int64_t> shape{2, 3};
  const std::string data = sample_bytes(dtype::bfloat16, 6);
  torch_save_write(path, dtype::bfloat16, shape, bytes_of(data));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);

  const std::string file = read_file(path);
  const auto members = zip_members(bytes_of(file), path);
  ASSERT_EQ(members.size(), 4u);
  const std::string stem = "Functional.linear.0.forward.input.0";
  EXPECT_EQ(members[0].name, stem + "/data.pkl");
  EXPECT_EQ(members[1].name, stem + "/byteorder");
  EXPECT_EQ(members[2].name, stem + "/data/0");
  EXPECT_EQ(members[3].name, stem + "/version");
  for (const auto &m : members) {
    SCOPED_TRACE(m.name);
    EXPECT_EQ(m.method, 0);
    EXPECT_EQ(m.size, m.compressed_size);
    EXPECT_EQ(m.data_offset % 64, 0u);
    EXPECT_FALSE(m.zip64);
    const uint32_t crc = static_cast<uint32_t>(
        ::crc32(0, reinterpret_cast<const Bytef *>(file.data() + m.data_offset), static_cast<uInt>(m.size)));
    EXPECT_EQ(crc, m.crc32);
  }
  EXPECT_EQ(file.substr(members[1].data_offset, members[1].size), "little");
  EXPECT_EQ(file.substr(members[2].data_offset, members[2].size), data);
  EXPECT_EQ(file.substr(members[3].data_offset, members[3].size), "3\n");
  // The zip64 end record and locator precede the classic end record, as torch writes them.
  EXPECT_EQ(file.substr(file.size() - 22, 4), std::string("PK\x05\x06", 4));
  EXPECT_EQ(file.substr(file.size() - 42, 4), std::string("PK\x06\x07", 4));
  EXPECT_EQ(file.substr(file.size() - 98, 4), std::string("PK\x06\x06", 4));

  // The pickle, opcode by opcode: what Python's pickler writes for torch.save of this tensor.
  const std::string pickle = file.substr(members[0].data_offset, members[0].size);
  const std::string expected = std::string("\x80\x02") + "ctorch._utils\n_rebuild_tensor_v2\n" + "((" +
                               std::string("X\x07\x00\x00\x00storage", 12) + "ctorch\nBFloat16Storage\n" +
                               std::string("X\x01\x00\x00\x00" "0", 6) + std::string("X\x03\x00\x00\x00" "cpu", 8) +
                               "K\x06" + "tQ" + std::string("K\x00", 2) + "K\x02K\x03\x86" + "K\x03K\x01\x86" +
                               "\x89" + "ccollections\nOrderedDict\n" + ")R" + "tR.";
  EXPECT_EQ(pickle, expected);
}

TEST(TorchSave, EveryDtypeRoundTrips) {
  test::temp_dir dir;
  const std::vector<int64_t> shape{3, 1, 4};
  for (const dtype type : all_dtypes) {
    SCOPED_TRACE(std::string(dtype_name(type)));
    const std::string data = sample_bytes(type, 12);
    const std::string path = dir / (std::string(dtype_name(type)) + ".pt");
    torch_save_write(path, type, shape, bytes_of(data));
    const torch_save_tensor t(path);
    EXPECT_EQ(t.type(), type);
    EXPECT_EQ(t.shape(), shape);
    EXPECT_FALSE(t.requires_grad());
    EXPECT_EQ(t.archive_name(), dtype_name(type));
    ASSERT_EQ(t.data().size(), data.size());
    EXPECT_EQ(std::memcmp(t.data().data(), data.data(), data.size()), 0);
  }
}

// The writer's path: the file created by name in an open dump_tensor_data/ (safe_dir), byte for
// byte what a write by path makes, the archive still named after the file.
TEST(TorchSave, WriteInAnOpenDirectoryMatchesWriteByPath) {
  test::temp_dir dir, other;
  const safe_dir open_dir(dir.path());
  const std::string name = "Tensor.add.0.forward.output.0.pt";
  const std::vector<int64_t> shape{4, 5};
  const std::string data = sample_bytes(dtype::float32, 20);
  torch_save_write(open_dir, name, dtype::float32, shape, bytes_of(data));
  torch_save_write(other / name, dtype::float32, shape, bytes_of(data));
  EXPECT_EQ(read_file(dir / name), read_file(other / name));
  const torch_save_tensor t(dir / name);
  EXPECT_EQ(t.archive_name(), "Tensor.add.0.forward.output.0");
  EXPECT_EQ(t.shape(), shape);
  struct stat st {};
  ASSERT_EQ(::stat((dir / name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_THROW(torch_save_write(open_dir, "bad.pt", dtype::float32, shape, {}), usage_error);
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.pt"));
}

TEST(TorchSave, ZeroDimEmptyAndLargeIntegers) {
  test::temp_dir dir;
  const std::string scalar = sample_bytes(dtype::int64, 1);
  torch_save_write(dir / "s.pt", dtype::int64, std::span<const int64_t>{}, bytes_of(scalar));
  const torch_save_tensor s(dir / "s.pt");
  EXPECT_TRUE(s.shape().empty());
  EXPECT_EQ(s.element_count(), 1u);
  EXPECT_EQ(std::string(reinterpret_cast<const char *>(s.data().data()), s.data().size()), scalar);

  const std::vector<int64_t> empty{0, 3};
  torch_save_write(dir / "e.pt", dtype::float32, empty, {});
  const torch_save_tensor e(dir / "e.pt");
  EXPECT_EQ(e.shape(), empty);
  EXPECT_EQ(e.data().size(), 0u);
  // An empty tensor may have a dimension beyond 2^31: the LONG1 opcode, in size and stride.
  const std::vector<int64_t> huge{0, int64_t{3} << 31};
  torch_save_write(dir / "h.pt", dtype::float32, huge, {});
  EXPECT_EQ(torch_save_tensor(dir / "h.pt").shape(), huge);

  // A dimension above 2^16 takes the 4-byte BININT opcode.
  const std::vector<int64_t> wide{70000, 1};
  const std::string w = sample_bytes(dtype::uint8, 70000);
  torch_save_write(dir / "w.pt", dtype::uint8, wide, bytes_of(w));
  const torch_save_tensor wt(dir / "w.pt");
  EXPECT_EQ(wt.shape(), wide);
  EXPECT_EQ(std::memcmp(wt.data().data(), w.data(), w.size()), 0);
}

TEST(TorchSave, Zip64FieldsReadBack) {
  test::temp_dir dir;
  const std::vector<int64_t> shape{5};
  const std::string data = sample_bytes(dtype::float32, 5);
  torch_save_write(dir / "z.pt", dtype::float32, shape, bytes_of(data), 0640, {.force_zip64 = true});
  const std::string file = read_file(dir / "z.pt");
  const auto members = zip_members(bytes_of(file), dir / "z.pt");
  ASSERT_EQ(members.size(), 4u);
  for (const auto &m : members) {
    EXPECT_TRUE(m.zip64) << m.name;
    EXPECT_EQ(m.data_offset % 64, 0u) << m.name;
  }
  EXPECT_EQ(members[2].size, 20u);
  const torch_save_tensor t(dir / "z.pt");
  EXPECT_EQ(std::string(reinterpret_cast<const char *>(t.data().data()), t.data().size()), data);
}

TEST(TorchSave, BadArgumentsAndDamagedFilesAreRefused) {
  test::temp_dir dir;
  const std::vector<int64_t> shape{2, 2};
  const std::string three = sample_bytes(dtype::float32, 3);
  EXPECT_THROW(torch_save_write(dir / "x.pt", dtype::float32, shape, bytes_of(three)), usage_error);
  EXPECT_FALSE(std::filesystem::exists(dir / "x.pt"));
  const std::vector<int64_t> negative{-1};
  EXPECT_THROW(torch_save_write(dir / "n.pt", dtype::float32, negative, {}), usage_error);

  const std::string data = sample_bytes(dtype::float32, 4);
  torch_save_write(dir / "ok.pt", dtype::float32, shape, bytes_of(data));
  const std::string good = read_file(dir / "ok.pt");
  const auto members = zip_members(bytes_of(good), "ok.pt");

  std::string flipped = good;  // one data byte changed: the CRC catches it
  flipped[members[2].data_offset] = static_cast<char>(flipped[members[2].data_offset] ^ 1);
  write_file(dir / "flipped.pt", flipped);
  try {
    (void)torch_save_tensor(dir / "flipped.pt");
    ADD_FAILURE() << "a damaged file was read";
  } catch (const usage_error &e) {
    EXPECT_NE(std::string(e.what()).find("CRC-32 mismatch"), std::string::npos) << e.what();
  }
  for (const size_t keep : {size_t{0}, size_t{21}, size_t{100}, good.size() - 1}) {
    write_file(dir / "cut.pt", good.substr(0, keep));
    EXPECT_THROW((void)torch_save_tensor(dir / "cut.pt"), usage_error) << keep << " bytes";
  }
  write_file(dir / "npy.pt", "\x93NUMPY not a zip");
  EXPECT_THROW((void)torch_save_tensor(dir / "npy.pt"), usage_error);
  EXPECT_THROW((void)torch_save_tensor(dir / "missing.pt"), system_error);
}

TEST(TorchSave, TorchLoadsEveryDtype) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch not available";
  test::temp_dir dir;
  const std::vector<int64_t> shape{2, 3};
  for (const dtype type : all_dtypes) {
    torch_save_write(dir / (std::string(dtype_name(type)) + ".pt"), type, shape, bytes_of(sample_bytes(type, 6)));
    write_file(dir / (std::string(dtype_name(type)) + ".bin"), sample_bytes(type, 6));
  }
  torch_save_write(dir / "scalar.pt", dtype::float16, std::span<const int64_t>{},
                   bytes_of(sample_bytes(dtype::float16, 1)));
  write_file(dir / "scalar.bin", sample_bytes(dtype::float16, 1));
  const std::vector<int64_t> empty{3, 0};
  torch_save_write(dir / "empty.pt", dtype::bfloat16, empty, {});
  const std::vector<int64_t> huge{0, int64_t{3} << 31};
  torch_save_write(dir / "huge.pt", dtype::float32, huge, {});
  torch_save_write(dir / "zip64.pt", dtype::int32, shape, bytes_of(sample_bytes(dtype::int32, 6)), 0640,
                   {.force_zip64 = true});
  write_file(dir / "zip64.bin", sample_bytes(dtype::int32, 6));
  // The raw bytes torch holds after loading must be the bytes given; the dtype and shape torch's.
  const std::string script = R"(
import os, sys, zipfile, torch
d = sys.argv[1]
names = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
         "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
         "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool, "complex64": torch.complex64,
         "complex128": torch.complex128}
def raw(t):
    t = t.contiguous()
    if t.dtype == torch.bool: t = t.to(torch.uint8)
    elif t.is_complex(): t = torch.view_as_real(t)
    itemsize = t.element_size()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[itemsize]
    return t.view(view).numpy().tobytes() if t.dim() else t.reshape(1).view(view).numpy().tobytes()
checked = 0
for name, dtype in list(names.items()) + [("scalar", torch.float16), ("zip64", torch.int32)]:
    path = os.path.join(d, name + ".pt")
    assert zipfile.ZipFile(path).testzip() is None, path
    t = torch.load(path)
    assert t.dtype == dtype, (name, t.dtype)
    assert tuple(t.shape) == (() if name == "scalar" else (2, 3)), (name, t.shape)
    assert not t.requires_grad
    assert raw(t) == open(os.path.join(d, name + ".bin"), "rb").read(), name
    checked += 1
e = torch.load(os.path.join(d, "empty.pt"))
assert e.dtype == torch.bfloat16 and tuple(e.shape) == (3, 0), (e.dtype, e.shape)
h = torch.load(os.path.join(d, "huge.pt"))
assert tuple(h.shape) == (0, 3 << 31) and h.stride() == (3 << 31, 1), (h.shape, h.stride())
print("checked", checked + 2)
)";
  std::string out;
  ASSERT_EQ(run_python(dir, script, &out), 0);
  EXPECT_NE(out.find("checked 16"), std::string::npos) << out;
}

TEST(TorchSave, ReadsWhatTorchWrites) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch not available";
  test::temp_dir dir;
  // torch's own files: data descriptors, its alignment, a non-contiguous view (a transpose keeps
  // the base's strides), a view with a storage offset, a Parameter, and a 0-d bool.
  const std::string script = R"(
import os, sys, torch
d = sys.argv[1]
torch.save(torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), os.path.join(d, "bf16.pt"))
torch.save(torch.arange(12, dtype=torch.int64).reshape(3, 4).t(), os.path.join(d, "transposed.pt"))
torch.save(torch.arange(10, dtype=torch.float32)[4:7], os.path.join(d, "offset.pt"))
torch.save(torch.nn.Parameter(torch.ones(2)), os.path.join(d, "param.pt"))
torch.save(torch.tensor(True), os.path.join(d, "bool.pt"))
torch.save({"a": torch.ones(1)}, os.path.join(d, "dict.pt"))
)";
  ASSERT_EQ(run_python(dir, script), 0);

  const torch_save_tensor bf16(dir / "bf16.pt");
  EXPECT_EQ(bf16.type(), dtype::bfloat16);
  EXPECT_EQ(bf16.shape(), (std::vector<int64_t>{2, 3}));
  std::vector<uint16_t> bits(6);
  ASSERT_EQ(bf16.data().size(), 12u);
  std::memcpy(bits.data(), bf16.data().data(), 12);
  EXPECT_EQ(bits, (std::vector<uint16_t>{0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0}));  // 0..5

  const torch_save_tensor tr(dir / "transposed.pt");
  EXPECT_EQ(tr.shape(), (std::vector<int64_t>{4, 3}));
  std::vector<int64_t> values(12);
  ASSERT_EQ(tr.data().size(), 96u);
  std::memcpy(values.data(), tr.data().data(), 96);
  EXPECT_EQ(values, (std::vector<int64_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));

  const torch_save_tensor off(dir / "offset.pt");
  std::vector<float> f(3);
  ASSERT_EQ(off.data().size(), 12u);
  std::memcpy(f.data(), off.data().data(), 12);
  EXPECT_EQ(f, (std::vector<float>{4, 5, 6}));

  const torch_save_tensor param(dir / "param.pt");
  EXPECT_TRUE(param.requires_grad());
  EXPECT_EQ(param.shape(), (std::vector<int64_t>{2}));

  const torch_save_tensor b(dir / "bool.pt");
  EXPECT_EQ(b.type(), dtype::boolean);
  EXPECT_TRUE(b.shape().empty());
  ASSERT_EQ(b.data().size(), 1u);
  EXPECT_EQ(b.data()[0], std::byte{1});

  try {
    (void)torch_save_tensor(dir / "dict.pt");
    ADD_FAILURE() << "a dict was read as a tensor";
  } catch (const usage_error &e) {
    EXPECT_NE(std::string(e.what()).find("not a tensor"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tprobe
