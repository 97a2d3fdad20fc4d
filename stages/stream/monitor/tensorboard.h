// tensorboard.h: TensorBoard event files, written without TensorFlow, protobuf or tensorboard,
// for tprobe-monitor's `format: tensorboard` (msprobe 8.3.3's SummaryWriterWithAD: one event file
// per rank dir, scalar tag "{tag}_{op}").
//
// The file is a TFRecord stream (tensorflow/core/lib/io/record_writer.cc):
//   uint64 length (little endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// with CRC32C the Castagnoli CRC (reflected polynomial 0x82F63B78, init and final xor ~0) and
// masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. Each data is one serialized Event
// (tensorflow/core/util/event.proto), encoded here by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// The first record is Event{wall_time, file_version: "brain.Event:2"}, as TensorBoard's own
// EventFileWriter writes it; every scalar is then one Event{wall_time, step, summary{value{tag,
// simple_value}}}, as torch.utils.tensorboard's add_scalar writes it (one scalar an event).
//
// File name: events.out.tfevents.{seconds}.{hostname} (seconds since the epoch, ten digits, at
// creation); TensorBoard reads every file whose name contains "tfevents".
//
// Not thread-safe; one writer per file. Errors: system_error naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tprobe {

// CRC32C (Castagnoli) of `data`, and TFRecord's masked form of a CRC.
[[nodiscard]] uint32_t crc32c(std::string_view data);
[[nodiscard]] uint32_t tfrecord_masked_crc(uint32_t crc);
// One TFRecord: the framing above around `data`.
[[nodiscard]] std::string tfrecord_frame(std::string_view data);

// Serialized Events (above). wall_time is seconds since the epoch.
[[nodiscard]] std::string tensorboard_file_version_event(double wall_time);
[[nodiscard]] std::string tensorboard_scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

// Seconds since the epoch, now, as TensorBoard's wall_time.
[[nodiscard]] double tensorboard_now();

class tensorboard_writer {
 public:
  // Creates `dir`/events.out.tfevents.{seconds}.{hostname} (mode 0640; `dir` must exist) and
  // writes the file_version record into it at once, so that the file is a valid event file from
  // its creation on.
  explicit tensorboard_writer(const std::string &dir, double wall_time = tensorboard_now());
  tensorboard_writer(const tensorboard_writer &) = delete;
  tensorboard_writer &operator=(const tensorboard_writer &) = delete;
  ~tensorboard_writer();  // flushes (errors swallowed: call flush() to see them)

  // Queues one scalar; flush() writes what was queued, in one write (append).
  void add_scalar(std::string_view tag, float value, int64_t step, double wall_time = tensorboard_now());
  void flush();

  const std::string &path() const { return path_; }
  uint64_t scalars() const { return scalars_; }  // scalars added so far

 private:
  int fd_ = -1;
  std::string path_, pending_;
  uint64_t scalars_ = 0;
};

}  // namespace tprobe
