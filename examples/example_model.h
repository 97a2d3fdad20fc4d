// example_model.h: the deterministic tensors the example producer emits, one step of a small
// network's forward and backward as msprobe would name it. Tests call the same function to know
// exactly what was sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tprobe::example {

enum class element : uint8_t { float32, float16, bfloat16, int64, boolean };

struct item {
  std::string entry;   // "Functional.linear.0.forward"
  std::string slot;    // "input.0"
  bool is_tensor = true;
  element type = element::float32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;  // contiguous little-endian elements
  bool requires_grad = false;
  std::string json;             // non-tensor: its msprobe JSON leaf
};

// Items of one step, in call order. Values depend only on (seed, rank, step). Step 1 contains a
// NaN and an -Inf (a Functional.log of a tensor with a zero and a negative element).
std::vector<item> example_step(uint64_t seed, int rank, int64_t step);

// DLPack code/bits of an element type.
uint8_t element_dl_code(element t);
uint8_t element_bits(element t);

}  // namespace tprobe::example
