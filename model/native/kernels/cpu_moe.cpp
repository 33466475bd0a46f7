// LFM2-MoE's routing around the expert linears (model/arch/lfm2_moe.py's Router), over cpu_vec.h's vector layer.
//
// moe_route: from the router's fp32 logits, each token's chosen experts and their weights, and the
// order that groups the step's (token, expert) pairs by expert, so each expert's linears run once
// over all its tokens. moe_combine: each token's weighted sum of its experts' outputs.
//
// Why native: a decode step runs both in every MoE layer (22 in LFM2-8B-A1B) beside four experts'
// linears; as ATen ops they were ~25 small calls a layer. And bit for bit: a row's routing and its
// sum never depend on the other rows (PyTorch's sigmoid computes a batch's last, partial vector
// with another exp than the rest, so a token's scores could depend on how many rows came before
// it). Scores use std::exp per element, the same code on every instruction set.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "cpu_vec.h"

namespace lfm_kernels {
namespace {

using namespace vec;

constexpr int64_t ROWS_PER_TASK = 32;  // fewer rows run inline: a parallel region costs more than them
constexpr int64_t MAX_EXPERTS = 4096;

// One token: the k experts of highest score + bias (best first, ties to the lower index), each
// weighted by its score, normalised to sum to 1 (+ 1e-6) if asked, times scale: the Router's math.
void route_row(const float* logits, const float* bias, int64_t E, int64_t k, bool normalize, float scale,
               float* weights, int64_t* experts) {
  float score[MAX_EXPERTS], rank[MAX_EXPERTS];
  for (int64_t e = 0; e < E; ++e) {
    score[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    rank[e] = bias != nullptr ? score[e] + bias[e] : score[e];
  }
  float sum = 0.0f;
  for (int64_t r = 0; r < k; ++r) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t q = 0; q < r; ++q) taken = taken || experts[q] == e;
      if (!taken && (best < 0 || rank[e] > rank[best])) best = e;
    }
    experts[r] = best;
    weights[r] = score[best];
    sum += score[best];
  }
  const float denominator = sum + 1e-6f;
  for (int64_t r = 0; r < k; ++r) weights[r] = (normalize ? weights[r] / denominator : weights[r]) * scale;
}

}  // namespace

// logits fp32 [T, E], bias fp32 [E] or None -> {weights fp32 [T, k], positions int64 [T, k],
// tokens int64 [T * k], counts int64 [E]}. The pairs (t, r) are grouped by expert, in token
// order within each expert: pair (t, r) sits at positions[t, r] of that order, which holds
// token tokens[positions[t, r]] = t; expert e's pairs are the counts[e] after those of experts < e.
std::vector<at::Tensor> moe_route(const at::Tensor& logits, const std::optional<at::Tensor>& bias, int64_t k,
                                  bool normalize, double scale) {
  TORCH_CHECK(logits.dim() == 2 && logits.is_contiguous() && logits.scalar_type() == at::kFloat,
              "logits: contiguous fp32 [T, experts]");
  const int64_t T = logits.size(0), E = logits.size(1);
  TORCH_CHECK(E >= 1 && E <= MAX_EXPERTS && k >= 1 && k <= E, "need 1 <= k <= experts <= 4096");
  if (bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->is_contiguous() && bias->scalar_type() == at::kFloat &&
                    bias->size(0) == E,
                "bias: contiguous fp32 [experts]");
  }
  const auto longs = logits.options().dtype(at::kLong);
  auto weights = at::empty({T, k}, logits.options());
  auto positions = at::empty({T, k}, longs);
  auto tokens = at::empty({T * k}, longs);
  auto counts = at::zeros({E}, longs);
  const float* l = logits.data_ptr<float>();
  const float* b = bias ? bias->data_ptr<float>() : nullptr;
  float* w = weights.data_ptr<float>();
  int64_t* pos = positions.data_ptr<int64_t>();
  std::vector<int64_t> experts(T * k);
  at::parallel_for(0, T, ROWS_PER_TASK, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      route_row(l + t * E, b, E, k, normalize, static_cast<float>(scale), w + t * k, experts.data() + t * k);
  });
  int64_t* count = counts.data_ptr<int64_t>();
  for (int64_t e : experts) ++count[e];
  std::vector<int64_t> next(E, 0);  // each expert's next free position
  for (int64_t e = 1; e < E; ++e) next[e] = next[e - 1] + count[e - 1];
  int64_t* tok = tokens.data_ptr<int64_t>();
  for (int64_t pair = 0; pair < T * k; ++pair) {
    pos[pair] = next[experts[pair]]++;
    tok[pos[pair]] = pair / k;
  }
  return {weights, positions, tokens, counts};
}

// outputs bf16 [P, h] (the experts' outputs in grouped order), positions int64 [T, k], weights
// fp32 [T, k] -> bf16 [T, h]: sum over r of weights[t, r] * outputs[positions[t, r]], in fp32,
// rank by rank, rounded once: the Router's combine, bit for bit.
at::Tensor moe_combine(const at::Tensor& outputs, const at::Tensor& positions, const at::Tensor& weights) {
  TORCH_CHECK(outputs.dim() == 2 && outputs.is_contiguous() && outputs.scalar_type() == at::kBFloat16,
              "outputs: contiguous bf16 [pairs, h]");
  TORCH_CHECK(positions.dim() == 2 && positions.is_contiguous() && positions.scalar_type() == at::kLong,
              "positions: contiguous int64 [T, k]");
  TORCH_CHECK(weights.sizes() == positions.sizes() && weights.is_contiguous() &&
                  weights.scalar_type() == at::kFloat,
              "weights: contiguous fp32 [T, k]");
  const int64_t T = positions.size(0), k = positions.size(1), h = outputs.size(1), P = outputs.size(0);
  const int64_t* pos = positions.data_ptr<int64_t>();
  for (int64_t i = 0; i < T * k; ++i) TORCH_CHECK(pos[i] >= 0 && pos[i] < P, "a position lies outside outputs");
  auto out = at::empty({T, h}, outputs.options());
  const bf16* in = outputs.data_ptr<bf16>();
  const float* w = weights.data_ptr<float>();
  bf16* o = out.data_ptr<bf16>();
  at::parallel_for(0, T, ROWS_PER_TASK, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t i = 0; i < h; i += LANES) {
        vf acc = mul(load_bf16(in + pos[t * k] * h + i, h - i), set1(w[t * k]));
        for (int64_t r = 1; r < k; ++r)
          acc = add(acc, mul(load_bf16(in + pos[t * k + r] * h + i, h - i), set1(w[t * k + r])));
        store_bf16(o + t * h + i, acc, h - i);
      }
  });
  return out;
}

}  // namespace lfm_kernels
