// model/native/kernels/cpu_decode_stack.h's stack: each layer calls the kernels the Python layers of
// model/native/layers.py call, with the same arguments in the same order, so a step's
// logits are the same bits either way (tests/model/test_native_stack.py checks it).

#include "cpu_decode_stack.h"

#include "cpu_ops.h"

namespace lfm_kernels {

LinearRef::LinearRef(const std::string& kind, int64_t out_features, std::vector<torch::Tensor> operands)
    : N_(out_features), t_(std::move(operands)) {
  struct Known {
    const char* name;
    Kind kind;
    size_t operands;
  };
  static constexpr Known known[] = {
      {"bf16", Kind::kBf16, 1}, {"bf12", Kind::kBf12, 6}, {"f32", Kind::kF32, 1}, {"int8", Kind::kInt8, 2}, {"w8a8", Kind::kW8A8, 3}, {"int4", Kind::kInt4, 3}};
  for (const Known& k : known) {
    if (kind != k.name) continue;
    TORCH_CHECK(t_.size() == k.operands, kind, " linear takes ", k.operands, " operands, not ", t_.size());
    kind_ = k.kind;
    return;
  }
  TORCH_CHECK(false, "unknown linear kind ", kind, " (bf16, bf12, f32, int8, w8a8 or int4)");
}

torch::Tensor LinearRef::operator()(const torch::Tensor& input) const {
  const torch::Tensor x = input.contiguous();
  switch (kind_) {
    case Kind::kBf16:
      return linear_bf16(x, t_[0], N_, std::nullopt);
    case Kind::kBf12:
      return linear_bf12(x, t_[0], t_[1], t_[2], t_[3], t_[4], t_[5], N_, std::nullopt);
    case Kind::kF32:
      return linear_f32(x, t_[0], N_, std::nullopt);
    case Kind::kInt8:
      return linear_int8(x, t_[0], t_[1], N_, std::nullopt);
    case Kind::kW8A8:
      return linear_w8a8(x, t_[0], t_[1], t_[2], N_, std::nullopt);
    case Kind::kInt4:
      return linear_int4(x, t_[0], t_[1], t_[2], N_, std::nullopt);
  }
  TORCH_CHECK(false, "unreachable linear kind");
}

DecodeLayer conv_layer(torch::Tensor operator_norm, torch::Tensor ffn_norm, double eps, LinearRef in_proj,
                       torch::Tensor taps, std::optional<torch::Tensor> bias, LinearRef out_proj, LinearRef w13,
                       LinearRef w2) {
  DecodeLayer layer{false, std::move(operator_norm), std::move(ffn_norm), eps, std::move(in_proj),
                    std::move(out_proj), std::move(w13), std::move(w2)};
  layer.taps = std::move(taps);
  layer.conv_bias = std::move(bias);
  return layer;
}

DecodeLayer attention_layer(torch::Tensor operator_norm, torch::Tensor ffn_norm, double eps, LinearRef qkv_proj,
                            torch::Tensor q_norm, torch::Tensor k_norm, double qk_eps, int64_t heads, double scale,
                            LinearRef out_proj, LinearRef w13, LinearRef w2) {
  DecodeLayer layer{true, std::move(operator_norm), std::move(ffn_norm), eps, std::move(qkv_proj),
                    std::move(out_proj), std::move(w13), std::move(w2)};
  layer.q_norm = std::move(q_norm);
  layer.k_norm = std::move(k_norm);
  layer.qk_eps = qk_eps;
  layer.heads = heads;
  layer.scale = scale;
  return layer;
}

DecodeStack::DecodeStack(std::vector<DecodeLayer> layers) : layers_(std::move(layers)) {
  TORCH_CHECK(!layers_.empty(), "an empty decoder stack");
  for (const DecodeLayer& layer : layers_) attention_layers_ += layer.attention;
}

torch::Tensor DecodeStack::run(torch::Tensor hidden, const DecodeStepInputs& step) const {
  TORCH_CHECK(step.k_caches.size() == attention_layers_ && step.v_caches.size() == attention_layers_ &&
                  step.conv_states.size() == layers_.size() - attention_layers_,
              "the stack has ", attention_layers_, " attention and ", layers_.size() - attention_layers_,
              " conv layers; got ", step.k_caches.size(), " k, ", step.v_caches.size(), " v and ",
              step.conv_states.size(), " conv caches");
  size_t convs = 0, attentions = 0;
  std::optional<torch::Tensor> pending;
  for (const DecodeLayer& layer : layers_) {
    const torch::Tensor normed = add_rms_norm(hidden, pending, layer.operator_norm, layer.eps);
    torch::Tensor mixed;
    if (layer.attention) {
      torch::Tensor k_cache = step.k_caches[attentions], v_cache = step.v_caches[attentions];
      ++attentions;
      const torch::Tensor q = attention_prep(layer.mix_in(normed), layer.q_norm, layer.k_norm, layer.qk_eps,
                                             step.cos, step.sin, step.positions, k_cache, v_cache,
                                             step.kv_write_slots, layer.heads);
      const torch::Tensor out = decode_attention(q, k_cache, v_cache, step.kv_blocks, step.context_lens,
                                                 step.block_size, layer.scale, step.context_starts);
      mixed = layer.mix_out(out.view({hidden.size(0), -1}));
    } else {
      torch::Tensor state = step.conv_states[convs++];
      const torch::Tensor gated = short_conv(layer.mix_in(normed), state, layer.taps, layer.conv_bias,
                                             step.conv_src_rows, step.conv_window, step.conv_write_index,
                                             step.conv_write_rows);
      mixed = layer.mix_out(gated);
    }
    pending = layer.w2(swiglu(layer.w13(add_rms_norm(hidden, mixed, layer.ffn_norm, layer.eps))));
  }
  return *pending;
}

}  // namespace lfm_kernels
