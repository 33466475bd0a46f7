// Sampling a step's float32 logits [B, V]: greedy argmax, and every other row's whole pipeline.
//
// Why argmax: torch's CPU argmax over a 65k vocabulary is slow (engine/sampler.py works around it
// with block maxima in three ops), and in a 1-stream decode step those ops, run with caches cold
// from the weights streaming past, cost ~0.2 ms of an ~8 ms step. Here: one vectorized pass over
// blocks of the row, then a scan of the first block holding the maximum. The answer is
// torch.argmax's: the first index of the largest value, and the first NaN's index where a row
// holds a NaN.
//
// Why the pipeline: engine/sampler.py's PyTorch version is ~25 small ops per step (penalties,
// temperature, top-k, top-p, min-p, the draw), which with cold caches cost a chat's default
// settings ~1.2 ms of an ~8 ms int4 step, and a top-p nucleus wider than 256 tokens a full sort
// of the vocabulary (~5 ms). Here each row is a few passes over its logits, and top-p finds its
// cut-off from a histogram of the probabilities instead of a sort. The steps and their order are
// the PyTorch version's (the penalties bit for bit); probabilities are summed in another order,
// so a draw that lands within rounding of a boundary may pick the neighbouring token.
// process_rows gives the rows as the draw sees them, for speculative verification's rejection
// rule (engine/acceptance.py), which needs each verified position's probabilities.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "cpu_vec.h"

namespace lfm_kernels {
namespace {

using namespace vec;

constexpr int64_t BLOCK = 1024;  // logits per block: the scan after the pass reads one block

// The largest of x[0, n); not_finite is set where any is NaN or infinite (x * 0 is NaN for
// those), whose rows take the exact scan.
inline float block_max(const float* x, int64_t n, bool& not_finite) {
  vf best = set1(-std::numeric_limits<float>::max());
  vf probe = zero();
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES) {
    const vf v = load(x + i);
    best = max(best, v);
    probe = add(probe, mul(v, zero()));
  }
  float m = reduce_max(best);
  for (; i < n; ++i) {
    m = std::max(m, x[i]);
    not_finite = not_finite || !std::isfinite(x[i]);
  }
  not_finite = not_finite || std::isnan(reduce_add(probe));
  return m;
}

// torch.argmax's rule, one element at a time: for rows holding NaN or infinities.
int64_t exact_argmax(const float* x, int64_t V) {
  int64_t best = 0;
  for (int64_t j = 0; j < V; ++j) {
    if (std::isnan(x[j])) return j;
    if (x[j] > x[best]) best = j;
  }
  return best;
}

int64_t row_argmax(const float* x, int64_t V) {
  bool not_finite = false;
  float best = 0.0f;
  int64_t best_block = -1;
  for (int64_t b = 0; b < V; b += BLOCK) {
    const float m = block_max(x + b, std::min(BLOCK, V - b), not_finite);
    if (best_block < 0 || m > best) {
      best = m;
      best_block = b;
    }
  }
  if (not_finite) return exact_argmax(x, V);
  for (int64_t j = best_block;; ++j)
    if (x[j] == best) return j;
}

}  // namespace

at::Tensor argmax_rows(const at::Tensor& logits) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.is_contiguous() &&
                  logits.size(1) > 0,
              "logits must be a contiguous float32 [B, V] with V > 0");
  const int64_t B = logits.size(0), V = logits.size(1);
  at::Tensor out = at::empty({B}, logits.options().dtype(at::kLong));
  const float* x = logits.data_ptr<float>();
  int64_t* idx = out.data_ptr<int64_t>();
  at::parallel_for(0, B, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) idx[r] = row_argmax(x + r * V, V);
  });
  return out;
}

