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
//
// Scores are taken 16 positions at a time and reduced together (sum_each), not with one
// horizontal sum per position; head_dim's chunk count is a template constant so q and the
// accumulators stay in registers. With both, 8 streams x 180 positions went 166 -> 75 us a
// layer alone, and 2.25 -> ~1.5 ms per step inside the engine (where K/V come from DRAM).

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


#define UNROLL16 _Pragma("GCC unroll 16")

// r[i] = the sum of v[PERM[i]]'s 16 lanes, in 15 shuffle-and-add steps instead of 16
// horizontal reductions. Position i of a group of 16 goes into v[PERM[i]], so r lists the
// positions in order (the tree's output order is a 4x4 transpose of its input order).
constexpr int PERM[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

inline __m512 sum_each(const __m512 (&v)[16]) {
  __m512 eight[8], four[4], two[2];
  UNROLL16 for (int i = 0; i < 8; ++i)  // 128-bit lanes: [v2i: 2 x 4 partials | v2i+1: 2 x 4 partials]
    eight[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  UNROLL16 for (int i = 0; i < 4; ++i)  // lane j: 4 partials of v[4i + j]
    four[i] = _mm512_add_ps(_mm512_shuffle_f32x4(eight[2 * i], eight[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_f32x4(eight[2 * i], eight[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  UNROLL16 for (int i = 0; i < 2; ++i)  // lane j: 2 partials each of v[8i + j] and v[8i + 4 + j]
    two[i] = _mm512_add_ps(_mm512_unpacklo_ps(four[2 * i], four[2 * i + 1]),
                           _mm512_unpackhi_ps(four[2 * i], four[2 * i + 1]));
  // lane j: sums of v[j], v[4 + j], v[8 + j], v[12 + j]
  return _mm512_add_ps(_mm512_shuffle_ps(two[0], two[1], _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(two[0], two[1], _MM_SHUFFLE(3, 2, 3, 2)));
}

// One sequence and one kv head: its `rep` query heads over `n` context positions whose rows
// start at k + offsets[t] and v + offsets[t]. CH = 32-value chunks per head (head_dim <= 32 CH),
// a compile-time constant so q and the accumulators stay in registers.
template <int CH>
void attend(const bf16* q, const bf16* k, const bf16* v, const int64_t* offsets, int64_t n, int64_t rep, int64_t D,
            float scale, float* scores, bf16* out) {
  const __mmask32 last32 = D % 32 ? __mmask32((1u << (D % 32)) - 1) : ~__mmask32(0);
  const __mmask16 last16 = D % 16 ? __mmask16((1u << (D % 16)) - 1) : __mmask16(0xFFFF);
  const int64_t halves = (D + 15) / 16;
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t h = 0; h < rep; ++h) {
    const bf16* qh = q + h * D;
    __m512bh qv[CH];
    UNROLL16 for (int c = 0; c < CH; ++c)
      qv[c] = (__m512bh)_mm512_maskz_loadu_epi16(c + 1 < CH ? ~__mmask32(0) : last32, qh + 32 * c);
    float* sc = scores + h * n;
    for (int64_t t0 = 0; t0 < n; t0 += 16) {  // scores of 16 positions at a time
      const int64_t count = std::min<int64_t>(16, n - t0);
      __m512 acc[16];
      UNROLL16 for (int i = 0; i < 16; ++i) {
        acc[PERM[i]] = _mm512_setzero_ps();
        if (i < count) {
          const bf16* kt = k + offsets[t0 + i];
          UNROLL16 for (int c = 0; c < CH; ++c) {  // past head_dim lies the next head (or the pool's end)
            const __m512i kc = _mm512_maskz_loadu_epi16(c + 1 < CH ? ~__mmask32(0) : last32, kt + 32 * c);
            acc[PERM[i]] = _mm512_dpbf16_ps(acc[PERM[i]], qv[c], (__m512bh)kc);
          }
        }
      }
      _mm512_mask_storeu_ps(sc + t0, lanes_upto(count), _mm512_mul_ps(sum_each(acc), vscale));
    }
    const __m512 norm = _mm512_set1_ps(1.0f / softmax_numerators(sc, n));
    __m512 acc[2 * CH];
    UNROLL16 for (int c = 0; c < 2 * CH; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t t = 0; t < n; ++t) {
      const __m512 p = _mm512_set1_ps(sc[t]);
      const bf16* vt = v + offsets[t];
      UNROLL16 for (int c = 0; c < 2 * CH; ++c)
        if (c < halves) acc[c] = _mm512_fmadd_ps(p, load_bf16(vt + 16 * c, c + 1 < halves ? 0xFFFF : last16), acc[c]);
    }
    UNROLL16 for (int c = 0; c < 2 * CH; ++c)
      if (c < halves) store_bf16(out + h * D + 16 * c, _mm512_mul_ps(acc[c], norm), c + 1 < halves ? 0xFFFF : last16);
  }
}

using AttendFn = void (*)(const bf16*, const bf16*, const bf16*, const int64_t*, int64_t, int64_t, int64_t, float,
                          float*, bf16*);
constexpr AttendFn ATTEND[] = {attend<1>, attend<2>, attend<3>, attend<4>, attend<5>, attend<6>, attend<7>, attend<8>};

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
  const int64_t rep = H / Hkv, slots = k_cache.size(0), num_blocks = slots / block_size;
  const int64_t* lens = context_lens.data_ptr<int64_t>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  for (int64_t s = 0; s < S; ++s) {
    TORCH_CHECK(lens[s] >= 1 && lens[s] <= B * block_size, "context length outside the block table");
    for (int64_t b = 0; b < (lens[s] + block_size - 1) / block_size; ++b)
      TORCH_CHECK(tables[s * B + b] >= 0 && tables[s * B + b] < num_blocks, "block table points outside the KV pool");
  }
  auto out = torch::empty_like(q);
  const bf16* qp = q.data_ptr<bf16>();
  const bf16* kp = k_cache.data_ptr<bf16>();
  const bf16* vp = v_cache.data_ptr<bf16>();
  bf16* op = out.data_ptr<bf16>();
  const AttendFn attend_head = ATTEND[(D + 31) / 32 - 1];

  at::parallel_for(0, S * Hkv, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    std::vector<int64_t> offsets;  // where each context position's row of this kv head starts
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t s = i / Hkv, g = i % Hkv, n = lens[s];
      offsets.resize(n);
      for (int64_t t0 = 0; t0 < n; t0 += block_size) {  // block by block: no division per position
        const int64_t first = (tables[s * B + t0 / block_size] * block_size * Hkv + g) * D;
        for (int64_t t = t0; t < std::min(n, t0 + block_size); ++t) offsets[t] = first + (t - t0) * Hkv * D;
      }
      scores.resize(rep * n);
      const int64_t head = s * H + g * rep;
      attend_head(qp + head * D, kp, vp, offsets.data(), n, rep, D, static_cast<float>(scale), scores.data(),
                  op + head * D);
    }
  });
  return out;
}

}  // namespace lfm_kernels
