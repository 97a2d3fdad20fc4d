// tprobe-fuzz-seeds DIR: writes the binary seeds of the fuzz corpus, DIR/record/*.bin and
// DIR/npy/*.npy, with the product's own encoders (record_encode, record_file_writer, npy_write),
// so that the seeds are valid inputs of the current format. The output is deterministic; the
// checked-in tests/fuzz/corpus/ came from
//
//     build-fuzz/bin/tprobe-fuzz-seeds tests/fuzz/corpus
//
// Rerun it after a format change. The text seeds (manifests, configs, dump.json) are plain files
// copied into the corpus by hand.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "npy.h"
#include "record.h"

using namespace tprobe;

namespace {

void write_bytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("unable to write " + path);
}

std::string read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::byte> pattern(size_t n, unsigned mul) {
  std::vector<std::byte> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::byte>((i * mul + 7) & 0xff);
  return bytes;
}

record tensor(std::vector<int64_t> shape, dtype t, bool with_payload) {
  record r(record_kind::tensor);
  r.header.run = "run-1";
  r.header.rank = 0;
  r.header.step = 1;
  r.header.seq = 5;
  r.header.entry = "Functional.linear.0.forward";
  r.header.slot = "input.0";
  r.header.type = t;
  r.header.shape = std::move(shape);
  r.header.requires_grad = true;
  r.header.flags = RECORD_FLAG_SAVE;
  if (with_payload) r.set_payload(pattern(r.header.element_count() * dtype_size(t), 31));
  return r;
}

std::vector<record> sample_records() {
  std::vector<record> out;
  out.emplace_back(record_kind::hello);
  out.emplace_back(record_kind::ack);

  record session(record_kind::session);
  session.header.run = "run-1";
  session.header.meta = {{"task", "statistics"}, {"level", "L1"}, {"framework", "pytorch"},
                         {"dump_path", "/tmp/dump"}, {"rank", nlohmann::ordered_json::array()},
                         {"precision", "high"}, {"label", "a"}};
  out.push_back(std::move(session));

  out.push_back(tensor({2, 3}, dtype::float32, true));

  // LZ4: a compressible payload, so record_payload_lz4 keeps it.
  record lz4 = tensor({64}, dtype::float32, false);
  std::vector<std::byte> zeros(64 * 4, std::byte{0});
  lz4.header.codec = record_codec::lz4;
  lz4.header.length = zeros.size();
  lz4.set_payload_frame(*record_payload_lz4(zeros));
  out.push_back(std::move(lz4));

  record stats_only = tensor({4}, dtype::bfloat16, false);
  stats_only.header.flags = RECORD_FLAG_CRC32;
  tensor_stats s;
  s.max = stat_value::of_real(2.0);
  s.min = stat_value::of_real(-0.0);
  s.mean = stat_value::of_int(1);
  s.norm = stat_value::none();
  s.nan_count = 1;
  s.crc32 = 0xdeadbeef;
  stats_only.header.stats = s;
  out.push_back(std::move(stats_only));

  record nested = tensor({}, dtype::int64, true);
  nested.header.slot = "input.1.key";
  nested.header.path = std::vector<record_path_element>{int64_t{1}, std::string("key")};
  nested.header.device = "cuda:0";
  nested.header.tensor_type = "torch.nn.parameter.Parameter";
  out.push_back(std::move(nested));

  out.push_back(tensor({2, 2}, dtype::complex64, true));
  out.push_back(tensor({3}, dtype::boolean, true));

  record value(record_kind::value);
  value.header.entry = "Tensor.__add__.0.forward";
  value.header.slot = "input.1";
  value.header.meta = {{"type", "int"}, {"value", 1}};
  out.push_back(std::move(value));

  record entry(record_kind::entry);
  entry.header.entry = "Module.fc.Linear.forward.0";
  entry.header.meta = {{"stack", {"File a.py, line 1, in f", "x = fc(y)"}}, {"parent", nullptr}, {"is_recompute", false}};
  out.push_back(std::move(entry));
  // 1.4: a stack by reference, defined (lines and id) and then used (id alone).
  record defined(record_kind::entry);
  defined.header.run = "seed-run";
  defined.header.entry = "Torch.add.0.forward";
  defined.header.meta = {{"stack", {"File b.py, line 2, in g"}}, {"stack_id", 1}, {"parent", nullptr}};
  out.push_back(std::move(defined));
  record referenced(record_kind::entry);
  referenced.header.run = "seed-run";
  referenced.header.entry = "Torch.add.1.forward";
  referenced.header.meta = {{"stack_id", 1}, {"parent", nullptr}};
  out.push_back(std::move(referenced));

  out.emplace_back(record_kind::flush);
  record step_end(record_kind::step_end);
  step_end.header.step = 3;
  out.push_back(std::move(step_end));
  record eos(record_kind::eos);
  eos.header.meta = {{"records", 12}, {"dropped", 0}};
  out.push_back(std::move(eos));
  out.emplace_back(record_kind::final);
  // 1.2: a payload by reference (header key shm), no payload frame.
  record by_ref = tensor({16384, 4}, dtype::float32, false);
  by_ref.header.seq = 6;
  by_ref.header.slot = "output.0";
  by_ref.header.requires_grad = false;
  by_ref.header.length = 16384 * 16;
  by_ref.header.shm = record_shm_ref{"/proc/4242/fd/7", 0x1234567890abcdefull, 4160};
  out.push_back(std::move(by_ref));
  return out;
}

