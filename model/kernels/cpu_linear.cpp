// Linear layers on AVX512-BF16 CPUs: out[M, N] = x[M, K] @ W.T, W pre-packed in panels.
//
// Why: at decode batch sizes a step reads every weight once, so speed is memory bandwidth,
// and PyTorch's bf16 and int8 CPU kernels reach about half of it at one row. These loops
// stream each weight once per step with 512-bit loads and keep up at prefill sizes too.
//
// Packed layout (model/linears.py packs at load): W [N, K] becomes panels of 64 outputs,
// each panel K/G groups of G consecutive k for all 64 outputs:
//
//     panel[n / 64][k / G][n % 64][k % G]       G = 2 for bf16 (vdpbf16ps takes pairs),
//                                               G = 4 for int8 x int8 (vpdpbusd takes quads)
//
// One group of a panel is 4 vectors of 16 outputs; an activation row's G values are
// broadcast and multiplied into 16 fp32/int32 lanes, one lane per output. No horizontal
// sums, and every output's sum runs over k in the same order whatever M is: a row's result
// never depends on what else is in the batch.
//
//   linear_bf16   bf16 x, bf16 W                    fp32 accumulation
//   linear_int8   bf16 x, int8 W * per-row scale    W widened to bf16 in registers
//   linear_w8a8   x quantized per row to int8 (model/quantize.py's rounding), int8 W,
//                 exact int32 sums: bit for bit what quantize_rows + torch._int_mm give

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "cpu_vec.h"

namespace lfm_kernels {
namespace {

constexpr int64_t PANEL = 64;  // outputs per panel: 4 vectors of 16 lanes
constexpr int VECS = 4;
constexpr int MR = 4;          // activation rows per register tile (4 x 4 accumulators)

#define UNROLL _Pragma("GCC unroll 8")

inline int32_t load_u32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---------------------------------------------------------------- weight groups as bf16

// One k-pair of a bf16 panel: 4 vectors of 16 outputs x 2 k.
struct Bf16Panel {
  const bf16* w;
  inline void load(int64_t pair, __m512bh (&out)[VECS]) const {
    const bf16* g = w + pair * PANEL * 2;
    UNROLL for (int j = 0; j < VECS; ++j) out[j] = (__m512bh)_mm512_loadu_si512(g + j * 32);
  }
};

// One k-pair of an int8 panel, widened to bf16 (exact: |w| <= 127 fits bf16's significand).
struct Int8Panel {
  const int8_t* w;
  inline void load(int64_t pair, __m512bh (&out)[VECS]) const {
    const int8_t* g = w + pair * PANEL * 2;
    UNROLL for (int j = 0; j < VECS; ++j) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + j * 32));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(bytes)));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(bytes, 1)));
      out[j] = _mm512_cvtne2ps_pbh(hi, lo);
    }
  }
};

// R activation rows (bf16, row stride K) against one panel; store(r, j, 16 fp32 sums).
template <int R, typename Panel, typename Store>
inline void tile_bf16(const bf16* x, int64_t K, const Panel& panel, Store&& store) {
  __m512 acc[R][VECS];
  UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < VECS; ++j) acc[r][j] = _mm512_setzero_ps();
  const int64_t pairs = K / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh w[VECS];
    panel.load(p, w);
    UNROLL for (int r = 0; r < R; ++r) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(load_u32(x + r * K + 2 * p));
      UNROLL for (int j = 0; j < VECS; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xb, w[j]);
    }
  }
  UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < VECS; ++j) store(r, j, acc[r][j]);
}

// R activation rows (u8 = int8 + 128, row stride K) against one int8 quad panel: int32 sums.
template <int R, typename Store>
inline void tile_u8s8(const uint8_t* x, int64_t K, const int8_t* panel, Store&& store) {
  __m512i acc[R][VECS];
  UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < VECS; ++j) acc[r][j] = _mm512_setzero_si512();
  const int64_t quads = K / 4;
  for (int64_t q = 0; q < quads; ++q) {
    const int8_t* g = panel + q * PANEL * 4;
    __m512i w[VECS];
    UNROLL for (int j = 0; j < VECS; ++j) w[j] = _mm512_loadu_si512(g + j * 64);
    UNROLL for (int r = 0; r < R; ++r) {
      const __m512i xb = _mm512_set1_epi32(load_u32(x + r * K + 4 * q));
      UNROLL for (int j = 0; j < VECS; ++j) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], xb, w[j]);
    }
  }
  UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < VECS; ++j) store(r, j, acc[r][j]);
}

