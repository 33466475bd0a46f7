// Linear layers with int4 weights (model/quant/int4.py): out[M, N] = x[M, K] @ W.T.
//
// Why: decode at a few rows is bound by the bytes of weights read per step, and 4-bit weights
// are half of int8's. Widening nibbles to fp32 for FMAs would make the loop compute-bound long
// before memory is (docs/ARCHITECTURE.md has the measurements), so activations are quantized
// too, per row and group of 32 k, and multiplied as integers (vpmaddubsw or VNNI's vpdpbusd).
//
// Weights: w[n, k] ~= scale[n, g] * q[n, k] - minimum[n, g], q in [0, 15], g = k / 32, with
// scale = step[n, g / 8] * code[n, g] (u8 code, bf16 step), the minimum likewise.
// Activations: x[r, k] ~= e[r, g] * a[r, k], a in [-127, 127], as quantize_groups does in Python.
// Per row, output and group, the integer sum I = sum_k q * a and S = sum_k a are exact, and
//
//     out[r, n] = sum over g, in order, of  e[r, g] * (scale[n, g] * I - minimum[n, g] * S)
//
// in fp32 lanes with the same operations on every instruction set: a row's result depends on
// that row alone, and is the same bits on AVX2, AVX-VNNI and AVX-512.
//
// Packed layout (model/native/kernels/layout.py's pack_int4_panels), per panel of PANEL outputs and
// per group of 32 k: VECS vectors x 4 loads of 4 * LANES bytes; in load t, lane l's 4 bytes hold
// q of output l for k = 4t..4t+3 in their low nibbles and k = 16+4t..16+4t+3 in their high ones.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "cpu_panels.h"

namespace lfm_kernels {
namespace {

using namespace vec;

constexpr int GROUP = 32;            // k values per scale and minimum
constexpr int BLOCK = 8;             // groups per bf16 step
constexpr int LOADS = GROUP / 8;     // nibble loads per vector and group: two quads each
constexpr int64_t GROUP_BYTES = PANEL * GROUP / 2;
static_assert(2 * LOADS <= U4_DOTS, "a group's dot_u4 calls must fit U4Sums' range");

// Each row's groups of 32 as int8, with their scale e and the sum of the int8 values.
struct Activations {
  std::vector<int8_t> q;
  std::vector<float> scale, sum;
  int64_t stride;  // int8 values per row: groups * GROUP
};

// scale = max(amax |x|, 1e-12) / 127, a = round-half-even(x / scale); k past K counts as 0.
Activations quantize_groups(const bf16* x, int64_t M, int64_t K, int64_t groups) {
  constexpr int V = GROUP / LANES;
  Activations out{std::vector<int8_t>(M * groups * GROUP), std::vector<float>(M * groups),
                  std::vector<float>(M * groups), groups * GROUP};
  at::parallel_for(0, M, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        vf v[V];
        vf amax = zero();
        UNROLL for (int i = 0; i < V; ++i) {
          const int64_t k0 = g * GROUP + i * LANES;
          v[i] = k0 < K ? load_bf16(x + r * K + k0, K - k0) : zero();
          amax = max(amax, abs(v[i]));
        }
        const float scale = std::max(reduce_max(amax), 1e-12f) / 127.0f;
        const vf divisor = set1(scale);
        vf total = zero();
        UNROLL for (int i = 0; i < V; ++i) {
          const vf rounded = round_nearest(div(v[i], divisor));
          store_i8(out.q.data() + r * out.stride + g * GROUP + i * LANES, rounded);
          total = add(total, rounded);
        }
        out.scale[r * groups + g] = scale;
        out.sum[r * groups + g] = reduce_add(total);  // whole numbers below 2^13: exact
      }
    }
  });
  return out;
}

// One panel: its nibbles, its u8 codes [groups][scale, minimum][PANEL] and bf16 steps
// [blocks][scale, minimum][PANEL].
struct Int4Panel {
  const uint8_t* q;
  const uint8_t* codes;
  const bf16* steps;
};

