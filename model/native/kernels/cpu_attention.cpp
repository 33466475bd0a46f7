// Attention of single-token (decode) queries over the paged KV pool, on the CPU.
//
// Why: SDPA on CPU wants one dense [batch, heads, context, dim] tensor, so decode first
// gathered every sequence's cached blocks into a padded copy (index_select) and then ran a
// flash kernel built for long query tiles: at 32 streams x ~400 tokens that was 17 ms per
// layer plus 7 ms of gathering, for ~50 MFLOP of work. This loop reads each sequence's K and V
// where they lie (block table -> slot) and does nothing for padding.
//
// Per (sequence, kv head), for the rep = heads / kv_heads queries sharing that head:
//   scores[t] = q . k[t] * scale        fp32 sums of bf16 products (cpu_vec.h's dot_pairs), t < context
//   p = softmax(scores)                 fp32, max-subtracted
//   out = sum_t p[t] v[t]               fp32, rounded to bf16 once
// Each sequence is computed alone, so its result never depends on the rest of the batch.
// A sliding-window row (LFM3) attends to positions [start, context) only: context_starts gives
// each row's start, and blocks before it are neither read nor checked (the engine released them).
//
// Scores are taken LANES positions at a time and reduced together (sum_each), not with one
// horizontal sum per position; head_dim's chunk count is a template constant so q and the
// accumulators stay in registers (docs/ARCHITECTURE.md has the figures).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include "cpu_vec.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace lfm_kernels {
namespace {

using namespace vec;

constexpr int64_t MAX_DIM = 256;   // head_dim up to 256 (LFM2: 64)
constexpr int CHUNK = 2 * LANES;   // head_dim values per pair chunk (the last one partial)
constexpr int MAX_REP = 16;        // query heads per kv head

// scores[0..n) -> exp(scores - max), returns their sum.
float softmax_numerators(float* scores, int64_t n) {
  float peak = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < n; ++t) peak = std::max(peak, scores[t]);
  const vf vpeak = set1(peak);
  vf vsum = zero();
  for (int64_t t = 0; t < n; t += LANES) {
    const vf e = exp_nonpositive(sub(load(scores + t, n - t), vpeak));
    store(scores + t, e, n - t);
    vsum = add(vsum, n - t >= LANES ? e : load(scores + t, n - t));  // lanes past n stay out of the sum
  }
  return reduce_add(vsum);
}

#define UNROLL16 _Pragma("GCC unroll 16")

// One sequence and one kv head: its `rep` query heads over `n` context positions whose rows
// start at k + offsets[t] and v + offsets[t]. CH = pair chunks per head (head_dim <= CH * CHUNK),
// a compile-time constant so q and the accumulators stay in registers.
//
// The heads take turns on each LANES positions of K and each V_BLOCK positions of V, so a row
// read from memory serves every head from L1: one head after another over the whole context
// read K and V rep times, and past a few thousand positions the repeats came from memory too.
// Each head's sums run over the positions in the same order either way: the same bits.
constexpr int64_t V_BLOCK = 16;

template <int CH>
void attend(const bf16* q, const bf16* k, const bf16* v, const int64_t* offsets, int64_t n, int64_t rep, int64_t D,
            float scale, float* scores, bf16* out) {
  const int64_t last_values = D - (CH - 1) * CHUNK;  // head_dim values in the last chunk
  const int64_t vectors = (D + LANES - 1) / LANES;   // fp32 vectors of one output row
  const vf vscale = set1(scale);
  for (int64_t t0 = 0; t0 < n; t0 += LANES) {  // scores of LANES positions at a time, every head
    const int64_t count = std::min<int64_t>(LANES, n - t0);
    for (int64_t h = 0; h < rep; ++h) {
      const bf16* qh = q + h * D;
      Pairs qv[CH];
      UNROLL16 for (int c = 0; c < CH; ++c) qv[c] = load_pairs(qh + CHUNK * c, c + 1 < CH ? CHUNK : last_values);
      vf acc[LANES];
      UNROLL16 for (int i = 0; i < LANES; ++i) {
        acc[SUM_ORDER[i]] = zero();
        if (i < count) {
          const bf16* kt = k + offsets[t0 + i];
          UNROLL16 for (int c = 0; c < CH; ++c)  // past head_dim lies the next head (or the pool's end)
            acc[SUM_ORDER[i]] = dot_pairs(acc[SUM_ORDER[i]], qv[c],
                                          load_pairs(kt + CHUNK * c, c + 1 < CH ? CHUNK : last_values));
        }
      }
      store(scores + h * n + t0, mul(sum_each(acc), vscale), count);
    }
  }
  alignas(64) float sums[MAX_REP][2 * CH * LANES] = {};  // each head's output row, fp32, between V blocks
  float norms[MAX_REP];
  for (int64_t h = 0; h < rep; ++h) norms[h] = 1.0f / softmax_numerators(scores + h * n, n);
  for (int64_t t0 = 0; t0 < n; t0 += V_BLOCK) {
    const int64_t t1 = std::min(n, t0 + V_BLOCK);
    for (int64_t h = 0; h < rep; ++h) {
      const float* sc = scores + h * n;
      vf acc[2 * CH];
      UNROLL16 for (int c = 0; c < 2 * CH; ++c) acc[c] = load(sums[h] + LANES * c);
      for (int64_t t = t0; t < t1; ++t) {
        const vf p = set1(sc[t]);
        const bf16* vt = v + offsets[t];
        UNROLL16 for (int c = 0; c < 2 * CH; ++c)
          if (c < vectors) acc[c] = fmadd(p, load_bf16(vt + LANES * c, D - LANES * c), acc[c]);
      }
      UNROLL16 for (int c = 0; c < 2 * CH; ++c) store(sums[h] + LANES * c, acc[c]);
    }
  }
  for (int64_t h = 0; h < rep; ++h) {
    const vf norm = set1(norms[h]);
    UNROLL16 for (int c = 0; c < 2 * CH; ++c)
      if (c < vectors) store_bf16(out + h * D + LANES * c, mul(load(sums[h] + LANES * c), norm), D - LANES * c);
  }
}

