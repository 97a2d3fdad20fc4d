// The capture session's statistics memo (session.h "stats_seen"): recording the statistics of a
// tensor just taken, so that the next capture of the same bytes reuses them. Apart from the
// lookups, which stay inline in session.h (a hit costs no read, so a call would show): these run
// after a miss, which has just read the whole tensor (or found a zeroed one's statistics) and
// copies a tensor_stats here, beside which a call is nothing.
#include <algorithm>

#include "session.h"

using namespace tprobe;

void tprobe_session::stats_seen_add(uint64_t content, const std::byte *data, const record_header &h,
                                    const stats_options &o) {
  if (stats_seen_table.empty()) stats_seen_table.resize(stats_seen_max);
  stats_seen &e = stats_seen_table[content & (stats_seen_max - 1)];
  e.content = content;
  e.data = data;
  e.type = h.type;
  e.count = h.element_count();
  e.zero_dim = h.shape.empty();
  e.high_precision = o.high_precision;
  e.crc32 = o.crc32;
  e.stats = *h.stats;
}

void tprobe_session::strided_seen_add(uint64_t content, const std::byte *data, const DLTensor &t,
                                      const record_header &h, const stats_options &o) {
  if (t.ndim > strided_seen_dims) return;
  if (strided_seen_table.empty()) strided_seen_table.resize(strided_seen_max);
  strided_seen &e = strided_seen_table[content & (strided_seen_max - 1)];
  e.content = content;
  e.data = data;
  e.type = h.type;
  e.ndim = t.ndim;
  std::copy(t.shape, t.shape + t.ndim, e.shape);
  std::copy(t.strides, t.strides + t.ndim, e.strides);
  e.high_precision = o.high_precision;
  e.crc32 = o.crc32;
  e.stats = *h.stats;
}
