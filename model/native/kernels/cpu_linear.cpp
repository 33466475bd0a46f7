// Linear layers on the CPU: out[M, N] = x[M, K] @ W.T, W pre-packed in panels.
//
// Why: at decode batch sizes a step reads every weight once, so speed is memory bandwidth,
// and PyTorch's bf16 and int8 CPU kernels reach about half of it at one row. These loops
// stream each weight once per step and keep up at prefill sizes too. They are written once
// over cpu_vec.h's vector layer and compiled per instruction set (LANES = 16 on AVX-512, 8 on
// AVX2).
//
// Packed layout (model/native/linears.py packs at load): W [N, K] becomes panels of PANEL = 4 * LANES
// outputs, each panel K/G groups of G consecutive k for all its outputs:
//
//     panel[n / PANEL][k / G][n % PANEL][k % G]     G = 2 for bf16 and int8 weights (pairs),
//                                                   G = 4 for int8 x int8 (quads)
//
// One group of a panel is 4 vectors of LANES outputs; an activation row's G values are
// broadcast and multiplied into LANES fp32/int32 lanes, one lane per output. No horizontal
// sums, and every output's sum runs over k in the same order whatever M is: a row's result
// never depends on what else is in the batch.
//
//   linear_bf16   bf16 x, bf16 W                    fp32 accumulation
//   linear_int8   bf16 x, int8 W * per-row scale    W widened in registers
//   linear_w8a8   x quantized per row to int8 (model/quant/int8.py's rounding), int8 W,
//                 exact int32 sums: bit for bit what quantize_rows + torch._int_mm give
//   linear_f32    fp32 x, fp32 W or bf16 W (G = 1)   fp32 products and sums: a float32 model's
//                 linear. A checkpoint's bf16 weights widen to fp32 exactly, so the loader keeps
//                 them as bf16 (half the bytes to stream) and the products are those of fp32 W.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "cpu_panels.h"

namespace lfm_kernels {
namespace {

using namespace vec;

// ---------------------------------------------------------------- weight groups as bf16 pairs

// One k-pair of an int8 panel, widened (times INT8_PAIR_SCALE, exact).
struct Int8Panel {
  const int8_t* w;
  inline Pairs load(int64_t pair, int j) const { return int8_pairs(w + (pair * PANEL + j * LANES) * 2); }
};

// One k of a float32 model's panel: 4 vectors of LANES outputs, fp32 or bf16 (widened, exact).
template <typename Weight>
struct WidePanel {
  const Weight* w;
  inline vf load(int64_t k, int j) const { return load_values(w + k * PANEL + j * LANES); }
};

// k per block of a float32 product: each block's sums start from zero and are added to the
// total once, so rounding grows with KBLOCK + K / KBLOCK rather than K (as oneDNN's blocked sums).
constexpr int64_t KBLOCK = 64;

// R activation rows (fp32, row stride K) against one G = 1 panel; store(r, j, LANES fp32 sums).
template <int R, typename Panel, typename Store>
inline void tile_floats(const float* x, int64_t K, const Panel& panel, Store&& store) {
  vf total[R][VECS];
  UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < VECS; ++j) total[r][j] = zero();
  for (int64_t k0 = 0; k0 < K; k0 += KBLOCK) {
    vf acc[R][VECS];
    UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < VECS; ++j) acc[r][j] = zero();
    const int64_t k1 = std::min(K, k0 + KBLOCK);
    for (int64_t k = k0; k < k1; ++k) {
      vf xb[R];
      UNROLL for (int r = 0; r < R; ++r) xb[r] = set1(x[r * K + k]);
      UNROLL for (int j = 0; j < VECS; ++j) {
        const vf w = panel.load(k, j);
        UNROLL for (int r = 0; r < R; ++r) acc[r][j] = fmadd(xb[r], w, acc[r][j]);
      }
    }
    UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < VECS; ++j) total[r][j] = add(total[r][j], acc[r][j]);
  }
  UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < VECS; ++j) store(r, j, total[r][j]);
}

