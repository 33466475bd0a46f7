// Greedy sampling's argmax over a step's float32 logits [B, V].
//
// Why: torch's CPU argmax over a 65k vocabulary is slow (engine/sampler.py works around it with
// block maxima in three ops), and in a 1-stream decode step those ops, run with caches cold
// from the weights streaming past, cost ~0.2 ms of an ~8 ms step. Here: one vectorized pass
// over blocks of the row, then a scan of the first block holding the maximum.
// The answer is torch.argmax's: the first index of the largest value, and the first NaN's
// index where a row holds a NaN.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <cstdint>
#include <limits>

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

}  // namespace lfm_kernels