namespace {

// The columns of sample_rows' params, one row per logits row.
enum Param { TEMPERATURE, TOP_K, TOP_P, MIN_P, REPETITION, FREQUENCY, PRESENCE, UNIFORM, PARAMS };
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
constexpr int HISTOGRAM = 1024;     // buckets of a probability in [0, 1]: its float bits >> 20
constexpr int64_t SUM_BLOCK = 1024;  // exp values per partial sum

// One thread's working rows, kept between steps (a vocabulary's worth each).
struct Scratch {
  std::vector<float> x, e;
  std::vector<int32_t> seen;  // 0: not in the history; else 1 + the token's count in the output
  std::vector<int64_t> touched;
  std::vector<float> bucket;
  std::vector<double> sums;

  void fit(int64_t V) {
    if (static_cast<int64_t>(x.size()) >= V) return;
    x.resize(V);
    e.resize(V);
    seen.assign(V, 0);
  }
};

// Repetition (over prompt and output), then frequency and presence (output only), once per
// distinct token, with sampler.py's apply_penalties' operations in its order.
void penalize(float* x, const float* p, const int64_t* prompt, int64_t n_prompt, const int64_t* output,
              int64_t n_output, Scratch& s) {
  if (p[REPETITION] == 1.0f && p[FREQUENCY] == 0.0f && p[PRESENCE] == 0.0f) return;
  auto see = [&](int64_t t) {
    if (s.seen[t] == 0) {
      s.seen[t] = 1;
      s.touched.push_back(t);
    }
  };
  for (int64_t i = 0; i < n_prompt; ++i) see(prompt[i]);
  for (int64_t i = 0; i < n_output; ++i) {
    see(output[i]);
    ++s.seen[output[i]];
  }
  for (const int64_t t : s.touched) {
    const float count = static_cast<float>(s.seen[t] - 1);
    float v = x[t];
    v = v > 0.0f ? v / p[REPETITION] : v * p[REPETITION];
    x[t] = v - p[FREQUENCY] * count - p[PRESENCE] * (count > 0.0f ? 1.0f : 0.0f);
    s.seen[t] = 0;
  }
  s.touched.clear();
}

// The largest of a row that holds a finite value (masked rows keep their maximum).
float row_max(const float* x, int64_t V) {
  bool not_finite = false;
  return block_max(x, V, not_finite);
}

// Everything below `cutoff` becomes -inf.
void mask_below(float* x, int64_t V, float cutoff) {
  for (int64_t i = 0; i < V; ++i) x[i] = x[i] < cutoff ? NEG_INF : x[i];
}

bool all_finite(const float* x, int64_t V) {
  bool not_finite = false;
  block_max(x, V, not_finite);
  return !not_finite;
}

// e = exp(x - m), exactly 0 where x is -inf; the sum of each block of SUM_BLOCK into `sums`
// (so a draw scans one block, not the row); returns the total.
double exponentiate(const float* x, float* e, int64_t V, float m, std::vector<double>& sums) {
  const vf shift = set1(m);
  int64_t i = 0;
  for (; i + LANES <= V; i += LANES) store(e + i, exp_nonpositive(sub(load(x + i), shift)));
  for (; i < V; ++i) e[i] = std::exp(x[i] - m);
  for (i = 0; i < V; ++i) e[i] = x[i] == NEG_INF ? 0.0f : e[i];
  sums.assign((V + SUM_BLOCK - 1) / SUM_BLOCK, 0.0);
  double total = 0.0;
  for (size_t b = 0; b < sums.size(); ++b) {
    const int64_t begin = b * SUM_BLOCK, end = std::min(V, begin + SUM_BLOCK);
    vf acc = zero();
    int64_t j = begin;
    for (; j + LANES <= end; j += LANES) acc = add(acc, load(e + j));
    double sum = reduce_add(acc);
    for (; j < end; ++j) sum += e[j];
    sums[b] = sum;
    total += sum;
  }
  return total;
}

int bucket_of(float e) {
  uint32_t bits;
  std::memcpy(&bits, &e, 4);
  return static_cast<int>(std::min<uint32_t>(bits >> 20, HISTOGRAM - 1));
}

// Keeps the nucleus: the most likely tokens until their mass reaches top_p (the first token
// whose inclusive mass reaches it is kept, and every token tied with it). The cut-off value is
// found in a histogram of e: the bucket where the mass from the top reaches top_p, then that
// bucket's own values, sorted.
void nucleus(float* x, int64_t V, float top_p, Scratch& s) {
  const float m = row_max(x, V);
  const double total = exponentiate(x, s.e.data(), V, m, s.sums);
  double mass[HISTOGRAM] = {};
  for (int64_t i = 0; i < V; ++i) mass[bucket_of(s.e[i])] += s.e[i];
  const double target = static_cast<double>(top_p) * total;
  double above = 0.0;
  int b = HISTOGRAM - 1;
  for (; b >= 0 && above + mass[b] < target; --b) above += mass[b];
  if (b < 0) return;  // the whole distribution is the nucleus (rounding): nothing to cut
  s.bucket.clear();
  for (int64_t i = 0; i < V; ++i)
    if (s.e[i] > 0.0f && bucket_of(s.e[i]) == b) s.bucket.push_back(s.e[i]);
  std::sort(s.bucket.begin(), s.bucket.end(), std::greater<float>());
  float cutoff = s.bucket.empty() ? 0.0f : s.bucket.back();
  for (const float v : s.bucket) {
    above += v;
    if (above >= target) {
      cutoff = v;
      break;
    }
  }
  for (int64_t i = 0; i < V; ++i) x[i] = s.e[i] < cutoff ? NEG_INF : x[i];
}

// The token where the cumulative mass of softmax(x) first reaches (1 - u) of the total, u in
// [0, 1): a token with zero probability is never picked.
int64_t draw(const float* x, int64_t V, float u, Scratch& s) {
  const double total = exponentiate(x, s.e.data(), V, row_max(x, V), s.sums);
  const double target = (1.0 - static_cast<double>(u)) * total;
  double mass = 0.0;
  for (size_t b = 0; b < s.sums.size(); ++b) {
    if (mass + s.sums[b] < target) {
      mass += s.sums[b];
      continue;
    }
    const int64_t begin = b * SUM_BLOCK, end = std::min(V, begin + SUM_BLOCK);
    for (int64_t i = begin; i < end; ++i) {
      mass += s.e[i];
      if (s.e[i] > 0.0f && mass >= target) return i;
    }
  }
  for (int64_t i = V - 1; i > 0; --i)  // not reached by rounding: the last token that can be drawn
    if (s.e[i] > 0.0f) return i;
  return 0;
}

// One row's history: its prompt tokens (read by the repetition penalty only), then its output's.
struct History {
  const int64_t* prompt;
  int64_t n_prompt;
  const int64_t* output;
  int64_t n_output;
};

// x = the row's logits as the draw sees them: penalties, then temperature, top-k, top-p and
// min-p (-inf where excluded). Returns false for a greedy row or a broken one (NaN or
// infinite logits), whose x holds the penalized logits only.
bool process_row(const float* logits, float* x, int64_t V, const float* p, const History& h, Scratch& s) {
  std::copy_n(logits, V, x);
  penalize(x, p, h.prompt, h.n_prompt, h.output, h.n_output, s);
  if (p[TEMPERATURE] == 0.0f || !all_finite(x, V)) return false;
  if (p[TEMPERATURE] != 1.0f)
    for (int64_t i = 0; i < V; ++i) x[i] = x[i] / p[TEMPERATURE];
  const int64_t k = static_cast<int64_t>(p[TOP_K]);
  if (k > 0 && k < V) {
    std::copy_n(x, V, s.e.data());
    std::nth_element(s.e.begin(), s.e.begin() + (k - 1), s.e.begin() + V, std::greater<float>());
    mask_below(x, V, s.e[k - 1]);
  }
  if (p[TOP_P] < 1.0f) nucleus(x, V, p[TOP_P], s);
  if (p[MIN_P] > 0.0f) mask_below(x, V, row_max(x, V) + std::log(p[MIN_P]));
  return true;
}

// What both entry points take: logits [B, V], params [B, PARAMS], and each row's history: its
// spans [B, 2] (prompt entries, output entries) of the flat history [H], rows in order.
void check_rows(const at::Tensor& logits, const at::Tensor& params, const at::Tensor& history,
                const at::Tensor& spans) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.is_contiguous() &&
                  logits.size(1) > 0,
              "logits must be a contiguous float32 [B, V] with V > 0");
  const int64_t B = logits.size(0), V = logits.size(1);
  TORCH_CHECK(params.dim() == 2 && params.scalar_type() == at::kFloat && params.is_contiguous() &&
                  params.size(0) == B && params.size(1) == PARAMS,
              "params must be a contiguous float32 [B, 8]");
  TORCH_CHECK(spans.dim() == 2 && spans.scalar_type() == at::kLong && spans.is_contiguous() && spans.size(0) == B &&
                  spans.size(1) == 2,
              "spans must be a contiguous int64 [B, 2]: each row's prompt and output entries");
  TORCH_CHECK(history.dim() == 1 && history.scalar_type() == at::kLong && history.is_contiguous(),
              "history must be a contiguous int64 [H]");
  const int64_t* span = spans.data_ptr<int64_t>();
  int64_t entries = 0;
  for (int64_t i = 0; i < 2 * B; ++i) {
    TORCH_CHECK(span[i] >= 0, "spans must not be negative");
    entries += span[i];
  }
  TORCH_CHECK(entries == history.numel(), "spans cover ", entries, " history entries, not ", history.numel());
  const int64_t* h = history.data_ptr<int64_t>();
  for (int64_t i = 0; i < history.numel(); ++i)
    TORCH_CHECK(h[i] >= 0 && h[i] < V, "a history token lies outside the vocabulary");
}