// R activation rows (int8 + QUAD_OFFSET, row stride K) against quads [q0, q1) of one int8 quad panel,
// added into exact int32 sums; ahead.step() once a quad.
template <int R>
inline void tile_quads(const uint8_t* x, int64_t K, const int8_t* panel, int64_t q0, int64_t q1,
                       vi (&acc)[R][VECS], Ahead ahead) {
  for (int64_t q = q0; q < q1; ++q) {
    ahead.step();
    const int8_t* g = panel + q * PANEL * 4;
    Quads xb[R];
    UNROLL for (int r = 0; r < R; ++r) xb[r] = broadcast_quad(x + r * K + 4 * q);
    UNROLL for (int j = 0; j < VECS; ++j) {
      const Quads w = load_quads(g + j * LANES * 4);
      UNROLL for (int r = 0; r < R; ++r) acc[r][j] = dot_quads(acc[r][j], xb[r], w);
    }
  }
}

void check_panels(const at::Tensor& w, at::ScalarType dtype, int64_t N, int64_t K, int64_t group) {
  TORCH_CHECK(w.is_contiguous() && w.scalar_type() == dtype, "packed weight has the wrong dtype or layout");
  TORCH_CHECK(K % 4 == 0, "K must be a multiple of 4");
  TORCH_CHECK(w.numel() == (N + PANEL - 1) / PANEL * PANEL * K && w.size(-1) == group,
              "packed weight does not match N=", N, ", K=", K);
}

// Per-row symmetric int8, as model/quant/int8.py's quantize_rows: scale = max(amax|x|, 1e-12) / 127,
// q = round-half-even(x / scale), stored as q + QUAD_OFFSET (u8 where the dot product multiplies
// unsigned by signed).
void quantize_rows(const bf16* x, int64_t M, int64_t K, uint8_t* q, float* scales) {
  at::parallel_for(0, M, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const bf16* row = x + r * K;
      float amax = 0.f;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(static_cast<float>(row[k])));
      const float scale = std::max(amax, 1e-12f) / 127.0f;
      scales[r] = scale;
      for (int64_t k = 0; k < K; ++k) {
        const int32_t rounded = static_cast<int32_t>(std::nearbyint(static_cast<float>(row[k]) / scale));
        q[r * K + k] = static_cast<uint8_t>(rounded + QUAD_OFFSET);
      }
    }
  });
}

}  // namespace

// ---------------------------------------------------------------- entry points

int64_t linear_panel() { return PANEL; }

at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w, int64_t N,
                       const std::optional<at::Tensor>& out) {
  const int64_t M = x.size(0), K = x.size(1);
  check_x(x, K);
  check_panels(w, at::kBFloat16, N, K, 2);
  const Output result(x, N, out);
  const bf16* xp = x.data_ptr<bf16>();
  const bf16* wp = w.data_ptr<bf16>();
  for_each_pair_tile(
      xp, M, K, (N + PANEL - 1) / PANEL, PANEL * 2 * sizeof(bf16), {{{wp, PANEL * 2 * sizeof(bf16)}}},
      [&](auto R, int64_t m0, int64_t p, const auto* rows, int64_t s0, int64_t s1, auto& acc, Ahead ahead) {
        tile_pairs<R.value>(rows, K, Bf16Panel{wp + p * PANEL * K}, s0, s1, acc, ahead);
      },
      [&](auto R, int64_t m0, int64_t p, auto& acc) { result.store_tile<R.value>(m0, p, acc); });
  return result.tensor();
}

template <typename Weight>
void linear_wide(const at::Tensor& x, const at::Tensor& w, int64_t N, const Output& result) {
  const int64_t M = x.size(0), K = x.size(1);
  const float* xp = x.data_ptr<float>();
  const Weight* wp = w.data_ptr<Weight>();
  for_each_tile(M, (N + PANEL - 1) / PANEL, [&](auto R, int64_t m0, int64_t p) {
    tile_floats<R.value>(xp + m0 * K, K, WidePanel<Weight>{wp + p * PANEL * K}, [&](int r, int j, vf sums) {
      result.store(m0 + r, p * PANEL + LANES * j, sums);
    });
  });
}

