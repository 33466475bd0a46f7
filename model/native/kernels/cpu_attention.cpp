// Attention of single-token (decode) queries over the paged KV pool, on the CPU.
//
// Why: SDPA on CPU wants one dense [batch, heads, context, dim] tensor, so decode first
// gathered every sequence's cached blocks into a padded copy (index_select) and then ran a
// flash kernel built for long query tiles: at 32 streams x ~400 tokens that was 17 ms per
// layer plus 7 ms of gathering, for ~50 MFLOP of work. This loop reads each sequence's K and V
// where they lie (block table -> slot) and does nothing for padding.
//
// Per sequence and query head (heads sharing a kv head read its rows once, from L1):
//   scores[t] = q . k[t] * scale        fp32 sums of bf16 products (cpu_vec.h's dot_pairs), t < context
//   p = softmax(scores)                 fp32, online: LANES positions at a time against a running peak
//   out = sum_t p[t] v[t]               fp32, rounded to bf16 once
// Each sequence is computed alone, so its result never depends on the rest of the batch.
// A sliding-window row (LFM3) attends to positions [start, context) only: context_starts gives
// each row's start, and blocks before it are neither read nor checked (the engine released them).
//
// A context longer than SPLIT positions is cut into pieces of SPLIT from its start, each a task of
// its own (as flash-decoding splits it), so one long sequence spreads over the threads; the pieces
// meet in a fixed order (each piece's sums rescaled by exp(its peak - the overall peak)), so the
// result depends on neither the batch nor the thread count.
//
// Scores are taken LANES positions at a time and reduced together (sum_each), not with one
// horizontal sum per position; head_dim's chunk count is a template constant so q and the
// accumulators stay in registers (docs/ARCHITECTURE.md has the figures).

#include <ATen/Parallel.h>
#include <immintrin.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include "cpu_vec.h"

#include <algorithm>
#include <array>
#include <cmath>
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

#define UNROLL16 _Pragma("GCC unroll 16")

// A task takes up to SPLIT positions of one sequence, every head at once.
constexpr int64_t SPLIT = 512;
// The next LANES positions' K and V rows are asked for (into L2) while these are computed: a
// sequence's blocks lie anywhere in the pool, each a run of a few pages the hardware prefetchers
// start over on (measured with and without: docs/PERFORMANCE.md, Kernels, 2026-11-30).
constexpr int64_t AHEAD = LANES;

// One piece's softmax for one query head, unnormalized: `sums` = sum_t exp(score_t - peak) v_t over
// the piece, `total` = sum_t exp(score_t - peak). A sequence's pieces are combined by `combine`.
// The sums are kept in the V accumulation's order (`widened_at`), put back in order by `finish`.
struct Partial {
  float peak, total;
  float* sums;  // head_dim values, rounded up to whole chunks
};

// Where value d of a row sits in the sums: each chunk of 2 * LANES values as its even values, then
// its odd ones (load_widened's halves: a V row is widened to fp32 without a shuffle).
inline int64_t widened_at(int64_t d) { return d / CHUNK * CHUNK + d % 2 * LANES + d % CHUNK / 2; }

// Each head's output row from its sums: the bf16 of sums / total (rounded once).
inline void finish(const float* sums, float total, int64_t D, bf16* out) {
  alignas(64) float row[MAX_DIM];
  for (int64_t d = 0; d < D; ++d) row[d] = sums[widened_at(d)];
  const vf norm = set1(1.0f / total);
  for (int64_t d = 0; d < D; d += LANES) store_bf16(out + d, mul(load(row + d, D - d), norm), D - d);
}