// fuzz_record's framed form: mode byte (count << 1), then every frame but the last as a u32
// length and its bytes, then the last frame.
std::string framed_seed(const record &r) {
  const auto frames = record_encode(r);
  std::string out(1, static_cast<char>(frames.size() << 1));
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i + 1 < frames.size()) {
      const auto n = static_cast<uint32_t>(frames[i].size());
      for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((n >> (8 * b)) & 0xff));
    }
    out.append(static_cast<const char *>(frames[i].data()), frames[i].size());
  }
  return out;
}

void record_seeds(const std::string &dir) {
  std::filesystem::create_directories(dir);
  const auto records = sample_records();
  for (size_t i = 0; i < records.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "/frames-%02zu-%s.bin", i, std::string(record_kind_name(records[i].header.kind)).c_str());
    write_bytes(dir + name, framed_seed(records[i]));
  }
  // 1.3: a batch frame (one frame, mode 2) of every data record that may join one.
  {
    record_batch_builder batch;
    for (const auto &r : records)
      if (record_batchable(r.header)) batch.append(record_encode(r));
    const auto frame = batch.take();
    write_bytes(dir + "/frames-batch.bin",
                std::string(1, '\x02') + std::string(static_cast<const char *>(frame.data()), frame.size()));
  }
  // Record files: mode 3 (the fuzzer writes the magic), and mode 1 with the magic in the input.
  const std::string tmp = dir + "/.stream.tmp";
  {
    record_file_writer w(tmp);
    for (const auto &r : records) w.write(r);
    w.close();
  }
  const std::string file = read_bytes(tmp);
  std::filesystem::remove(tmp);
  write_bytes(dir + "/file-stream.bin", std::string(1, '\x03') + file.substr(RECORD_FILE_MAGIC.size()));
  write_bytes(dir + "/file-with-magic.bin", std::string(1, '\x01') + file);
}

void npy_seeds(const std::string &dir) {
  std::filesystem::create_directories(dir);
  struct sample {
    const char *name;
    dtype type;
    std::vector<int64_t> shape;
  };
  const std::vector<sample> samples{
      {"f4-2x3", dtype::float32, {2, 3}},   {"f8-4", dtype::float64, {4}},        {"f2-2x2", dtype::float16, {2, 2}},
      {"bf16-3", dtype::bfloat16, {3}},     {"i8-0d", dtype::int64, {}},          {"i4-5", dtype::int32, {5}},
      {"i2-2", dtype::int16, {2}},          {"i1-3", dtype::int8, {3}},           {"u1-0x3", dtype::uint8, {0, 3}},
      {"b1-4", dtype::boolean, {4}},        {"c8-2", dtype::complex64, {2}},      {"c16-1x1x1", dtype::complex128, {1, 1, 1}},
  };
  for (const auto &s : samples) {
    size_t count = 1;
    for (const int64_t d : s.shape) count *= static_cast<size_t>(d);
    npy_write(dir + "/" + s.name + ".npy", s.type, s.shape, pattern(count * dtype_size(s.type), 13));
  }
  // Header forms numpy writes that npy_write does not: Fortran order, big-endian, a string
  // dtype, format version 2.0.
  auto with_dict = [](unsigned major, const std::string &dict, size_t data_bytes) {
    std::string header = dict;
    const size_t prefix = major == 1 ? 10 : 12;
    while ((prefix + header.size() + 1) % 64 != 0) header.push_back(' ');
    header.push_back('\n');
    std::string out("\x93NUMPY", 6);
    out.push_back(static_cast<char>(major));
    out.push_back('\0');
    for (size_t b = 0; b < prefix - 8; ++b) out.push_back(static_cast<char>((header.size() >> (8 * b)) & 0xff));
    out += header;
    for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<char>(i * 17 + 3));
    return out;
  };
  write_bytes(dir + "/f4-fortran.npy", with_dict(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24));
  write_bytes(dir + "/be-i4.npy", with_dict(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }", 12));
  write_bytes(dir + "/U5.npy", with_dict(1, "{'descr': '<U5', 'fortran_order': False, 'shape': (2,), }", 40));
  write_bytes(dir + "/v2-f8.npy", with_dict(2, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16));
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 100;
  }
  try {
    const std::string dir = argv[1];
    record_seeds(dir + "/record");
    npy_seeds(dir + "/npy");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: fatal: %s\n", argv[0], e.what());
    return 111;
  }
  return 0;
}
