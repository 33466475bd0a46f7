// The Python module of model/native/kernels: one binding per entry point of cpu_linear.cpp,
// cpu_linear_bf12.cpp, cpu_linear_int4.cpp, cpu_attention.cpp, cpu_layer_ops.cpp, cpu_moe.cpp and
// cpu_sampling.cpp (kept apart so each source file holds one kind of kernel, declared in cpu_ops.h), and
// cpu_decode_stack.cpp's classes.

#include <torch/extension.h>

#include "cpu_decode_stack.h"
#include "cpu_ops.h"
#include "cpu_vec.h"


PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.attr("ISA") = LFM_ISA_NAME;              // the instruction set this build was compiled for
  m.attr("PANEL") = lfm_kernels::linear_panel();  // outputs per panel of the packed linear weights
  // 12-bit weights: the value each stored byte and nibble of a decode step's group holds (its decode order)
  m.attr("BF12_BYTE_ORDER") = std::vector<int>(lfm_kernels::vec::BF12_BYTE_ORDER.begin(), lfm_kernels::vec::BF12_BYTE_ORDER.end());
  m.attr("BF12_NIBBLE_ORDER") =
      std::vector<int>(lfm_kernels::vec::BF12_NIBBLE_ORDER.begin(), lfm_kernels::vec::BF12_NIBBLE_ORDER.end());
  // Every kernel runs without the GIL, as torch's own operators do: a prompt step's linears take up
  // to hundreds of ms, through which the server's threads (reading requests, tokenizing them,
  // streaming replies) and the app's UI thread would otherwise wait. Arguments and results convert
  // with it held.
  const auto released = py::call_guard<py::gil_scoped_release>();
  // each linear returns x's dtype [M, N], or fills `out` (fp32 [M, N], the values that dtype holds) and returns it
  m.def("linear_bf16", &lfm_kernels::linear_bf16, "x @ W.T: bf16 x [M, K], bf16 W packed in pair panels, N outputs",
        py::arg("x"), py::arg("w"), py::arg("N"), py::arg("out") = py::none(), released);
  m.def("linear_bf12", &lfm_kernels::linear_bf12, "x @ W.T: bf16 x, bf16 W stored in 12 bits (model/quant/bf12.py)",
        py::arg("x"), py::arg("bytes"), py::arg("nibbles"), py::arg("tables"), py::arg("starts"),
        py::arg("positions"), py::arg("values"), py::arg("N"), py::arg("out") = py::none(), released);
  m.def("linear_f32", &lfm_kernels::linear_f32, "x @ W.T: fp32 x [M, K], fp32 or bf16 W packed in G = 1 panels",
        py::arg("x"), py::arg("w"), py::arg("N"), py::arg("out") = py::none(), released);
  m.def("linear_int8", &lfm_kernels::linear_int8, "x @ (W * scales).T: bf16 x, int8 W packed in pair panels",
        py::arg("x"), py::arg("w"), py::arg("scales"), py::arg("N"), py::arg("out") = py::none(), released);
  m.def("linear_w8a8", &lfm_kernels::linear_w8a8, "per-row int8 x times int8 W in quad panels, exact int32 sums",
        py::arg("x"), py::arg("w"), py::arg("row_sums"), py::arg("scales"), py::arg("N"), py::arg("out") = py::none(),
        released);
  m.def("linear_int4", &lfm_kernels::linear_int4, "x quantized per row and 32 k to int8, times int4 W in int4 panels",
        py::arg("x"), py::arg("q"), py::arg("codes"), py::arg("steps"), py::arg("N"), py::arg("out") = py::none(),
        released);
  m.def("decode_attention", &lfm_kernels::decode_attention, "one query per sequence over the paged KV pool",
        py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("block_tables"), py::arg("context_lens"),
        py::arg("block_size"), py::arg("scale"), py::arg("context_starts") = py::none(), released);
  m.def("add_rms_norm", &lfm_kernels::add_rms_norm, "hidden += delta (in place, if given), then RMSNorm", released);
  m.def("swiglu", &lfm_kernels::swiglu, "silu(gate) * up from w13's [gate | up] output", released);
  m.def("short_conv", &lfm_kernels::short_conv, "LFM2's gated short conv between in_proj and out_proj", released);
  m.def("attention_prep", &lfm_kernels::attention_prep, "q/k norms and RoPE; k and v written to the KV pool", released);
  m.def("moe_route", &lfm_kernels::moe_route, "each token's experts and weights, and the pairs grouped by expert",
        py::arg("logits"), py::arg("bias"), py::arg("k"), py::arg("normalize"), py::arg("scale"), released);
  m.def("moe_combine", &lfm_kernels::moe_combine, "each token's weighted sum of its experts' outputs", released);
  m.def("argmax_rows", &lfm_kernels::argmax_rows, "torch.argmax(logits, -1) of float32 [B, V] logits",
        py::arg("logits"), released);
  m.def("sample_rows", &lfm_kernels::sample_rows,
        "one token per row: penalties, temperature, top-k, top-p, min-p, then a draw at each row's uniform",
        py::arg("logits"), py::arg("params"), py::arg("history"), py::arg("spans"), released);
  m.def("process_rows", &lfm_kernels::process_rows,
        "each row's logits as sample_rows draws from them (greedy rows: after the penalties only)",
        py::arg("logits"), py::arg("params"), py::arg("history"), py::arg("spans"), released);

  // a decode step's whole decoder stack in one call (model/native/stack.py builds it); module_local:
  // each instruction set's build is its own module, and tests load several into one process
  using lfm_kernels::DecodeLayer;
  using lfm_kernels::DecodeStack;
  using lfm_kernels::LinearRef;
  py::class_<LinearRef>(m, "LinearRef", py::module_local(), "a native linear's packed operands and the kernel that reads them")
      .def(py::init<const std::string&, int64_t, std::vector<torch::Tensor>>(), py::arg("kind"),
           py::arg("out_features"), py::arg("operands"))
      .def("__call__", &LinearRef::operator(), py::arg("x"), released);
  py::class_<DecodeLayer>(m, "DecodeLayer", py::module_local(), "one decoder layer of a DecodeStack");
  m.def("conv_layer", &lfm_kernels::conv_layer, "a short-conv decoder layer", py::arg("operator_norm"),
        py::arg("ffn_norm"), py::arg("eps"), py::arg("in_proj"), py::arg("taps"), py::arg("bias"),
        py::arg("out_proj"), py::arg("w13"), py::arg("w2"));
  m.def("attention_layer", &lfm_kernels::attention_layer, "an attention decoder layer", py::arg("operator_norm"),
        py::arg("ffn_norm"), py::arg("eps"), py::arg("qkv_proj"), py::arg("q_norm"), py::arg("k_norm"),
        py::arg("qk_eps"), py::arg("heads"), py::arg("scale"), py::arg("out_proj"), py::arg("w13"), py::arg("w2"));
  py::class_<DecodeStack>(m, "DecodeStack", py::module_local(), "every decoder layer of a decode step, run in one call")
      .def(py::init<std::vector<DecodeLayer>>(), py::arg("layers"))
      .def(
          "run",
          [](const DecodeStack& stack, torch::Tensor hidden, std::vector<torch::Tensor> conv_states,
             std::vector<torch::Tensor> k_caches, std::vector<torch::Tensor> v_caches, torch::Tensor conv_src_rows,
             torch::Tensor conv_window, torch::Tensor conv_write_index, torch::Tensor conv_write_rows,
             torch::Tensor cos, torch::Tensor sin, torch::Tensor positions, torch::Tensor kv_write_slots,
             torch::Tensor kv_blocks, torch::Tensor context_lens, std::optional<torch::Tensor> context_starts,
             int64_t block_size) {
            const lfm_kernels::DecodeStepInputs step{
                std::move(conv_states), std::move(k_caches), std::move(v_caches), std::move(conv_src_rows),
                std::move(conv_window), std::move(conv_write_index), std::move(conv_write_rows), std::move(cos),
                std::move(sin), std::move(positions), std::move(kv_write_slots), std::move(kv_blocks),
                std::move(context_lens), std::move(context_starts), block_size};
            // a step is one call of up to tens of ms: let the app's UI thread run meanwhile, as it
            // could between the Python layers' calls (nothing below touches a Python object)
            py::gil_scoped_release release;
            return stack.run(std::move(hidden), step);
          },
          "hidden [T, hidden] through every layer (in place); returns the last feed-forward's output");
}