// One piece of one sequence, every head, into `pieces[h]` (their sums zeroed): `n` positions whose
// rows (their first kv head's) start at k + offsets[t] and v + offsets[t]. CH = pair chunks per head (head_dim <= CH * CHUNK), a constant
// so q and the accumulators stay in registers; EXACT: head_dim is CH whole chunks, so no load
// computes a mask.
//
// One pass, LANES positions at a time: every head's scores for them, then its running softmax
// (rescaled when its peak rises, as flash attention does), then their V rows into its sums. K and
// V are read together, a block of positions after another, so the memory streams while the heads
// compute: two passes (scores, then V) left it idle during the second and read a 64k-token
// context at a third of the machine's bandwidth. A row read from memory serves each head of its
// kv head from L1.
template <int CH, bool EXACT>
void attend(const bf16* q, const bf16* k, const bf16* v, const int64_t* offsets, int64_t n, int64_t heads,
            int64_t rep, int64_t head_dim, float scale, Partial* pieces) {
  const int64_t D = EXACT ? CH * CHUNK : head_dim;
  const int64_t last_values = D - (CH - 1) * CHUNK;  // head_dim values in the last chunk
  for (int64_t h = 0; h < heads; ++h) {
    pieces[h].peak = -std::numeric_limits<float>::infinity();
    pieces[h].total = 0.0f;
  }
  const vf vscale = set1(scale);
  alignas(64) float p[LANES];
  const int64_t row_bytes = heads / rep * D * int64_t(sizeof(bf16));  // a position's K (or V), every kv head
  for (int64_t t0 = 0; t0 < n; t0 += LANES) {
    const int64_t count = std::min<int64_t>(LANES, n - t0);
    for (int64_t t = t0 + AHEAD; t < std::min(n, t0 + AHEAD + LANES); ++t)
      for (int64_t byte = 0; byte < row_bytes; byte += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(k + offsets[t]) + byte, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(v + offsets[t]) + byte, _MM_HINT_T1);
      }
    for (int64_t h = 0; h < heads; ++h) {
      const bf16* qh = q + h * D;
      const int64_t kv = h / rep * D;
      Pairs qv[CH];
      UNROLL16 for (int c = 0; c < CH; ++c) qv[c] = load_pairs(qh + CHUNK * c, c + 1 < CH ? CHUNK : last_values);
      vf dots[LANES];
      UNROLL16 for (int i = 0; i < LANES; ++i) {
        dots[SUM_ORDER[i]] = zero();
        if (i < count) {
          const bf16* kt = k + offsets[t0 + i] + kv;
          UNROLL16 for (int c = 0; c < CH; ++c)  // past head_dim lies the next head (or the pool's end)
            dots[SUM_ORDER[i]] = dot_pairs(dots[SUM_ORDER[i]], qv[c],
                                           load_pairs(kt + CHUNK * c, c + 1 < CH ? CHUNK : last_values));
        }
      }
      store(p, mul(sum_each(dots), vscale));
      Partial& piece = pieces[h];
      const float peak = std::max(piece.peak, *std::max_element(p, p + count));
      vf acc[2 * CH];  // chunk c's even values in acc[2c], its odd ones in acc[2c + 1]
      UNROLL16 for (int c = 0; c < 2 * CH; ++c) acc[c] = load(piece.sums + LANES * c);
      if (peak > piece.peak) {  // the sums so far were taken against a lower peak
        const float rescale = std::exp(piece.peak - peak);  // 0 for the first positions (peak -inf)
        piece.total *= rescale;
        UNROLL16 for (int c = 0; c < 2 * CH; ++c) acc[c] = mul(acc[c], set1(rescale));
        piece.peak = peak;
      }
      store(p, exp_nonpositive(sub(load(p), set1(peak))));
      for (int64_t i = count; i < LANES; ++i) p[i] = 0.0f;
      piece.total += reduce_add(load(p));
      for (int64_t i = 0; i < count; ++i) {
        const vf weight = set1(p[i]);
        const bf16* vt = v + offsets[t0 + i] + kv;
        UNROLL16 for (int c = 0; c < CH; ++c) {
          const Widened values = load_widened(vt + CHUNK * c, c + 1 < CH ? CHUNK : last_values);
          acc[2 * c] = fmadd(weight, values.even, acc[2 * c]);
          acc[2 * c + 1] = fmadd(weight, values.odd, acc[2 * c + 1]);
        }
      }
      UNROLL16 for (int c = 0; c < 2 * CH; ++c) store(piece.sums + LANES * c, acc[c]);
    }
  }
}