// Every panel (split between threads) against all M rows, MR at a time.
// tile(R, m0, panel_index) runs one register tile; R is passed as a compile-time constant.
template <typename Tile>
void for_each_tile(int64_t M, int64_t panels, Tile&& tile) {
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t m = 0;
      for (; m + MR <= M; m += MR) tile(std::integral_constant<int, MR>{}, m, p);
      switch (M - m) {
        case 3: tile(std::integral_constant<int, 3>{}, m, p); break;
        case 2: tile(std::integral_constant<int, 2>{}, m, p); break;
        case 1: tile(std::integral_constant<int, 1>{}, m, p); break;
        default: break;
      }
    }
  });
}

// Where a product's [M, N] outputs go: a new bf16 tensor or, for the head's logits, an fp32
// tensor the caller reuses every step, holding the same bf16-rounded values. (A fresh 2 MB
// fp32 copy per step is a fresh mmap under model/memory.py's threshold: ~0.8 ms of page
// faults at 8 rows.)
class Output {
 public:
  Output(const torch::Tensor& x, int64_t N, const std::optional<torch::Tensor>& into) : N_(N) {
    const int64_t M = x.size(0);
    if (into) {
      TORCH_CHECK(into->scalar_type() == at::kFloat && into->is_contiguous() && into->dim() == 2 &&
                      into->size(0) == M && into->size(1) == N,
                  "out must be a contiguous float32 [M, N]");
      tensor_ = *into;
      f32_ = tensor_.data_ptr<float>();
    } else {
      tensor_ = torch::empty({M, N}, x.options());
      bf16_ = tensor_.data_ptr<bf16>();
    }
  }
  // 16 outputs of row `row` from output n0, clipped at N
  inline void store(int64_t row, int64_t n0, __m512 values) const {
    if (n0 >= N_) return;
    const __mmask16 mask = lanes_upto(N_ - n0);
    if (f32_ != nullptr)
      _mm512_mask_storeu_ps(f32_ + row * N_ + n0, mask, round_bf16(values));
    else
      store_bf16(bf16_ + row * N_ + n0, values, mask);
  }
  torch::Tensor tensor() const { return tensor_; }

 private:
  int64_t N_;
  torch::Tensor tensor_;
  bf16* bf16_ = nullptr;
  float* f32_ = nullptr;
};

void check_x(const torch::Tensor& x, int64_t K) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kBFloat16,
              "x must be a contiguous bfloat16 [M, K]");
  TORCH_CHECK(x.size(1) == K, "x has ", x.size(1), " columns, the weight ", K);
}

void check_panels(const torch::Tensor& w, at::ScalarType dtype, int64_t N, int64_t K, int64_t group) {
  TORCH_CHECK(w.is_contiguous() && w.scalar_type() == dtype, "packed weight has the wrong dtype or layout");
  TORCH_CHECK(K % 4 == 0, "K must be a multiple of 4");
  TORCH_CHECK(w.numel() == (N + PANEL - 1) / PANEL * PANEL * K && w.size(-1) == group,
              "packed weight does not match N=", N, ", K=", K);
}

// Per-row symmetric int8, as model/quantize.py's quantize_rows: scale = max(amax|x|, 1e-12) / 127,
// q = round-half-even(x / scale), stored as q + 128 (vpdpbusd multiplies unsigned by signed).
void quantize_rows_u8(const bf16* x, int64_t M, int64_t K, uint8_t* q, float* scales) {
  at::parallel_for(0, M, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const bf16* row = x + r * K;
      float amax = 0.f;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(static_cast<float>(row[k])));
      const float scale = std::max(amax, 1e-12f) / 127.0f;
      scales[r] = scale;
      for (int64_t k = 0; k < K; ++k)
        q[r * K + k] = static_cast<uint8_t>(static_cast<int32_t>(std::nearbyint(static_cast<float>(row[k]) / scale)) + 128);
    }
  });
}

}  // namespace

