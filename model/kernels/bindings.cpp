// The Python module of model/kernels: one binding per entry point of cpu_linear.cpp and
// cpu_attention.cpp (kept apart so each source file holds one kind of kernel).

#include <torch/extension.h>

namespace lfm_kernels {
torch::Tensor linear_bf16(const torch::Tensor& x, const torch::Tensor& w, int64_t N);
torch::Tensor linear_int8(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& scales, int64_t N);
torch::Tensor linear_w8a8(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& row_sums,
                          const torch::Tensor& scales, int64_t N);
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                               const torch::Tensor& block_tables, const torch::Tensor& context_lens,
                               int64_t block_size, double scale);
}  // namespace lfm_kernels

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear_bf16", &lfm_kernels::linear_bf16, "x @ W.T: bf16 x [M, K], bf16 W packed in pair panels, N outputs");
  m.def("linear_int8", &lfm_kernels::linear_int8, "x @ (W * scales).T: bf16 x, int8 W packed in pair panels");
  m.def("linear_w8a8", &lfm_kernels::linear_w8a8, "per-row int8 x times int8 W in quad panels, exact int32 sums");
  m.def("decode_attention", &lfm_kernels::decode_attention, "one query per sequence over the paged KV pool");
}