// One query head's pieces, in order, into its output row: each rescaled to the largest peak (a
// single piece by exactly 1). W: the sums' length (head_dim in whole chunks), D: head_dim.
void combine(const Partial* pieces, int64_t count, int64_t heads, int64_t W, int64_t D, float* scratch, bf16* out) {
  float peak = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < count; ++c) peak = std::max(peak, pieces[c * heads].peak);
  float total = 0.0f;
  std::fill_n(scratch, W, 0.0f);
  for (int64_t c = 0; c < count; ++c) {
    const Partial& piece = pieces[c * heads];
    const float weight = std::exp(piece.peak - peak);
    total += piece.total * weight;
    const vf w = set1(weight);
    for (int64_t d = 0; d < W; d += LANES) store(scratch + d, fmadd(load(piece.sums + d), w, load(scratch + d)));
  }
  finish(scratch, total, D, out);
}

using AttendFn = void (*)(const bf16*, const bf16*, const bf16*, const int64_t*, int64_t, int64_t, int64_t,
                          int64_t, float, Partial*);

template <bool EXACT, std::size_t... I>
constexpr auto attend_table(std::index_sequence<I...>) {
  return std::array<AttendFn, sizeof...(I)>{attend<int(I) + 1, EXACT>...};
}
// attend<CH, EXACT> for every chunk count head_dim <= 256 may need
constexpr auto ATTEND = attend_table<false>(std::make_index_sequence<MAX_DIM / CHUNK>{});
constexpr auto ATTEND_EXACT = attend_table<true>(std::make_index_sequence<MAX_DIM / CHUNK>{});

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
  const AttendFn attend_head = (D % CHUNK == 0 ? ATTEND_EXACT : ATTEND)[(D + CHUNK - 1) / CHUNK - 1];

  // tasks: every sequence's pieces in order, each with its heads' partial softmax
  std::vector<int64_t> first_task(S + 1, 0);
  for (int64_t s = 0; s < S; ++s) first_task[s + 1] = first_task[s] + (lens[s] - starts[s] + SPLIT - 1) / SPLIT;
  const int64_t W = (D + CHUNK - 1) / CHUNK * CHUNK;  // a head's sums: whole chunks
  std::vector<float> sums(first_task[S] * H * W, 0.0f);
  std::vector<Partial> partials(first_task[S] * H);
  for (int64_t i = 0; i < first_task[S] * H; ++i) partials[i].sums = sums.data() + i * W;

  at::parallel_for(0, first_task[S], 1, [&](int64_t i0, int64_t i1) {
    std::vector<int64_t> offsets(SPLIT);  // where each position's row (its first kv head's) starts
    int64_t s = std::upper_bound(first_task.begin(), first_task.end(), i0) - first_task.begin() - 1;
    for (int64_t i = i0; i < i1; ++i) {
      while (i >= first_task[s + 1]) ++s;
      const int64_t begin = starts[s] + (i - first_task[s]) * SPLIT, end = std::min(lens[s], begin + SPLIT);
      for (int64_t t0 = begin; t0 < end;) {  // block by block: no division per position
        const int64_t block = t0 / block_size, block_start = block * block_size;
        const int64_t block_end = std::min(end, block_start + block_size);
        const int64_t first = tables[s * B + block] * block_size * Hkv * D;
        for (int64_t t = t0; t < block_end; ++t) offsets[t - begin] = first + (t - block_start) * Hkv * D;
        t0 = block_end;
      }
      attend_head(qp + s * H * D, kp, vp, offsets.data(), end - begin, H, rep, D, static_cast<float>(scale),
                  partials.data() + i * H);
    }
  });
  // every head of every sequence from its pieces, in order
  at::parallel_for(0, S * H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scratch(W);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t s = i / H, h = i % H;
      combine(partials.data() + first_task[s] * H + h, first_task[s + 1] - first_task[s], H, W, D, scratch.data(),
              op + i * D);
    }
  });
  return out;
}

}  // namespace lfm_kernels
