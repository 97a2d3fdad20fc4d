// tprobe-writer: see writer.h.
#include <fmt/format.h>

#include "writer.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-writer", [&] {
    const auto &description = writer_stage_description();
    CLI::App app{description.summary, "tprobe-writer"};
    stage_common_args common;
    writer_stage_options options;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, description, common);
    stage_add_declared_options(app, description, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(description, values);
    options.dump_path = values.text("dump-path");
    options.flush_interval = values.number("flush-interval");

    stage_install_signal_handlers();
    zmq::context_t ctx;
    common.io.decode = writer_decode_options;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto result = writer_run(io, options);

    const auto &counts = io.counts();
    fmt::print(stderr,
               "tprobe-writer: {} records, {} entries in {} dump folders, {} tensor files ({:.1f} MB), "
               "{} producers, {} truncated{}\n",
               result.records, result.entries, result.dumps, result.tensor_files, result.tensor_bytes / 1e6,
               counts.producers, counts.truncated_producers, io.interrupted() ? ", interrupted" : "");
    return EXIT_OK;
  });
}
