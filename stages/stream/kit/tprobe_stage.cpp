#include "tprobe_stage.h"

#include <fmt/format.h>

namespace tprobe {

stage_context::stage_context(stage_io &io, const stage_description &d, const stage_option_values &options,
                             zmq::context_t &ctx)
    : io_(io), description_(d), options_(options), ctx_(ctx) {}

void stage_context::emit(record r) {
  io_.send(r);
  ++emitted_;
}

const nlohmann::json *stage_context::session(const std::string &run) const {
  auto it = sessions_.find(run);
  return it == sessions_.end() ? nullptr : &it->second;
}

bool stage_context::control(const std::string &run, const std::string &command, const std::string &reason,
                            const nlohmann::json &extra) {
  const auto *meta = session(run);
  if (!meta || !meta->is_object()) return false;
  const std::string endpoint = meta->value("control", std::string{});
  if (endpoint.empty()) return false;
  if (!control_) control_ = std::make_unique<control_sender>(ctx_);
  record r(record_kind::control);
  r.header.meta = {{"command", command}, {"from", description_.stage}, {"reason", reason}};
  if (extra.is_object())
    for (const auto &[key, value] : extra.items()) r.header.meta[key] = value;
  return control_->send(endpoint, r);
}

void stage_context::observe(const record &r) {
  if (r.header.kind == record_kind::session && r.header.meta.is_object()) sessions_[r.header.run] = r.header.meta;
}

int stage_kit_run(stage_io &io, const stage_kit &kit, const stage_option_values &options, zmq::context_t &ctx) {
  stage_context context(io, kit.description, options, ctx);
  while (auto r = io.receive()) {
    context.observe(*r);
    kit.on_record(std::move(*r), context);
  }
  if (kit.on_finish && !io.interrupted()) kit.on_finish(context);
  io.finish();
  return context.exit_code();
}

int stage_kit_main(int argc, char **argv, const stage_kit &kit) {
  // The one main of every stage (stage_main.h), named as the user's table names it: no tprobe- prefix.
  stage_main_extras extras;
  extras.program = kit.description.stage;
  return stage_main(
      argc, argv, kit.description,
      [&](stage_main_context &c) {
        stage_io &io = c.start();
        const int code = stage_kit_run(io, kit, c.values(), c.zmq());
        const auto &counts = io.counts();
        fmt::print(stderr, "{}: {} records received, {} sent, {} producers, {} truncated, tap dropped {}{}\n",
                   extras.program, counts.received, counts.sent, counts.producers, counts.truncated_producers,
                   counts.tap_dropped, io.interrupted() ? ", interrupted" : "");
        return code;
      },
      extras);
}

}  // namespace tprobe
