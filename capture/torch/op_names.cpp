#include "op_names.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <utility>

namespace tprobe::torch_capture {

namespace {

// aten operators exposed by torch.nn.functional (torch 1.13 and 2.x), sorted for binary search.
// F.sigmoid and F.tanh are left out: torch.sigmoid / torch.tanh are how they are called.
constexpr std::string_view functional_ops[] = {
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "adaptive_max_pool3d", "alpha_dropout", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "batch_norm", "bilinear", "binary_cross_entropy", "binary_cross_entropy_with_logits", "celu", "celu_",
    "channel_shuffle", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "cosine_embedding_loss", "cosine_similarity", "cross_entropy_loss", "ctc_loss",
    "dropout", "elu", "elu_", "embedding", "embedding_bag", "feature_alpha_dropout", "feature_dropout",
    "fractional_max_pool2d", "fractional_max_pool3d", "gelu", "glu", "group_norm", "hardshrink",
    "hardsigmoid", "hardswish", "hardtanh", "hardtanh_", "hinge_embedding_loss", "huber_loss",
    "instance_norm", "kl_div", "l1_loss", "layer_norm", "leaky_relu", "leaky_relu_", "linear", "log_softmax",
    "margin_ranking_loss", "max_pool1d", "max_pool1d_with_indices", "max_pool2d", "max_pool2d_with_indices",
    "max_pool3d", "max_pool3d_with_indices", "max_unpool2d", "max_unpool3d", "mish", "mse_loss",
    "multi_margin_loss", "multilabel_margin_loss", "native_channel_shuffle", "nll_loss", "nll_loss2d",
    "nll_loss_nd", "one_hot", "pad", "pairwise_distance", "pdist", "pixel_shuffle", "pixel_unshuffle",
    "poisson_nll_loss", "prelu", "relu", "relu6", "relu_", "rrelu", "rrelu_", "scaled_dot_product_attention",
    "selu", "selu_", "silu", "smooth_l1_loss", "soft_margin_loss", "softmax", "softplus", "softshrink",
    "threshold", "threshold_", "triplet_margin_loss", "upsample_bicubic2d", "upsample_bilinear2d",
    "upsample_linear1d", "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "upsample_trilinear3d",
};

// aten operators that are torch.Tensor methods but not torch functions.
constexpr std::string_view tensor_ops[] = {
    "coalesce", "contiguous", "expand", "expand_as", "item", "new_empty", "new_empty_strided", "new_full",
    "new_ones", "new_zeros", "pin_memory", "repeat", "reshape_as", "resize", "resize_as", "sum_to_size", "to",
    "to_dense", "to_mkldnn", "to_padded_tensor", "to_sparse", "type_as", "unfold", "values", "view",
    "view_as", "sparse_mask",
};

// c10d operators → torch.distributed names.
constexpr std::array<std::pair<std::string_view, std::string_view>, 14> distributed_ops = {{
    {"_allgather_base_", "_all_gather_base"},
    {"_reduce_scatter_base_", "_reduce_scatter_base"},
    {"allgather_", "all_gather"},
    {"allgather_coalesced_", "all_gather_coalesced"},
    {"allreduce_", "all_reduce"},
    {"allreduce_coalesced_", "all_reduce_coalesced"},
    {"alltoall_", "all_to_all"},
    {"alltoall_base_", "all_to_all_single"},
    {"barrier", "barrier"},
    {"broadcast_", "broadcast"},
    {"gather_", "gather"},
    {"recv_", "recv"},
    {"reduce_scatter_", "reduce_scatter"},
    {"scatter_", "scatter"},
}};

template <size_t N>
bool contains(const std::string_view (&table)[N], std::string_view name) {
  return std::find(std::begin(table), std::end(table), name) != std::end(table);
}

}  // namespace

op_name op_name_of(std::string_view qualified, bool nested) {
  std::string_view ns, name = qualified;
  if (const auto colons = qualified.find("::"); colons != std::string_view::npos) {
    ns = qualified.substr(0, colons);
    name = qualified.substr(colons + 2);
  }
  if (const auto dot = name.find('.'); dot != std::string_view::npos) name = name.substr(0, dot);
  if (ns == "c10d") {
    for (const auto &[op, api] : distributed_ops)
      if (op == name) return {"Distributed", std::string(api)};
    std::string api(name);
    if (api.size() > 1 && api.back() == '_') api.pop_back();
    return {"Distributed", api};
  }
  if (!ns.empty() && ns != "aten") return {"Aten", std::string(ns) + "_" + std::string(name)};
  if (nested) return {"Aten", std::string(name)};
  if (contains(functional_ops, name)) return {"Functional", std::string(name)};
  if (contains(tensor_ops, name)) return {"Tensor", std::string(name)};
  if (!name.empty() && name.front() == '_') return {"Aten", std::string(name)};
  if (!name.empty() && name.back() == '_') return {"Tensor", std::string(name)};
  return {"Torch", std::string(name)};
}

}  // namespace tprobe::torch_capture
