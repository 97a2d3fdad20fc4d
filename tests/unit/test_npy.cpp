// Tests for core/npy: the writer's files load in NumPy (byte-identical to np.save), and files
// NumPy writes read back. The NumPy checks run /usr/bin/python3 as a subprocess and are skipped
// where it or numpy is missing.
#include "npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "errors.h"
#include "safe_path.h"

namespace tprobe {
namespace {

const char *const python = "/usr/bin/python3";

bool have_numpy() {
  static const bool ok = [] {
    if (::access(python, X_OK) != 0) return false;
    return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  }();
  return ok;
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T> &v) {
  return std::as_bytes(std::span<const T>(v));
}

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string &path, const std::string &content) {
  std::ofstream(path, std::ios::binary) << content;
}

class Npy : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tprobe_npy_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Run a Python script with the scratch directory as argv[1]; returns stdout+stderr.
  std::string run_python(const std::string &script, int *status = nullptr) {
    const std::string script_path = dir_ + "/check.py";
    write_file(script_path, script);
    const std::string cmd = std::string(python) + " " + script_path + " " + dir_ + " 2>&1";
    FILE *p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return "popen failed";
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int rc = ::pclose(p);
    if (status != nullptr) *status = rc;
    return out;
  }

  std::string path(const std::string &name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(Npy, HeaderFollowsNumpyLayout) {
  const std::array<int64_t, 2> shape{2, 3};
  const std::string h = npy_header(dtype::float32, shape);
  // Exactly what numpy 1.24 np.save writes for np.zeros((2, 3), np.float32).
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string expected = std::string("\x93NUMPY\x01\x00", 8) + std::string("v\x00", 2) + dict;
  expected.append(128 - 1 - expected.size(), ' ');
  expected += '\n';
  EXPECT_EQ(h, expected);
  EXPECT_EQ(h.size() % 64, 0u);

  const std::string h0 = npy_header(dtype::float64, std::span<const int64_t>{});
  EXPECT_NE(h0.find("'shape': (), }"), std::string::npos);
  EXPECT_EQ(h0.size() % 64, 0u);
  const std::array<int64_t, 1> one{5};
  EXPECT_NE(npy_header(dtype::boolean, one).find("{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }"),
            std::string::npos);
  EXPECT_NE(npy_header(dtype::bfloat16, one).find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(npy_header(dtype::complex128, one).find("'descr': '<c16'"), std::string::npos);
  const std::array<int64_t, 1> negative{-1};
  EXPECT_THROW((void)npy_header(dtype::float32, negative), usage_error);
}

TEST_F(Npy, WriteAndReadBackEveryDtype) {
  const std::vector<float> f32{0.5f, -1.25f, 3.f, 4.f, 5.f, 6.f};
  const std::array<int64_t, 2> shape{2, 3};
  npy_write(path("f32.npy"), dtype::float32, shape, bytes_of(f32));
  struct stat st {};
  ASSERT_EQ(::stat(path("f32.npy").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);

  const npy_array a = npy_read(path("f32.npy"));
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(a.fortran_order);
  EXPECT_EQ(a.type(), dtype::float32);
  EXPECT_EQ(a.element_count(), 6u);
  ASSERT_EQ(a.data.size(), 24u);
  EXPECT_EQ(std::memcmp(a.data.data(), f32.data(), 24), 0);

  const npy_mapped m(path("f32.npy"));
  EXPECT_EQ(m.descr(), "<f4");
  EXPECT_EQ(m.shape(), a.shape);
  EXPECT_EQ(m.type(), dtype::float32);
  ASSERT_EQ(m.data().size(), 24u);
  EXPECT_EQ(std::memcmp(m.data().data(), f32.data(), 24), 0);

  npy_mapped moved = npy_mapped(path("f32.npy"));
  npy_mapped other(std::move(moved));
  EXPECT_EQ(other.data().size(), 24u);
  EXPECT_EQ(moved.data().size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
}

TEST_F(Npy, Bfloat16IsStoredAsExactFloat32) {
  const std::vector<uint16_t> bf16{0x3FC0, 0xC000, 0x4049, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8000};
  const std::array<int64_t, 1> shape{8};
  npy_write(path("bf16.npy"), dtype::bfloat16, shape, bytes_of(bf16));
  const npy_array a = npy_read(path("bf16.npy"));
  EXPECT_EQ(a.descr, "<f4");
  ASSERT_EQ(a.data.size(), 32u);
  for (size_t i = 0; i < bf16.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, a.data.data() + 4 * i, 4);
    EXPECT_EQ(bits, static_cast<uint32_t>(bf16[i]) << 16);
  }
}

TEST_F(Npy, WriteRejectsWrongSizeAndSymlinks) {
  const std::vector<float> f{1.f, 2.f};
  const std::array<int64_t, 1> shape{3};
  EXPECT_THROW(npy_write(path("bad.npy"), dtype::float32, shape, bytes_of(f)), usage_error);
  EXPECT_FALSE(std::filesystem::exists(path("bad.npy")));

  const std::array<int64_t, 1> two{2};
  write_file(path("victim"), "keep");
  ASSERT_EQ(::symlink(path("victim").c_str(), path("link.npy").c_str()), 0);
  EXPECT_THROW(npy_write(path("link.npy"), dtype::float32, two, bytes_of(f)), usage_error);
  EXPECT_EQ(read_file(path("victim")), "keep");
}

// The writer's path: files created by name in dump_tensor_data/, opened once (safe_dir). Same
// bytes as a write by path, bfloat16 widened the same way, and nothing left behind on an error.
TEST_F(Npy, WriteInAnOpenDirectoryMatchesWriteByPath) {
  const safe_dir dir(dir_);
  std::vector<float> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25f - 7.f;
  const std::array<int64_t, 2> shape{250, 400};
  npy_write(path("by_path.npy"), dtype::float32, shape, bytes_of(big));
  npy_write(dir, "in_dir.npy", dtype::float32, shape, bytes_of(big));
  EXPECT_EQ(read_file(path("in_dir.npy")), read_file(path("by_path.npy")));
  struct stat st {};
  ASSERT_EQ(::stat(path("in_dir.npy").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);

  const std::vector<uint16_t> bf16{0x3FC0, 0xC000, 0x7F80};
  const std::array<int64_t, 1> three{3};
  npy_write(path("bf16_path.npy"), dtype::bfloat16, three, bytes_of(bf16));
  npy_write(dir, "bf16_dir.npy", dtype::bfloat16, three, bytes_of(bf16));
  EXPECT_EQ(read_file(path("bf16_dir.npy")), read_file(path("bf16_path.npy")));

  npy_write(dir, "in_dir.npy", dtype::bfloat16, three, bytes_of(bf16));  // a rerun: replaced
  EXPECT_EQ(read_file(path("in_dir.npy")), read_file(path("bf16_path.npy")));
  EXPECT_THROW(npy_write(dir, "bad.npy", dtype::float32, three, bytes_of(bf16)), usage_error);
  EXPECT_FALSE(std::filesystem::exists(path("bad.npy")));
}

TEST_F(Npy, MalformedFilesAreUsageErrorsNamingTheFile) {
  const std::vector<double> d{1.0, 2.0, 3.0};
  const std::array<int64_t, 1> shape{3};
  npy_write(path("good.npy"), dtype::float64, shape, bytes_of(d));
  const std::string good = read_file(path("good.npy"));

  auto expect_bad = [&](const std::string &name, const std::string &content, const std::string &fragment) {
    write_file(path(name), content);
    for (int mapped = 0; mapped < 2; ++mapped) {
      try {
        if (mapped)
          npy_mapped m(path(name));
        else
          (void)npy_read(path(name));
        ADD_FAILURE() << name << ": no error";
      } catch (const usage_error &e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind(path(name) + ": ", 0), 0u) << msg;
        EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
      }
    }
  };
  expect_bad("truncated.npy", good.substr(0, good.size() - 1), "truncated data");
  expect_bad("magic.npy", "PK\x03\x04" + good.substr(4), "magic");
  expect_bad("short.npy", good.substr(0, 20), "truncated header");
  expect_bad("empty.npy", "", "");
  std::string object = good;
  object.replace(object.find("'<f8'"), 5, "'|O' ");
  expect_bad("object.npy", object, "object arrays");
  std::string shape_bad = good;
  shape_bad.replace(shape_bad.find("(3,)"), 4, "(3) ");
  expect_bad("shape.npy", shape_bad, "trailing comma");
  std::string key_bad = good;
  key_bad.replace(key_bad.find("'shape'"), 7, "'shapf'");
  expect_bad("key.npy", key_bad, "unexpected key");
  std::string version_bad = good;
  version_bad[6] = '\x07';
  expect_bad("version.npy", version_bad, "version 7.0");

  try {
    (void)npy_read(path("missing.npy"));
    ADD_FAILURE() << "no error";
  } catch (const system_error &e) {
    EXPECT_EQ(std::string(e.what()), "unable to open " + path("missing.npy") + ": No such file or directory");
  }
}

TEST_F(Npy, DescrMapping) {
  EXPECT_EQ(npy_descr_dtype("<f4"), dtype::float32);
  EXPECT_EQ(npy_descr_dtype("<f2"), dtype::float16);
  EXPECT_EQ(npy_descr_dtype("|b1"), dtype::boolean);
  EXPECT_EQ(npy_descr_dtype("|i1"), dtype::int8);
  EXPECT_EQ(npy_descr_dtype("|u1"), dtype::uint8);
  EXPECT_EQ(npy_descr_dtype("<c16"), dtype::complex128);
  EXPECT_EQ(npy_descr_dtype("<i8"), dtype::int64);
  EXPECT_EQ(npy_descr_dtype(">i8"), std::nullopt);
  EXPECT_EQ(npy_descr_dtype("<u4"), std::nullopt);
  EXPECT_EQ(npy_descr_dtype("<U5"), std::nullopt);
  EXPECT_EQ(npy_descr_itemsize("<U5", "t"), 20u);
  EXPECT_EQ(npy_descr_itemsize("<M8[ns]", "t"), 8u);
  EXPECT_THROW((void)npy_descr_itemsize("|O", "t"), usage_error);
}

// Our files, checked by numpy: dtype, shape, values, and byte-identical to np.save().
TEST_F(Npy, NumpyLoadsOurFiles) {
  if (!have_numpy()) GTEST_SKIP() << "needs /usr/bin/python3 with numpy";
  const std::array<int64_t, 2> s23{2, 3};
  const std::array<int64_t, 1> s2{2}, s3{3}, s8{8}, s6{6};
  const std::array<int64_t, 2> s03{0, 3};
  const std::span<const int64_t> scalar{};

  const std::vector<double> f64{3.5};
  npy_write(path("a_f64_0d.npy"), dtype::float64, scalar, bytes_of(f64));
  const std::vector<float> f32{0.5f, -1.25f, 3.f, 4.f, 5.f, 6.f};
  npy_write(path("b_f32.npy"), dtype::float32, s23, bytes_of(f32));
  const std::vector<uint16_t> f16{0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0001, 0xFC00};
  npy_write(path("c_f16.npy"), dtype::float16, s6, bytes_of(f16));
  const std::vector<uint16_t> bf16{0x3FC0, 0xC000, 0x4049, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8000};
  npy_write(path("d_bf16.npy"), dtype::bfloat16, s8, bytes_of(bf16));
  const std::vector<int8_t> i8{-128, 0, 127};
  npy_write(path("e_i8.npy"), dtype::int8, s3, bytes_of(i8));
  const std::vector<int16_t> i16{-32768, 1, 32767};
  npy_write(path("f_i16.npy"), dtype::int16, s3, bytes_of(i16));
  const std::vector<int32_t> i32{-2147483647 - 1, 7, 2147483647};
  npy_write(path("g_i32.npy"), dtype::int32, s3, bytes_of(i32));
  const std::vector<int64_t> i64{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  npy_write(path("h_i64.npy"), dtype::int64, s2, bytes_of(i64));
  const std::vector<uint8_t> u8{0, 200, 255};
  npy_write(path("i_u8.npy"), dtype::uint8, s3, bytes_of(u8));
  const std::vector<uint8_t> b{1, 0, 1};
  npy_write(path("j_bool.npy"), dtype::boolean, s3, bytes_of(b));
  const std::vector<std::complex<float>> c64{{1.f, 2.f}, {-0.5f, 0.f}};
  npy_write(path("k_c64.npy"), dtype::complex64, s2, bytes_of(c64));
  const std::vector<std::complex<double>> c128{{0.1, -0.25}, {1e300, 5e-324}};
  npy_write(path("l_c128.npy"), dtype::complex128, s2, bytes_of(c128));
  npy_write(path("m_empty.npy"), dtype::float32, s03, {});
  std::vector<int64_t> many_dims(32, 1);  // numpy's maximum
  const std::vector<float> one{7.f};
  npy_write(path("n_dims.npy"), dtype::float32, many_dims, bytes_of(one));
  const std::array<int64_t, 2> long_axis{123456789012, 0};  // numpy's spare space shrinks
  npy_write(path("o_long_axis.npy"), dtype::float32, long_axis, {});

  const std::string out = run_python(R"(
import glob, io, os, sys
import numpy as np
for f in sorted(glob.glob(os.path.join(sys.argv[1], '*.npy'))):
    a = np.load(f)
    buf = io.BytesIO()
    np.save(buf, a)
    same = buf.getvalue() == open(f, 'rb').read()
    print(os.path.basename(f), a.dtype.str, a.shape, a.tolist() if a.ndim < 3 and max(a.shape, default=0) < 100 else a.sum(), 'same' if same else 'DIFFERENT')
)");
  const std::string expected =
      "a_f64_0d.npy <f8 () 3.5 same\n"
      "b_f32.npy <f4 (2, 3) [[0.5, -1.25, 3.0], [4.0, 5.0, 6.0]] same\n"
      "c_f16.npy <f2 (6,) [1.0, -2.0, 0.333251953125, 65504.0, 5.960464477539063e-08, -inf] same\n"
      "d_bf16.npy <f4 (8,) [1.5, -2.0, 3.140625, inf, -inf, nan, 9.183549615799121e-41, -0.0] same\n"
      "e_i8.npy |i1 (3,) [-128, 0, 127] same\n"
      "f_i16.npy <i2 (3,) [-32768, 1, 32767] same\n"
      "g_i32.npy <i4 (3,) [-2147483648, 7, 2147483647] same\n"
      "h_i64.npy <i8 (2,) [-9223372036854775808, 9223372036854775807] same\n"
      "i_u8.npy |u1 (3,) [0, 200, 255] same\n"
      "j_bool.npy |b1 (3,) [True, False, True] same\n"
      "k_c64.npy <c8 (2,) [(1+2j), (-0.5+0j)] same\n"
      "l_c128.npy <c16 (2,) [(0.1-0.25j), (1e+300+5e-324j)] same\n"
      "m_empty.npy <f4 (0, 3) [] same\n"
      "n_dims.npy <f4 (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
      "1) 7.0 same\n"
      "o_long_axis.npy <f4 (123456789012, 0) 0.0 same\n";
  EXPECT_EQ(out, expected);
}

// numpy's files, read by npy_read and npy_mapped.
TEST_F(Npy, WeReadNumpyFiles) {
  if (!have_numpy()) GTEST_SKIP() << "needs /usr/bin/python3 with numpy";
  int status = -1;
  const std::string out = run_python(R"(
import os, sys
import numpy as np
d = sys.argv[1]
np.save(os.path.join(d, 'scalar.npy'), np.array(2.5, dtype=np.float32))
np.save(os.path.join(d, 'vec.npy'), np.arange(5, dtype=np.int64))
np.save(os.path.join(d, 'empty.npy'), np.zeros((0, 3), dtype=np.float32))
np.save(os.path.join(d, 'bool.npy'), np.array([True, False, True]))
np.save(os.path.join(d, 'fp16.npy'), np.array([1.0, -2.0, 65504.0, 0.1], dtype=np.float16))
np.save(os.path.join(d, 'big_endian.npy'), np.arange(6, dtype='>i4').reshape(2, 3))
np.save(os.path.join(d, 'fortran.npy'), np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)))
np.save(os.path.join(d, 'c128.npy'), np.array([1 + 2j], dtype=np.complex128))
with open(os.path.join(d, 'v2.npy'), 'wb') as f:
    np.lib.format.write_array(f, np.arange(4, dtype=np.uint8), version=(2, 0))
)",
                                     &status);
  ASSERT_EQ(status, 0) << out;

  const npy_array scalar = npy_read(path("scalar.npy"));
  EXPECT_EQ(scalar.descr, "<f4");
  EXPECT_TRUE(scalar.shape.empty());
  ASSERT_EQ(scalar.data.size(), 4u);
  float f;
  std::memcpy(&f, scalar.data.data(), 4);
  EXPECT_EQ(f, 2.5f);

  const npy_array vec = npy_read(path("vec.npy"));
  EXPECT_EQ(vec.type(), dtype::int64);
  EXPECT_EQ(vec.shape, std::vector<int64_t>{5});
  ASSERT_EQ(vec.data.size(), 40u);
  int64_t v4;
  std::memcpy(&v4, vec.data.data() + 32, 8);
  EXPECT_EQ(v4, 4);

  const npy_array empty = npy_read(path("empty.npy"));
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(empty.data.empty());
  const npy_mapped empty_mapped(path("empty.npy"));
  EXPECT_EQ(empty_mapped.element_count(), 0u);
  EXPECT_TRUE(empty_mapped.data().empty());

  const npy_array b = npy_read(path("bool.npy"));
  EXPECT_EQ(b.descr, "|b1");
  EXPECT_EQ(b.type(), dtype::boolean);
  ASSERT_EQ(b.data.size(), 3u);
  EXPECT_EQ(b.data[0], std::byte{1});
  EXPECT_EQ(b.data[1], std::byte{0});

  const npy_mapped h(path("fp16.npy"));
  EXPECT_EQ(h.type(), dtype::float16);
  EXPECT_EQ(h.shape(), std::vector<int64_t>{4});
  ASSERT_EQ(h.data().size(), 8u);
  uint16_t bits[4];
  std::memcpy(bits, h.data().data(), 8);
  EXPECT_EQ(bits[0], 0x3C00);
  EXPECT_EQ(bits[1], 0xC000);
  EXPECT_EQ(bits[2], 0x7BFF);
  EXPECT_EQ(bits[3], 0x2E66);

  const npy_array be = npy_read(path("big_endian.npy"));
  EXPECT_EQ(be.descr, ">i4");
  EXPECT_EQ(be.type(), std::nullopt);
  ASSERT_EQ(be.data.size(), 24u);
  EXPECT_EQ(be.data[23], std::byte{5});  // stored as is: big-endian 5

  const npy_array fo = npy_read(path("fortran.npy"));
  EXPECT_TRUE(fo.fortran_order);
  EXPECT_EQ(fo.shape, (std::vector<int64_t>{2, 3}));
  double second;
  std::memcpy(&second, fo.data.data() + 8, 8);
  EXPECT_EQ(second, 3.0);  // column-major: a[1, 0]

  EXPECT_EQ(npy_read(path("c128.npy")).type(), dtype::complex128);
  const npy_array v2 = npy_read(path("v2.npy"));
  EXPECT_EQ(v2.type(), dtype::uint8);
  EXPECT_EQ(v2.data.size(), 4u);
}

}  // namespace
}  // namespace tprobe