// LANES bf16 steps of group g's block, as fp32: the scales' at `offset` < PANEL, the minimums' past it.
inline vf block_step(const Int4Panel& w, int64_t g, int offset) {
  return load_bf16(w.steps + g / BLOCK * 2 * PANEL + offset);
}

// LANES scales (or minimums) of group g: code * step. The one formula every way of getting them
// uses, so that a row's result does not depend on which way its tile took.
inline vf group_scale(const Int4Panel& w, int64_t g, int offset, vf step) {
  return mul(step, load_u8(w.codes + g * 2 * PANEL + offset));
}
inline vf group_scale(const Int4Panel& w, int64_t g, int offset) {
  return group_scale(w, g, offset, block_step(w, g, offset));
}

// A panel's fp32 scales and minimums, [groups][scale, minimum][PANEL], once per panel for all
// its row tiles rather than once per tile.
void panel_scales(const Int4Panel& w, int64_t groups, float* out) {
  for (int64_t g = 0; g < groups; ++g)
    UNROLL for (int j = 0; j < 2 * VECS; ++j)  // the scales' VECS vectors, then the minimums'
      store(out + g * 2 * PANEL + j * LANES, group_scale(w, g, j * LANES));
}

// Vectors of a panel one pass of a tile covers: all of them for a single row (decode: nothing
// to share, and fewer passes over the activations) and for two rows on AVX-512 (a one-draft
// verify; its 32 registers hold them); half for more rows, so that the fp32 sums, the integer
// sums and the broadcast activations of R rows stay in registers (all VECS spilled a third of the
// loop's instructions to the stack on AVX2, and on AVX-512 at 4 rows).
template <int R>
constexpr int PASS_VECS = R == 1 || (LANES == 16 && R == 2) ? VECS : VECS / 2;

// R activation rows against vectors [j0, j0 + PASS_VECS<R>) of one panel; store(r, j, LANES fp32
// sums). Per group, each load of nibbles serves every row (its 2 * R activation quads broadcast
// once per load, not once per vector).
//
// A single row takes its scales straight from the codes and steps (one tile per panel: nothing to
// share, and a decode step's bandwidth is better spent on the weights); more rows take the
// panel's precomputed ones (``scales``).
template <int R, typename Store>
inline void tile_int4(const Activations& x, int64_t m0, int64_t groups, const Int4Panel& w, const float* scales,
                      int j0, Store&& store) {
  constexpr int NJ = PASS_VECS<R>;
  vf acc[R][NJ];
  UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < NJ; ++j) acc[r][j] = zero();
  const int8_t* xq = x.q.data() + m0 * x.stride;
  const float* xe = x.scale.data() + m0 * groups;
  const float* xs = x.sum.data() + m0 * groups;
  vf steps[2][NJ];  // R == 1: the steps of the current block, loaded once per BLOCK groups
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* qg = w.q + g * GROUP_BYTES + j0 * LOADS * 4 * LANES;
    U4Sums sums[R][NJ];
    UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < NJ; ++j) sums[r][j] = zero_i32();
    UNROLL for (int t = 0; t < LOADS; ++t) {
      Quads xlo[R], xhi[R];
      UNROLL for (int r = 0; r < R; ++r) {
        const auto* a = reinterpret_cast<const uint8_t*>(xq + r * x.stride + g * GROUP + 4 * t);
        xlo[r] = broadcast_quad(a);
        xhi[r] = broadcast_quad(a + GROUP / 2);
      }
      UNROLL for (int j = 0; j < NJ; ++j) {
        Quads lo, hi;
        load_nibbles(qg + (j * LOADS + t) * 4 * LANES, lo, hi);
        UNROLL for (int r = 0; r < R; ++r) sums[r][j] = dot_u4(dot_u4(sums[r][j], lo, xlo[r]), hi, xhi[r]);
      }
    }
    vf scale[NJ], minimum[NJ];
    if constexpr (R == 1) {
      if (g % BLOCK == 0)
        UNROLL for (int j = 0; j < NJ; ++j) {
          steps[0][j] = block_step(w, g, (j0 + j) * LANES);
          steps[1][j] = block_step(w, g, PANEL + (j0 + j) * LANES);
        }
      UNROLL for (int j = 0; j < NJ; ++j) {
        scale[j] = group_scale(w, g, (j0 + j) * LANES, steps[0][j]);
        minimum[j] = group_scale(w, g, PANEL + (j0 + j) * LANES, steps[1][j]);
      }
    } else {
      const float* precomputed = scales + g * 2 * PANEL + j0 * LANES;
      UNROLL for (int j = 0; j < NJ; ++j) {
        scale[j] = load(precomputed + j * LANES);
        minimum[j] = load(precomputed + PANEL + j * LANES);
      }
    }
    UNROLL for (int r = 0; r < R; ++r) {
      const vf e = set1(xe[r * groups + g]), s = set1(xs[r * groups + g]);
      UNROLL for (int j = 0; j < NJ; ++j) {
        const vf part = fnmadd(minimum[j], s, mul(scale[j], to_float(u4_total(sums[r][j]))));
        acc[r][j] = fmadd(e, part, acc[r][j]);
      }
    }
  }
  UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < NJ; ++j) store(r, j0 + j, acc[r][j]);
}

