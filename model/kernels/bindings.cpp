// The Python module of model/kernels: one binding per entry point of cpu_linear.cpp,
// cpu_linear_int4.cpp, cpu_attention.cpp, cpu_layer_ops.cpp and cpu_moe.cpp (kept apart so each source file holds one kind of kernel).

#include <torch/extension.h>

#include <optional>
#include <vector>

#include "cpu_vec.h"

namespace lfm_kernels {
int64_t linear_panel();
torch::Tensor linear_bf16(const torch::Tensor& x, const torch::Tensor& w, int64_t N,
                          const std::optional<torch::Tensor>& out);
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
torch::Tensor moe_combine(const torch::Tensor& outputs, const torch::Tensor& positions, const torch::Tensor& weights);
}  // namespace lfm_kernels

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.attr("ISA") = LFM_ISA_NAME;              // the instruction set this build was compiled for
  m.attr("PANEL") = lfm_kernels::linear_panel();  // outputs per panel of the packed linear weights
  // each linear returns bf16 [M, N], or fills `out` (fp32 [M, N], the same bf16-rounded values) and returns it
  m.def("linear_bf16", &lfm_kernels::linear_bf16, "x @ W.T: bf16 x [M, K], bf16 W packed in pair panels, N outputs",
        py::arg("x"), py::arg("w"), py::arg("N"), py::arg("out") = py::none());
  m.def("linear_int8", &lfm_kernels::linear_int8, "x @ (W * scales).T: bf16 x, int8 W packed in pair panels",
        py::arg("x"), py::arg("w"), py::arg("scales"), py::arg("N"), py::arg("out") = py::none());
  m.def("linear_w8a8", &lfm_kernels::linear_w8a8, "per-row int8 x times int8 W in quad panels, exact int32 sums",
        py::arg("x"), py::arg("w"), py::arg("row_sums"), py::arg("scales"), py::arg("N"), py::arg("out") = py::none());
  m.def("linear_int4", &lfm_kernels::linear_int4, "x quantized per row and 32 k to int8, times int4 W in int4 panels",
        py::arg("x"), py::arg("q"), py::arg("codes"), py::arg("steps"), py::arg("N"), py::arg("out") = py::none());
  m.def("decode_attention", &lfm_kernels::decode_attention, "one query per sequence over the paged KV pool",
        py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("block_tables"), py::arg("context_lens"),
        py::arg("block_size"), py::arg("scale"), py::arg("context_starts") = py::none());
  m.def("add_rms_norm", &lfm_kernels::add_rms_norm, "hidden += delta (in place, if given), then RMSNorm");
  m.def("swiglu", &lfm_kernels::swiglu, "silu(gate) * up from w13's [gate | up] output");
  m.def("short_conv", &lfm_kernels::short_conv, "LFM2's gated short conv between in_proj and out_proj");
  m.def("attention_prep", &lfm_kernels::attention_prep, "q/k norms and RoPE; k and v written to the KV pool");
  m.def("moe_route", &lfm_kernels::moe_route, "each token's experts and weights, and the pairs grouped by expert",
        py::arg("logits"), py::arg("bias"), py::arg("k"), py::arg("normalize"), py::arg("scale"));
  m.def("moe_combine", &lfm_kernels::moe_combine, "each token's weighted sum of its experts' outputs");
}
