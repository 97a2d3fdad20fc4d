// The capture session's control channel (session.h): listening for the stages' commands
// (endpoint.h "Control") and applying them on the training thread: stop, the monitor switch, and
// narrowing the capture's steps and entries. Apart: the only code that changes what is captured
// while the training runs.
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "session.h"

using namespace tprobe;

void tprobe_session::apply_control() {
  for (const record &r : control->take()) {
    const auto &m = r.header.meta;
    const std::string command = m.is_object() ? m.value("command", std::string{}) : std::string{};
    const std::string from = m.is_object() ? m.value("from", std::string("a stage")) : std::string("a stage");
    const std::string reason = m.is_object() ? m.value("reason", std::string{}) : std::string{};
    try {
      if (command == "stop") {
        if (!service_ended)
          std::fprintf(stderr, "tprobe: %s stopped the capture%s%s\n", from.c_str(), reason.empty() ? "" : ": ",
                       reason.c_str());
        service_ended = stopped_by_pipeline = true;
      } else if (command == "monitor") {
        if (config.task != "monitor") throw usage_error("command \"monitor\" is for a monitor session (TrainerMon)");
        const auto on = m.find("on");
        if (on == m.end() || !on->is_boolean()) throw usage_error("monitor: expected \"on\": true or false");
        monitor_switch = on->get<bool>() ? TPROBE_MONITOR_ON : TPROBE_MONITOR_OFF;
        std::fprintf(stderr, "tprobe: %s turned the monitor %s%s%s\n", from.c_str(), on->get<bool>() ? "on" : "off",
                     reason.empty() ? "" : ": ", reason.c_str());
      } else if (command == "narrow") {
        narrowing n = narrow;
        if (auto it = m.find("step"); it != m.end()) {
          n.steps = config_parse_rank_or_step(*it, "step", "control command from " + from);
          std::sort(n.steps.begin(), n.steps.end());
          n.has_steps = !it->is_null();
        }
        if (auto it = m.find("list"); it != m.end()) {
          n.list.clear();
          if (!it->is_array()) throw usage_error("list: expected a list of strings");
          for (const auto &e : *it) {
            if (!e.is_string()) throw usage_error("list: expected a list of strings");
            n.list.push_back(e.get<std::string>());
          }
        }
        if (auto it = m.find("level"); it != m.end()) {
          if (!it->is_string() || (*it != "L0" && *it != "L1" && *it != "mix"))
            throw usage_error("level: expected \"L0\", \"L1\" or \"mix\"");
          n.level = it->get<std::string>();
        }
        narrow = std::move(n);
        narrowed_in_step = step;
        std::fprintf(stderr, "tprobe: %s narrowed the capture (%s)%s%s\n", from.c_str(), m.dump().c_str(),
                     reason.empty() ? "" : ": ", reason.c_str());
      } else {
        throw usage_error(fmt::format("unknown command \"{}\"", command));
      }
    } catch (const std::exception &e) {
      // A bad command must never end the training: it is reported and ignored.
      std::fprintf(stderr, "tprobe: warning: ignored a control command from %s: %s\n", from.c_str(), e.what());
    }
  }
}

void tprobe_session::open_control() {
  const char *env = std::getenv("TPROBE_CONTROL_ENDPOINT");
  if (env && *env) {
    try {
      control = std::make_unique<control_listener>(ctx, env);
    } catch (const std::exception &e) {
      throw usage_error(fmt::format("TPROBE_CONTROL_ENDPOINT: {}", e.what()));
    }
    return;
  }
  try {
    control = std::make_unique<control_listener>(ctx, "");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "tprobe: warning: no control endpoint (%s): stages cannot stop or narrow this capture\n",
                 e.what());
  }
}