using AttendFn = void (*)(const bf16*, const bf16*, const bf16*, const int64_t*, int64_t, int64_t, int64_t, float,
                          float*, bf16*);

template <std::size_t... I>
constexpr auto attend_table(std::index_sequence<I...>) {
  return std::array<AttendFn, sizeof...(I)>{attend<int(I) + 1>...};
}
// attend<CH> for every chunk count head_dim <= 256 may need
constexpr auto ATTEND = attend_table(std::make_index_sequence<MAX_DIM / CHUNK>{});

}  // namespace

// q [S, H, D] bf16; k_cache, v_cache [slots, Hkv, D] bf16 (slot = block * block_size + offset);
// block_tables [S, B] int64 (entries outside a sequence's [start, context) are ignored);
// context_lens [S]; context_starts [S] or None (every row from position 0).
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& block_tables, const at::Tensor& context_lens,
                            int64_t block_size, double scale, const std::optional<at::Tensor>& context_starts) {
  TORCH_CHECK(q.dim() == 3 && q.is_contiguous() && q.scalar_type() == at::kBFloat16, "q: contiguous bf16 [S, H, D]");
  TORCH_CHECK(k_cache.dim() == 3 && k_cache.is_contiguous() && k_cache.scalar_type() == at::kBFloat16 &&
                  v_cache.sizes() == k_cache.sizes() && v_cache.is_contiguous() &&
                  v_cache.scalar_type() == at::kBFloat16,
              "k_cache, v_cache: contiguous bf16 [slots, kv_heads, D]");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && block_tables.is_contiguous() && block_tables.dim() == 2,
              "block_tables: contiguous int64 [S, blocks]");
  TORCH_CHECK(context_lens.scalar_type() == at::kLong && context_lens.is_contiguous() && context_lens.numel() == q.size(0),
              "context_lens: int64 [S]");
  if (context_starts)
    TORCH_CHECK(context_starts->scalar_type() == at::kLong && context_starts->is_contiguous() &&
                    context_starts->numel() == q.size(0),
                "context_starts: int64 [S]");
  const int64_t S = q.size(0), H = q.size(1), D = q.size(2), Hkv = k_cache.size(1), B = block_tables.size(1);
  TORCH_CHECK(k_cache.size(2) == D && D >= 1 && D <= MAX_DIM, "head_dim must be at most 256");
  TORCH_CHECK(H % Hkv == 0 && H / Hkv <= MAX_REP, "query heads must be a multiple of kv heads, at most 16 per kv head");
  const int64_t rep = H / Hkv, slots = k_cache.size(0), num_blocks = slots / block_size;
  const int64_t* lens = context_lens.data_ptr<int64_t>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  std::vector<int64_t> starts(S, 0);
  if (context_starts) std::copy_n(context_starts->data_ptr<int64_t>(), S, starts.data());
  for (int64_t s = 0; s < S; ++s) {
    TORCH_CHECK(lens[s] >= 1 && lens[s] <= B * block_size, "context length outside the block table");
    TORCH_CHECK(starts[s] >= 0 && starts[s] < lens[s], "context start outside the context");
    for (int64_t b = starts[s] / block_size; b < (lens[s] + block_size - 1) / block_size; ++b)
      TORCH_CHECK(tables[s * B + b] >= 0 && tables[s * B + b] < num_blocks, "block table points outside the KV pool");
  }
  auto out = at::empty_like(q);
  const bf16* qp = q.data_ptr<bf16>();
  const bf16* kp = k_cache.data_ptr<bf16>();
  const bf16* vp = v_cache.data_ptr<bf16>();
  bf16* op = out.data_ptr<bf16>();
  const AttendFn attend_head = ATTEND[(D + CHUNK - 1) / CHUNK - 1];

  at::parallel_for(0, S * Hkv, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    std::vector<int64_t> offsets;  // where each context position's row of this kv head starts
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t s = i / Hkv, g = i % Hkv, start = starts[s], n = lens[s] - start;
      offsets.resize(n);
      for (int64_t t0 = start; t0 < lens[s];) {  // block by block: no division per position
        const int64_t block = t0 / block_size, block_start = block * block_size;
        const int64_t block_end = std::min(lens[s], block_start + block_size);
        const int64_t first = (tables[s * B + block] * block_size * Hkv + g) * D;
        for (int64_t t = t0; t < block_end; ++t) offsets[t - start] = first + (t - block_start) * Hkv * D;
        t0 = block_end;
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