at::Tensor linear_f32(const at::Tensor& x, const at::Tensor& w, int64_t N, const std::optional<at::Tensor>& out) {
  const int64_t K = x.size(1);
  check_x(x, K, at::kFloat);
  const bool narrow = w.scalar_type() == at::kBFloat16;
  check_panels(w, narrow ? at::kBFloat16 : at::kFloat, N, K, 1);
  const Output result(x, N, out);
  if (narrow)
    linear_wide<bf16>(x, w, N, result);
  else
    linear_wide<float>(x, w, N, result);
  return result.tensor();
}

at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scales, int64_t N,
                       const std::optional<at::Tensor>& out) {
  const int64_t M = x.size(0), K = x.size(1);
  check_x(x, K);
  check_panels(w, at::kChar, N, K, 2);
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == (N + PANEL - 1) / PANEL * PANEL,
              "scales: fp32, padded to whole panels");
  const Output result(x, N, out);
  const bf16* xp = x.data_ptr<bf16>();
  const int8_t* wp = w.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  const vf unscale = set1(1.0f / INT8_PAIR_SCALE);  // a power of two: exact
  for_each_pair_tile(
      xp, M, K, (N + PANEL - 1) / PANEL, PANEL * 2, {{{wp, PANEL * 2}}},
      [&](auto R, int64_t m0, int64_t p, const auto* rows, int64_t s0, int64_t s1, auto& acc, Ahead ahead) {
        tile_pairs<R.value>(rows, K, Int8Panel{wp + p * PANEL * K}, s0, s1, acc, ahead);
      },
      [&](auto R, int64_t m0, int64_t p, auto& acc) {
        UNROLL for (int r = 0; r < R.value; ++r) UNROLL for (int j = 0; j < VECS; ++j) {
          const int64_t n0 = p * PANEL + LANES * j;
          result.store(m0 + r, n0, mul(acc[r][j], mul(load(sp + n0), unscale)));
        }
      });
  return result.tensor();
}

at::Tensor linear_w8a8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& row_sums,
                       const at::Tensor& scales, int64_t N, const std::optional<at::Tensor>& out) {
  const int64_t M = x.size(0), K = x.size(1);
  check_x(x, K);
  check_panels(w, at::kChar, N, K, 4);
  const int64_t padded = (N + PANEL - 1) / PANEL * PANEL;
  TORCH_CHECK(row_sums.scalar_type() == at::kInt && row_sums.numel() == padded, "row_sums: int32, padded");
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == padded, "scales: fp32, padded");
  const Output result(x, N, out);
  std::vector<uint8_t> xq(M * K);
  std::vector<float> xs(M);
  quantize_rows(x.data_ptr<bf16>(), M, K, xq.data(), xs.data());
  const int8_t* wp = w.data_ptr<int8_t>();
  const int32_t* sums = row_sums.data_ptr<int32_t>();
  const float* sp = scales.data_ptr<float>();
  const uint8_t* xp = xq.data();
  for_each_chunked_tile<vi>(
      M, padded / PANEL, K / 4, PANEL * 4, {{{wp, PANEL * 4}}},
      [&](auto R, int64_t m0, int64_t p, int64_t q0, int64_t q1, auto& acc, Ahead ahead) {
        tile_quads<R.value>(xp + m0 * K, K, wp + p * PANEL * K, q0, q1, acc, ahead);
      },
      [&](auto R, int64_t m0, int64_t p, auto& acc) {
        UNROLL for (int r = 0; r < R.value; ++r) UNROLL for (int j = 0; j < VECS; ++j) {
          const int64_t n0 = p * PANEL + LANES * j;
          vi sum = acc[r][j];
          if constexpr (QUAD_OFFSET != 0)  // undo the offset on x: sum((q + 128) * w) - 128 * sum(w), exact
            sum = sub_i32(sum, mul_i32(set1_i32(QUAD_OFFSET), load_i32(sums + n0)));
          result.store(m0 + r, n0, mul(to_float(sum), mul(set1(xs[m0 + r]), load(sp + n0))));
        }
      });
  return result.tensor();
}

}  // namespace lfm_kernels
