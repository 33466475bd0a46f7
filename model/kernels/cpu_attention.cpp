// Attention of single-token (decode) queries over the paged KV pool, on AVX512-BF16 CPUs.
//
// Why: SDPA on CPU wants one dense [batch, heads, context, dim] tensor, so decode first
// gathered every sequence's cached blocks into a padded copy (index_select) and then ran a
// flash kernel built for long query tiles: at 32 streams x ~400 tokens that was 17 ms per
// layer plus 7 ms of gathering, for ~50 MFLOP of work. This loop reads each sequence's K and V
// where they lie (block table -> slot) and does nothing for padding.
//
// Per (sequence, kv head), for the rep = heads / kv_heads queries sharing that head:
//   scores[t] = q . k[t] * scale        fp32 sums of bf16 products (vdpbf16ps), t < context
//   p = softmax(scores)                 fp32, max-subtracted
//   out = sum_t p[t] v[t]               fp32, rounded to bf16 once
// Each sequence is computed alone, so its result never depends on the rest of the batch.

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/extension.h>

#include "cpu_vec.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace lfm_kernels {
namespace {

constexpr int64_t MAX_DIM = 256;  // head_dim up to 256 (LFM2: 64), in chunks of 32 (the last one masked)
constexpr int MAX_REP = 16;       // query heads per kv head

// scores[0..n) -> exp(scores - max), returns their sum.
float softmax_numerators(float* scores, int64_t n) {
  float peak = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < n; ++t) peak = std::max(peak, scores[t]);
  const __m512 vpeak = _mm512_set1_ps(peak);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t t = 0; t < n; t += 16) {
    const __mmask16 mask = lanes_upto(n - t);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, scores + t), vpeak));
    _mm512_mask_storeu_ps(scores + t, mask, e);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(mask, e));
  }
  return _mm512_reduce_add_ps(vsum);
}

}  // namespace

// q [S, H, D] bf16; k_cache, v_cache [slots, Hkv, D] bf16 (slot = block * block_size + offset);
// block_tables [S, B] int64 (entries past a sequence's context are ignored); context_lens [S].
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                               const torch::Tensor& block_tables, const torch::Tensor& context_lens,
                               int64_t block_size, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.is_contiguous() && q.scalar_type() == at::kBFloat16, "q: contiguous bf16 [S, H, D]");
  TORCH_CHECK(k_cache.dim() == 3 && k_cache.is_contiguous() && k_cache.scalar_type() == at::kBFloat16 &&
                  v_cache.sizes() == k_cache.sizes() && v_cache.is_contiguous() &&
                  v_cache.scalar_type() == at::kBFloat16,
              "k_cache, v_cache: contiguous bf16 [slots, kv_heads, D]");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && block_tables.is_contiguous() && block_tables.dim() == 2,
              "block_tables: contiguous int64 [S, blocks]");
  TORCH_CHECK(context_lens.scalar_type() == at::kLong && context_lens.numel() == q.size(0), "context_lens: int64 [S]");
  const int64_t S = q.size(0), H = q.size(1), D = q.size(2), Hkv = k_cache.size(1), B = block_tables.size(1);
  TORCH_CHECK(k_cache.size(2) == D && D >= 1 && D <= MAX_DIM, "head_dim must be at most 256");
  TORCH_CHECK(H % Hkv == 0 && H / Hkv <= MAX_REP, "query heads must be a multiple of kv heads, at most 16 per kv head");
  const int64_t rep = H / Hkv, chunks = (D + 31) / 32, halves = (D + 15) / 16, slots = k_cache.size(0);
  // lanes of the last 32-value (q . k) and 16-value (p v) chunk that lie inside head_dim
  const __mmask32 last32 = D % 32 ? __mmask32((1u << (D % 32)) - 1) : ~__mmask32(0);
  const __mmask16 last16 = D % 16 ? __mmask16((1u << (D % 16)) - 1) : __mmask16(0xFFFF);
  const int64_t* lens = context_lens.data_ptr<int64_t>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  for (int64_t s = 0; s < S; ++s)
    TORCH_CHECK(lens[s] >= 1 && lens[s] <= B * block_size, "context length outside the block table");
  auto out = torch::empty_like(q);
  const bf16* qp = q.data_ptr<bf16>();
  const bf16* kp = k_cache.data_ptr<bf16>();
  const bf16* vp = v_cache.data_ptr<bf16>();
  bf16* op = out.data_ptr<bf16>();
  const float fscale = static_cast<float>(scale);

  at::parallel_for(0, S * Hkv, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    std::vector<int64_t> row;  // slot of each context position
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t s = i / Hkv, g = i % Hkv, n = lens[s];
      row.resize(n);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t slot = tables[s * B + t / block_size] * block_size + t % block_size;
        TORCH_CHECK(slot >= 0 && slot < slots, "block table points outside the KV pool");
        row[t] = (slot * Hkv + g) * D;
      }
      scores.resize(rep * n);
      for (int64_t h = 0; h < rep; ++h) {
        const bf16* qh = qp + (s * H + g * rep + h) * D;
        __m512bh qv[MAX_DIM / 32];
        for (int64_t c = 0; c < chunks; ++c)
          qv[c] = (__m512bh)_mm512_maskz_loadu_epi16(c + 1 < chunks ? ~__mmask32(0) : last32, qh + 32 * c);
        float* sc = scores.data() + h * n;
        for (int64_t t = 0; t < n; ++t) {
          __m512 acc = _mm512_setzero_ps();
          for (int64_t c = 0; c < chunks; ++c) {  // masked-off q lanes are zero, so k's need no mask
            const __mmask32 lanes = c + 1 < chunks ? ~__mmask32(0) : last32;
            acc = _mm512_dpbf16_ps(acc, qv[c], (__m512bh)_mm512_maskz_loadu_epi16(lanes, kp + row[t] + 32 * c));
          }
          sc[t] = _mm512_reduce_add_ps(acc) * fscale;
        }
        const float inv_sum = 1.0f / softmax_numerators(sc, n);
        __m512 acc[MAX_DIM / 16];
        for (int64_t c = 0; c < halves; ++c) acc[c] = _mm512_setzero_ps();
        for (int64_t t = 0; t < n; ++t) {
          const __m512 p = _mm512_set1_ps(sc[t]);
          const bf16* vt = vp + row[t];
          for (int64_t c = 0; c < halves; ++c) {
            const __m512 v = load_bf16(vt + 16 * c, c + 1 < halves ? __mmask16(0xFFFF) : last16);
            acc[c] = _mm512_fmadd_ps(p, v, acc[c]);
          }
        }
        bf16* oh = op + (s * H + g * rep + h) * D;
        const __m512 norm = _mm512_set1_ps(inv_sum);
        for (int64_t c = 0; c < halves; ++c)
          store_bf16(oh + 16 * c, _mm512_mul_ps(acc[c], norm), c + 1 < halves ? __mmask16(0xFFFF) : last16);
      }
    }
  });
  return out;
}

}  // namespace lfm_kernels
