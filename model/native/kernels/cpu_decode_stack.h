// A whole decoder stack for steps where every token is a single-query row (decode steps),
// run as one call: the same kernels in the same order as the Python layers
// (model/native/layers.py), without ~8 Python module calls per layer between them.
//
// Why: at one decode stream a 350M step reads its weights in ~6 ms, and the Python between the
// kernels cost another ~1.5 ms with caches cold from the weights streaming past
// (docs/ARCHITECTURE.md has the profile). model/native/stack.py builds it from a model.

#pragma once

#include <torch/extension.h>

#include <optional>
#include <string>
#include <vector>

namespace lfm_kernels {

// One native linear layer's packed operands and which kernel multiplies by them.
class LinearRef {
 public:
  LinearRef(const std::string& kind, int64_t out_features, std::vector<torch::Tensor> operands);
  torch::Tensor operator()(const torch::Tensor& x) const;

 private:
  enum class Kind { kBf16, kBf12, kF32, kInt8, kW8A8, kInt4 };
  Kind kind_;
  int64_t N_;
  std::vector<torch::Tensor> t_;
};

// One decoder layer: operator_norm -> (short conv | attention) -> ffn_norm -> SwiGLU.
struct DecodeLayer {
  bool attention;
  torch::Tensor operator_norm, ffn_norm;
  double eps;
  LinearRef mix_in, mix_out, w13, w2;  // in_proj or qkv_proj; out_proj; the feed-forward
  // short conv
  torch::Tensor taps;
  std::optional<torch::Tensor> conv_bias;
  // attention
  torch::Tensor q_norm, k_norm;
  double qk_eps = 0.0;
  int64_t heads = 0;
  double scale = 0.0;
};

DecodeLayer conv_layer(torch::Tensor operator_norm, torch::Tensor ffn_norm, double eps, LinearRef in_proj,
                       torch::Tensor taps, std::optional<torch::Tensor> bias, LinearRef out_proj, LinearRef w13,
                       LinearRef w2);
DecodeLayer attention_layer(torch::Tensor operator_norm, torch::Tensor ffn_norm, double eps, LinearRef qkv_proj,
                            torch::Tensor q_norm, torch::Tensor k_norm, double qk_eps, int64_t heads, double scale,
                            LinearRef out_proj, LinearRef w13, LinearRef w2);

// What one step gives every layer: model/batch.py's ForwardBatch fields, the rope rows, the caches.
struct DecodeStepInputs {
  std::vector<torch::Tensor> conv_states, k_caches, v_caches;  // in layer order, one per layer of the kind
  torch::Tensor conv_src_rows, conv_window, conv_write_index, conv_write_rows;
  torch::Tensor cos, sin, positions, kv_write_slots;
  torch::Tensor kv_blocks, context_lens;
  std::optional<torch::Tensor> context_starts;
  int64_t block_size;
};

class DecodeStack {
 public:
  explicit DecodeStack(std::vector<DecodeLayer> layers);
  // Runs every layer over `hidden` [T, hidden] (updated in place, as the Python layers do);
  // returns the last feed-forward's output, which the caller's final norm adds in.
  torch::Tensor run(torch::Tensor hidden, const DecodeStepInputs& step) const;

 private:
  std::vector<DecodeLayer> layers_;
  size_t attention_layers_ = 0;
};

}  // namespace lfm_kernels