// ---------------------------------------------------------------- entry points

torch::Tensor linear_bf16(const torch::Tensor& x, const torch::Tensor& w, int64_t N,
                          const std::optional<torch::Tensor>& out) {
  const int64_t M = x.size(0), K = x.size(1);
  check_x(x, K);
  check_panels(w, at::kBFloat16, N, K, 2);
  const Output result(x, N, out);
  const bf16* xp = x.data_ptr<bf16>();
  const bf16* wp = w.data_ptr<bf16>();
  for_each_tile(M, (N + PANEL - 1) / PANEL, [&](auto R, int64_t m0, int64_t p) {
    tile_bf16<R.value>(xp + m0 * K, K, Bf16Panel{wp + p * PANEL * K}, [&](int r, int j, __m512 sums) {
      result.store(m0 + r, p * PANEL + 16 * j, sums);
    });
  });
  return result.tensor();
}

torch::Tensor linear_int8(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& scales, int64_t N,
                          const std::optional<torch::Tensor>& out) {
  const int64_t M = x.size(0), K = x.size(1);
  check_x(x, K);
  check_panels(w, at::kChar, N, K, 2);
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == (N + PANEL - 1) / PANEL * PANEL,
              "scales: fp32, padded to whole panels");
  const Output result(x, N, out);
  const bf16* xp = x.data_ptr<bf16>();
  const int8_t* wp = w.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  for_each_tile(M, (N + PANEL - 1) / PANEL, [&](auto R, int64_t m0, int64_t p) {
    tile_bf16<R.value>(xp + m0 * K, K, Int8Panel{wp + p * PANEL * K}, [&](int r, int j, __m512 sums) {
      const int64_t n0 = p * PANEL + 16 * j;
      result.store(m0 + r, n0, _mm512_mul_ps(sums, _mm512_loadu_ps(sp + n0)));
    });
  });
  return result.tensor();
}

torch::Tensor linear_w8a8(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& row_sums,
                          const torch::Tensor& scales, int64_t N, const std::optional<torch::Tensor>& out) {
  const int64_t M = x.size(0), K = x.size(1);
  check_x(x, K);
  check_panels(w, at::kChar, N, K, 4);
  const int64_t padded = (N + PANEL - 1) / PANEL * PANEL;
  TORCH_CHECK(row_sums.scalar_type() == at::kInt && row_sums.numel() == padded, "row_sums: int32, padded");
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == padded, "scales: fp32, padded");
  const Output result(x, N, out);
  std::vector<uint8_t> xq(M * K);
  std::vector<float> xs(M);
  quantize_rows_u8(x.data_ptr<bf16>(), M, K, xq.data(), xs.data());
  const int8_t* wp = w.data_ptr<int8_t>();
  const int32_t* sums = row_sums.data_ptr<int32_t>();
  const float* sp = scales.data_ptr<float>();
  const __m512i bias = _mm512_set1_epi32(128);
  for_each_tile(M, padded / PANEL, [&](auto R, int64_t m0, int64_t p) {
    tile_u8s8<R.value>(xq.data() + m0 * K, K, wp + p * PANEL * K, [&](int r, int j, __m512i acc) {
      const int64_t n0 = p * PANEL + 16 * j;
      // undo the +128 on x: sum((q + 128) * w) - 128 * sum(w), exact in int32
      const __m512i exact = _mm512_sub_epi32(acc, _mm512_mullo_epi32(bias, _mm512_loadu_si512(sums + n0)));
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(xs[m0 + r]), _mm512_loadu_ps(sp + n0));
      result.store(m0 + r, n0, _mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale));
    });
  });
  return result.tensor();
}

}  // namespace lfm_kernels