// row(r, its history, scratch) for every row of checked inputs, rows split between threads, each
// thread with its own scratch rows.
template <typename Row>
void for_each_row(const at::Tensor& logits, const at::Tensor& history, const at::Tensor& spans, Row&& row) {
  const int64_t B = logits.size(0), V = logits.size(1);
  const int64_t* h = history.data_ptr<int64_t>();
  const int64_t* span = spans.data_ptr<int64_t>();
  std::vector<int64_t> starts(B + 1, 0);
  for (int64_t r = 0; r < B; ++r) starts[r + 1] = starts[r] + span[2 * r] + span[2 * r + 1];
  at::parallel_for(0, B, 1, [&](int64_t r0, int64_t r1) {
    thread_local Scratch scratch;
    scratch.fit(V);
    for (int64_t r = r0; r < r1; ++r) {
      const History rh{h + starts[r], span[2 * r], h + starts[r] + span[2 * r], span[2 * r + 1]};
      row(r, rh, scratch);
    }
  });
}

}  // namespace

at::Tensor sample_rows(const at::Tensor& logits, const at::Tensor& params, const at::Tensor& history,
                       const at::Tensor& spans) {
  check_rows(logits, params, history, spans);
  at::Tensor out = at::empty({logits.size(0)}, logits.options().dtype(at::kLong));
  const int64_t V = logits.size(-1);
  const float* x = logits.data_ptr<float>();
  const float* p = params.data_ptr<float>();
  int64_t* tokens = out.data_ptr<int64_t>();
  for_each_row(logits, history, spans, [&](int64_t r, const History& h, Scratch& s) {
    float* row = s.x.data();
    const bool drawn = process_row(x + r * V, row, V, p + r * PARAMS, h, s);
    tokens[r] = drawn ? draw(row, V, p[r * PARAMS + UNIFORM], s) : row_argmax(row, V);
  });
  return out;
}

at::Tensor process_rows(const at::Tensor& logits, const at::Tensor& params, const at::Tensor& history,
                        const at::Tensor& spans) {
  check_rows(logits, params, history, spans);
  at::Tensor out = at::empty_like(logits);
  const int64_t V = logits.size(-1);
  const float* x = logits.data_ptr<float>();
  const float* p = params.data_ptr<float>();
  float* processed = out.data_ptr<float>();
  for_each_row(logits, history, spans, [&](int64_t r, const History& h, Scratch& s) {
    process_row(x + r * V, processed + r * V, V, p + r * PARAMS, h, s);
  });
  return out;
}

}  // namespace lfm_kernels
