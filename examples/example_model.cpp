#include "example_model.h"

#include <cmath>
#include <cstring>
#include <random>

#include "tensor_stats.h"

namespace tprobe::example {

namespace {

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T> &v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct generator {
  std::mt19937_64 rng;
  std::vector<float> normal(int64_t n, float scale) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto &x : v) x = d(rng);
    return v;
  }
};

item tensor(std::string entry, std::string slot, element type, std::vector<int64_t> shape, std::vector<float> values,
            bool requires_grad) {
  item it{std::move(entry), std::move(slot), true, type, std::move(shape), {}, requires_grad, {}};
  switch (type) {
    case element::float32: it.data = bytes_of(values); break;
    case element::float16: {
      std::vector<uint16_t> h;
      for (float f : values) h.push_back(float_to_float16(f));
      it.data = bytes_of(h);
      break;
    }
    case element::bfloat16: {
      std::vector<uint16_t> h;
      for (float f : values) h.push_back(float_to_bfloat16(f));
      it.data = bytes_of(h);
      break;
    }
    case element::boolean: {
      std::vector<uint8_t> h;
      for (float f : values) h.push_back(f > 0.0f ? 1 : 0);
      it.data = bytes_of(h);
      break;
    }
    case element::int64: {
      std::vector<int64_t> h;
      for (float f : values) h.push_back(static_cast<int64_t>(std::lround(f)));
      it.data = bytes_of(h);
      break;
    }
  }
  return it;
}

item value(std::string entry, std::string slot, std::string json) {
  item it;
  it.entry = std::move(entry);
  it.slot = std::move(slot);
  it.is_tensor = false;
  it.json = std::move(json);
  return it;
}

}  // namespace

std::vector<item> example_step(uint64_t seed, int rank, int64_t step) {
  generator g{std::mt19937_64(seed * 1000003u + static_cast<uint64_t>(rank + 1) * 7919u + static_cast<uint64_t>(step))};
  const int64_t batch = 4, in = 16, out = 8;
  std::vector<item> items;

  auto x = g.normal(batch * in, 1.0f);
  auto w = g.normal(out * in, 0.25f);
  auto b = g.normal(out, 0.1f);
  std::vector<float> y(static_cast<size_t>(batch * out));
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t o = 0; o < out; ++o) {
      float acc = b[static_cast<size_t>(o)];
      for (int64_t k = 0; k < in; ++k) acc += x[static_cast<size_t>(i * in + k)] * w[static_cast<size_t>(o * in + k)];
      y[static_cast<size_t>(i * out + o)] = acc;
    }
  const std::string lin = "Functional.linear.0.forward";
  items.push_back(tensor(lin, "input.0", element::float32, {batch, in}, x, false));
  items.push_back(tensor(lin, "input.1", element::float32, {out, in}, w, true));
  items.push_back(tensor(lin, "input.2", element::float32, {out}, b, true));
  items.push_back(tensor(lin, "output.0", element::float32, {batch, out}, y, true));

  std::vector<float> r(y);
  for (auto &v : r) v = std::max(v, 0.0f);
  items.push_back(tensor("Functional.relu.0.forward", "input.0", element::float32, {batch, out}, y, true));
  items.push_back(tensor("Functional.relu.0.forward", "output.0", element::float32, {batch, out}, r, true));

  const std::string add = "Tensor.__add__.0.forward";
  items.push_back(tensor(add, "input.0", element::int64, {}, {423.0f + static_cast<float>(step)}, false));
  items.push_back(value(add, "input.1", R"({"type":"int","value":1})"));
  items.push_back(tensor(add, "output.0", element::int64, {}, {424.0f + static_cast<float>(step)}, false));

  const std::string softmax = "Torch.softmax.0.forward";
  auto logits = g.normal(batch * out, 2.0f);
  items.push_back(tensor(softmax, "input.0", element::float16, {batch, out}, logits, false));
  items.push_back(value(softmax, "kwargs.dim", R"({"type":"int","value":-1})"));
  std::vector<float> sm(logits.size());
  for (int64_t i = 0; i < batch; ++i) {
    float sum = 0;
    for (int64_t o = 0; o < out; ++o) sum += std::exp(logits[static_cast<size_t>(i * out + o)]);
    for (int64_t o = 0; o < out; ++o)
      sm[static_cast<size_t>(i * out + o)] = std::exp(logits[static_cast<size_t>(i * out + o)]) / sum;
  }
  items.push_back(tensor(softmax, "output.0", element::float16, {batch, out}, sm, false));

  const std::string gelu = "Functional.gelu.0.forward";
  auto h = g.normal(batch * out, 1.0f);
  items.push_back(tensor(gelu, "input.0", element::bfloat16, {batch, out}, h, true));
  std::vector<float> gh(h);
  for (auto &v : gh) v = 0.5f * v * (1.0f + std::erf(v / std::sqrt(2.0f)));
  items.push_back(tensor(gelu, "output.0", element::bfloat16, {batch, out}, gh, true));

  const std::string gt = "Tensor.__gt__.0.forward";
  items.push_back(tensor(gt, "input.0", element::float32, {batch, out}, y, true));
  items.push_back(value(gt, "input.1", R"({"type":"float","value":0.0})"));
  items.push_back(tensor(gt, "output.0", element::boolean, {batch, out}, y, false));

  if (step == 1) {
    // The step where something goes wrong: log of a zero and of a negative number.
    std::vector<float> pos = g.normal(8, 1.0f);
    for (auto &v : pos) v = std::fabs(v) + 0.5f;
    pos[2] = 0.0f;
    pos[5] = -1.0f;
    std::vector<float> logs(pos);
    for (auto &v : logs) v = std::log(v);
    items.push_back(tensor("Torch.log.0.forward", "input.0", element::float32, {8}, pos, false));
    items.push_back(tensor("Torch.log.0.forward", "output.0", element::float32, {8}, logs, false));
  }

  auto grad_y = g.normal(batch * out, 0.01f);
  std::vector<float> grad_relu(grad_y);
  for (size_t i = 0; i < grad_relu.size(); ++i) grad_relu[i] = y[i] > 0 ? grad_y[i] : 0.0f;
  items.push_back(tensor("Functional.relu.0.backward", "input.0", element::float32, {batch, out}, grad_y, false));
  items.push_back(tensor("Functional.relu.0.backward", "output.0", element::float32, {batch, out}, grad_relu, false));
  const std::string linb = "Functional.linear.0.backward";
  items.push_back(tensor(linb, "input.0", element::float32, {batch, out}, grad_relu, false));
  items.push_back(tensor(linb, "output.0", element::float32, {batch, in}, g.normal(batch * in, 0.01f), false));
  items.push_back(tensor(linb, "output.1", element::float32, {out, in}, g.normal(out * in, 0.01f), false));
  items.push_back(tensor(linb, "output.2", element::float32, {out}, g.normal(out, 0.01f), false));
  return items;
}

uint8_t element_dl_code(element t) {
  switch (t) {
    case element::float32:
    case element::float16: return 2;   // kDLFloat
    case element::bfloat16: return 4;  // kDLBfloat
    case element::int64: return 0;     // kDLInt
    case element::boolean: return 6;   // TPROBE_DL_BOOL
  }
  return 0;
}

uint8_t element_bits(element t) {
  switch (t) {
    case element::float32: return 32;
    case element::float16:
    case element::bfloat16: return 16;
    case element::int64: return 64;
    case element::boolean: return 8;
  }
  return 0;
}

}  // namespace tprobe::example
