// The kernels' entry points, declared once: bindings.cpp binds them to Python and
// cpu_decode_stack.cpp chains them into whole decode steps.

#pragma once

#include <torch/extension.h>

#include <optional>
#include <vector>

namespace lfm_kernels {
int64_t linear_panel();
torch::Tensor linear_bf16(const torch::Tensor& x, const torch::Tensor& w, int64_t N,
                          const std::optional<torch::Tensor>& out);
torch::Tensor linear_f32(const torch::Tensor& x, const torch::Tensor& w, int64_t N,
                         const std::optional<torch::Tensor>& out);
torch::Tensor linear_bf12(const torch::Tensor& x, const torch::Tensor& bytes, const torch::Tensor& nibbles,
                          const torch::Tensor& tables, const torch::Tensor& starts, const torch::Tensor& positions,
                          const torch::Tensor& values, int64_t N, const std::optional<torch::Tensor>& out);
torch::Tensor linear_int8(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& scales, int64_t N,
                          const std::optional<torch::Tensor>& out);
torch::Tensor linear_w8a8(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& row_sums,
                          const torch::Tensor& scales, int64_t N, const std::optional<torch::Tensor>& out);
torch::Tensor linear_int4(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& codes,
                          const torch::Tensor& steps, int64_t N, const std::optional<torch::Tensor>& out);
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                               const torch::Tensor& block_tables, const torch::Tensor& context_lens,
                               int64_t block_size, double scale,
                               const std::optional<torch::Tensor>& context_starts);
torch::Tensor add_rms_norm(torch::Tensor& hidden, const std::optional<torch::Tensor>& delta,
                           const torch::Tensor& weight, double eps);
torch::Tensor swiglu(const torch::Tensor& gate_up);
torch::Tensor short_conv(const torch::Tensor& bcx, torch::Tensor& state, const torch::Tensor& taps,
                         const std::optional<torch::Tensor>& bias, const torch::Tensor& src_rows,
                         const torch::Tensor& window, const torch::Tensor& write_index,
                         const torch::Tensor& write_rows);
torch::Tensor attention_prep(const torch::Tensor& qkv, const torch::Tensor& q_weight, const torch::Tensor& k_weight,
                             double eps, const torch::Tensor& cos, const torch::Tensor& sin,
                             const torch::Tensor& positions, torch::Tensor& k_cache, torch::Tensor& v_cache,
                             const torch::Tensor& write_slots, int64_t heads);
std::vector<torch::Tensor> moe_route(const torch::Tensor& logits, const std::optional<torch::Tensor>& bias,
                                     int64_t k, bool normalize, double scale);
torch::Tensor argmax_rows(const torch::Tensor& logits);
torch::Tensor sample_rows(const torch::Tensor& logits, const torch::Tensor& params, const torch::Tensor& history,
                          const torch::Tensor& spans);
torch::Tensor process_rows(const torch::Tensor& logits, const torch::Tensor& params, const torch::Tensor& history,
                           const torch::Tensor& spans);
torch::Tensor moe_combine(const torch::Tensor& outputs, const torch::Tensor& positions, const torch::Tensor& weights);
}  // namespace lfm_kernels