// Every panel (split between threads) against all M rows, MR at a time, in passes of PASS_VECS.
template <typename Store>
void for_each_int4_tile(const Activations& x, int64_t M, int64_t panels, int64_t groups, const Int4Panel& first,
                        Store&& store) {
  const int64_t blocks = (groups + BLOCK - 1) / BLOCK;
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    std::vector<float> scales(M > 1 ? groups * 2 * PANEL : 0);
    for (int64_t p = p0; p < p1; ++p) {
      const Int4Panel w{first.q + p * groups * GROUP_BYTES, first.codes + p * groups * 2 * PANEL,
                        first.steps + p * blocks * 2 * PANEL};
      if (M > 1) panel_scales(w, groups, scales.data());
      row_tiles(M, p, [&](auto R, int64_t m0, int64_t) {
        for (int j0 = 0; j0 < VECS; j0 += PASS_VECS<R.value>)
          tile_int4<R.value>(x, m0, groups, w, scales.data(), j0,
                             [&](int r, int j, vf sums) { store(m0 + r, p * PANEL + LANES * j, sums); });
      });
    }
  });
}

void check_int4(const at::Tensor& t, at::ScalarType dtype, int64_t numel, const char* what) {
  TORCH_CHECK(t.is_contiguous() && t.scalar_type() == dtype && t.numel() == numel, what,
              " does not match the packed int4 layout");
}

}  // namespace

at::Tensor linear_int4(const at::Tensor& x, const at::Tensor& q, const at::Tensor& codes, const at::Tensor& steps,
                       int64_t N, const std::optional<at::Tensor>& out) {
  const int64_t M = x.size(0), K = x.size(1);
  check_x(x, K);
  const int64_t panels = (N + PANEL - 1) / PANEL;
  TORCH_CHECK(q.dim() == 3 && q.size(0) == panels && q.size(2) == GROUP_BYTES,
              "packed int4 weight: [panels, groups, PANEL * 16] for N=", N);
  const int64_t groups = q.size(1), blocks = (groups + BLOCK - 1) / BLOCK;
  TORCH_CHECK(groups * GROUP >= K && (groups - 1) * GROUP < K, "x has ", K, " columns, the int4 weight ",
              groups * GROUP, " (K padded to a multiple of ", GROUP, ")");
  check_int4(q, at::kByte, panels * groups * GROUP_BYTES, "packed int4 weight");
  check_int4(codes, at::kByte, panels * groups * 2 * PANEL, "int4 codes");
  check_int4(steps, at::kBFloat16, panels * blocks * 2 * PANEL, "int4 steps");
  const Output result(x, N, out);
  const Activations xq = quantize_groups(x.data_ptr<bf16>(), M, K, groups);
  const Int4Panel weights{q.data_ptr<uint8_t>(), codes.data_ptr<uint8_t>(), steps.data_ptr<bf16>()};
  for_each_int4_tile(xq, M, panels, groups, weights,
                     [&](int64_t row, int64_t n0, vf sums) { result.store(row, n0, sums); });
  return result.tensor();
}

}  // namespace lfm_kernels
