// tprobe_capture.hpp: a thin C++ RAII layer over tprobe_capture.h.
//
//   tprobe::capture_session session("config.json");   // throws tprobe::capture_error
//   session.start();
//   session.capture("Functional.linear.0.forward", "input.0", dl_tensor);
//   session.stop();
//   session.step();
//   // the destructor closes the session: flush, end-of-stream
//
// Like the C API, it depends on DLPack only.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tprobe_capture.h"

namespace tprobe {

class capture_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class capture_session {
 public:
  explicit capture_session(const std::string &config_path = {},
                           const tprobe_open_options &options = tprobe_open_options_default()) {
    tprobe_session *raw = nullptr;
    check(tprobe_session_open(config_path.empty() ? nullptr : config_path.c_str(), &options, &raw));
    session_.reset(raw);
  }

  // Close explicitly to see errors of the final flush; the destructor closes silently.
  void close() {
    const int rc = tprobe_session_close(session_.release());
    check(rc);
  }

  void start() { check(tprobe_start(get())); }
  void stop() { check(tprobe_stop(get())); }
  void step() { check(tprobe_step(get())); }
  int64_t current_step() const { return tprobe_current_step(session_.get()); }

  // True when the entry is captured (rank, step, scope and list filters).
  bool entry_begin(const std::string &entry, const char *parent = nullptr,
                   const std::vector<std::string> &stack = {}, int is_recompute = -1) {
    std::vector<const char *> lines;
    for (const auto &l : stack) lines.push_back(l.c_str());
    return check(tprobe_entry_begin(get(), entry.c_str(), parent, lines.data(), lines.size(), is_recompute)) ==
           TPROBE_OK;
  }

  // True when captured, false when filtered out.
  bool capture(const std::string &entry, const std::string &slot, const DLTensor &tensor, bool requires_grad = false) {
    return check(tprobe_capture_tensor(get(), entry.c_str(), slot.c_str(), &tensor, requires_grad)) == TPROBE_OK;
  }
  bool capture_value(const std::string &entry, const std::string &slot, const std::string &json) {
    return check(tprobe_capture_value(get(), entry.c_str(), slot.c_str(), json.c_str())) == TPROBE_OK;
  }

  tprobe_session_counts counts() const {
    tprobe_session_counts c{};
    tprobe_session_counts_get(session_.get(), &c);
    return c;
  }

  tprobe_session *get() const {
    if (!session_) throw capture_error("capture session is closed");
    return session_.get();
  }

 private:
  static int check(int rc) {
    if (rc == TPROBE_ERROR) throw capture_error(tprobe_last_error());
    return rc;
  }
  struct closer {
    void operator()(tprobe_session *s) const { tprobe_session_close(s); }
  };
  std::unique_ptr<tprobe_session, closer> session_;
};

}  // namespace tprobe
