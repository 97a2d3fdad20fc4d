#include "stage_harness.h"

#include <atomic>
#include <exception>
#include <future>
#include <thread>

#include <fmt/format.h>

namespace tprobe::test {

namespace {
std::string next_endpoint(const char *what) {
  static std::atomic<int> counter{0};
  return fmt::format("inproc://stage-harness-{}-{}", what, ++counter);
}
}  // namespace

stage_harness::stage_harness(bool has_output, stage_io_options extra)
    : has_output_(has_output), extra_(std::move(extra)) {}

std::vector<record> stage_harness::run(const std::function<void(stage_io &)> &stage, const std::vector<record> &input) {
  return run_with(stage, &input, "");
}

std::vector<record> stage_harness::run_file(const std::function<void(stage_io &)> &stage, const std::string &path) {
  return run_with(stage, nullptr, path);
}

std::vector<record> stage_harness::run_with(const std::function<void(stage_io &)> &stage,
                                            const std::vector<record> *input, const std::string &file) {
  const std::string in = file.empty() ? next_endpoint("in") : file;
  const std::string out = next_endpoint("out");
  std::vector<record> collected;
  std::exception_ptr collector_error, stage_error;
  barriers_.clear();
  counts_ = {};

  // The collector binds first: the stage's output connects to it while the stage_io is built.
  std::promise<void> collector_bound;
  std::thread collector;
  if (has_output_) {
    collector = std::thread([&] {
      bool bound = false;
      try {
        stage_io_options o;
        o.input = out;
        o.producers = 1;
        o.producer_name = "stage-harness collector";
        stage_io c(ctx_, o);
        bound = true;
        collector_bound.set_value();
        while (auto r = c.receive()) collected.push_back(std::move(*r));
      } catch (...) {
        collector_error = std::current_exception();
        if (!bound) collector_bound.set_value();
      }
    });
    collector_bound.get_future().wait();
  }

  std::promise<void> stage_bound;
  std::thread runner([&] {
    bool bound = false;
    try {
      stage_io_options o = extra_;
      o.input = in;
      o.producers = 1;
      o.outputs.clear();
      if (has_output_) o.outputs.push_back(out);
      if (o.producer_name.empty()) o.producer_name = "stage under test";
      stage_io io(ctx_, o);
      bound = true;
      stage_bound.set_value();
      stage(io);
      counts_ = io.counts();
    } catch (...) {
      stage_error = std::current_exception();
      if (!bound) stage_bound.set_value();
    }
  });
  stage_bound.get_future().wait();

  std::exception_ptr feed_error;
  if (input && !stage_error) {
    try {
      link_deadlines deadlines;
      deadlines.connect_timeout_ms = 10000;
      deadlines.stall_timeout_ms = 10000;  // a stage that stopped reading fails the run, not hangs it
      record_sender sender(ctx_, in, "stage-harness", 1000, deadlines, numbered_);
      for (const auto &r : *input) {
        if (record_is_barrier(r.header)) {
          record copy = record_copy(r);
          copy.header.meta.erase("barrier");
          barriers_.push_back(sender.sync(std::move(copy)));
        } else {
          sender.send(r);
        }
      }
      sender.finish(input->size(), 0);
    } catch (...) {
      feed_error = std::current_exception();
      // The stage would wait for an eos that never comes: stop it (the process-wide stop flag
      // stays set, so the test has failed for good; later runs in this process end at once).
      request_stop();
    }
  }
  runner.join();
  if (collector.joinable()) collector.join();
  if (stage_error) std::rethrow_exception(stage_error);
  if (feed_error) std::rethrow_exception(feed_error);
  if (collector_error) std::rethrow_exception(collector_error);
  return collected;
}

record record_copy(const record &r) {
  auto frames = record_encode(r);
  std::vector<zmq::message_t> owned(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) owned[i].copy(frames[i]);
  return record_decode(owned);
}

void tap_feed(zmq::context_t &ctx, const std::vector<record> &records,
              const std::function<void(const std::string &endpoint)> &reader) {
  const std::string endpoint = next_endpoint("tap");
  zmq::socket_t pub(ctx, zmq::socket_type::xpub);
  pub.set(zmq::sockopt::linger, 0);
  pub.set(zmq::sockopt::sndhwm, 0);  // nothing dropped: the test decides what arrives
  pub.bind(endpoint);
  std::exception_ptr reader_error;
  std::atomic<bool> reader_done{false};
  std::thread t([&] {
    try {
      reader(endpoint);
    } catch (...) {
      reader_error = std::current_exception();
    }
    reader_done = true;
  });
  // XPUB hands up the subscription: from then on, everything published reaches the reader.
  zmq::pollitem_t item{pub.handle(), 0, ZMQ_POLLIN, 0};
  while (!reader_done && zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) {
  }
  if (item.revents & ZMQ_POLLIN) {
    zmq::message_t subscription;
    (void)pub.recv(subscription);
    for (const auto &r : records) {
      auto frames = record_encode(r);
      for (size_t i = 0; i < frames.size(); ++i)
        pub.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    record eos(record_kind::eos);
    pub.send(record_header_encode(eos.header), zmq::send_flags::none);
  }
  t.join();
  if (reader_error) std::rethrow_exception(reader_error);
}

std::string capture_file_output(const std::function<void(std::FILE *)> &body) {
  char *buffer = nullptr;
  size_t size = 0;
  std::FILE *f = open_memstream(&buffer, &size);
  if (!f) throw std::runtime_error("open_memstream failed");
  try {
    body(f);
  } catch (...) {
    std::fclose(f);
    std::free(buffer);
    throw;
  }
  std::fclose(f);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

}  // namespace tprobe::test
