// The work between the linear layers, one pass per group of ops, over cpu_vec.h's vector layer.
//
// Why: a 1-stream bf16 decode step spends ~22 ms in its linears. The rest (RMSNorms, the
// residual adds, SwiGLU's gate, the short conv, q/k norms, RoPE, the KV write) touches only
// kilobytes, yet as ~730 separate ATen ops it cost another ~6 ms of dispatch, allocation and
// passes over memory. Each function here replaces one group of those ops.
//
// Each rounds to bf16 exactly where model/arch/layers.py's PyTorch code does, and multiplies and
// adds in the same order (built with -ffp-contract=off, so no FMA sneaks in). Results match
// that code bit for bit except the RMSNorms, whose mean of squares is summed in another order
// (a last-bit difference in that fp32 sum, now and then a bf16 ulp in the output).
// Every token row is computed alone: a row's result never depends on the rest of the batch.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "cpu_vec.h"

namespace lfm_kernels {
namespace {

using namespace vec;

// Rows per parallel task: fewer rows than this run inline, since starting a parallel region
// costs more than normalizing a few decode rows.
constexpr int64_t ROWS_PER_TASK = 32;
constexpr int64_t MAX_HEAD_DIM = 256;

void check_bf16(const at::Tensor& t, int64_t dims, const char* what) {
  TORCH_CHECK(t.dim() == dims && t.is_contiguous() && t.scalar_type() == at::kBFloat16, what);
}

void check_index(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kLong && t.is_contiguous(), what);
}

void check_range(const at::Tensor& t, int64_t end, const char* what) {
  const int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) TORCH_CHECK(p[i] >= 0 && p[i] < end, what);
}

// out = weight * bf16(x * rsqrt(mean(x^2) + eps)), rounded to bf16: RMSNorm.forward for one row.
void rms_norm_row(const bf16* x, const bf16* weight, bf16* out, int64_t n, float eps) {
  vf sum = zero();
  for (int64_t i = 0; i < n; i += LANES) {
    const vf v = load_bf16(x + i, n - i);
    sum = add(sum, mul(v, v));
  }
  const vf inv = set1(1.0f / std::sqrt(reduce_add(sum) / static_cast<float>(n) + eps));
  for (int64_t i = 0; i < n; i += LANES) {
    const vf normed = round_bf16(mul(load_bf16(x + i, n - i), inv));
    store_bf16(out + i, mul(load_bf16(weight + i, n - i), normed), n - i);
  }
}

}  // namespace

// hidden [T, n] bf16, delta [T, n] or None, weight [n] -> normed [T, n].
// With delta, `hidden += delta` first, in place (the decoder's residual connection).
at::Tensor add_rms_norm(at::Tensor& hidden, const std::optional<at::Tensor>& delta,
                        const at::Tensor& weight, double eps) {
  check_bf16(hidden, 2, "hidden: contiguous bf16 [T, n]");
  const int64_t T = hidden.size(0), n = hidden.size(1);
  check_bf16(weight, 1, "weight: bf16 [n]");
  TORCH_CHECK(weight.size(0) == n, "weight must match the hidden size");
  if (delta) {
    check_bf16(*delta, 2, "delta: contiguous bf16 [T, n]");
    TORCH_CHECK(delta->sizes() == hidden.sizes(), "delta must have hidden's shape");
  }
  auto out = at::empty_like(hidden);
  bf16* h = hidden.data_ptr<bf16>();
  const bf16* d = delta ? delta->data_ptr<bf16>() : nullptr;
  const bf16* w = weight.data_ptr<bf16>();
  bf16* o = out.data_ptr<bf16>();
  const float feps = static_cast<float>(eps);
  at::parallel_for(0, T, ROWS_PER_TASK, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      bf16* row = h + t * n;
      if (d != nullptr) {
        for (int64_t i = 0; i < n; i += LANES)
          store_bf16(row + i, add(load_bf16(row + i, n - i), load_bf16(d + t * n + i, n - i)), n - i);
      }
      rms_norm_row(row, w, o + t * n, n, feps);
    }
  });
  return out;
}

// gate_up [T, 2F] bf16 (w13's output: gate then up) -> silu(gate) * up [T, F], each rounded to bf16.
at::Tensor swiglu(const at::Tensor& gate_up) {
  check_bf16(gate_up, 2, "gate_up: contiguous bf16 [T, 2F]");
  TORCH_CHECK(gate_up.size(1) % 2 == 0, "gate_up needs an even width");
  const int64_t T = gate_up.size(0), F = gate_up.size(1) / 2;
  auto out = at::empty({T, F}, gate_up.options());
  const bf16* in = gate_up.data_ptr<bf16>();
  bf16* o = out.data_ptr<bf16>();
  const vf one = set1(1.0f);
  at::parallel_for(0, T, ROWS_PER_TASK, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const bf16* gate = in + t * 2 * F;
      for (int64_t i = 0; i < F; i += LANES) {
        const vf g = load_bf16(gate + i, F - i);
        // g / (1 + exp(-g)) as PyTorch computes it; for g < 0 the same over exp(g): exp never overflows
        const vf e = exp_nonpositive(sub(zero(), vec::abs(g)));
        const vf numerator = select_negative(g, mul(g, e), g);
        const vf silu = round_bf16(div(numerator, add(one, e)));
        store_bf16(o + t * F + i, mul(silu, load_bf16(gate + F + i, F - i)), F - i);
      }
    }
  });
  return out;
}

// LFM2's short conv between in_proj and out_proj (ShortConv.forward in model/arch/layers.py).
// bcx [T, 3h] bf16: B, C, x. state [R, S, h] bf16 with S = L - 1; taps [L, h] fp32.
// ext = [state rows of src_rows (B * S entries) | bx = B * x (T entries)]; token t's conv
// reads ext[window[t, 0..L)]; state[write_rows[w]] = ext[write_index[w]] after all reads.
// Returns C * bf16(conv (+ bias)) [T, h].
at::Tensor short_conv(const at::Tensor& bcx, at::Tensor& state, const at::Tensor& taps,
                      const std::optional<at::Tensor>& bias, const at::Tensor& src_rows,
                      const at::Tensor& window, const at::Tensor& write_index,
                      const at::Tensor& write_rows) {
  check_bf16(bcx, 2, "bcx: contiguous bf16 [T, 3h]");
  check_bf16(state, 3, "state: contiguous bf16 [rows, L-1, h]");
  const int64_t T = bcx.size(0), h = bcx.size(1) / 3, R = state.size(0), S = state.size(1);
  TORCH_CHECK(bcx.size(1) == 3 * h && state.size(2) == h, "bcx must be [T, 3h] and state [rows, L-1, h]");
  TORCH_CHECK(taps.dim() == 2 && taps.is_contiguous() && taps.scalar_type() == at::kFloat &&
                  taps.size(0) == S + 1 && taps.size(1) == h,
              "taps: contiguous fp32 [L, h]");
  if (bias) {
    check_bf16(*bias, 1, "bias: bf16 [h]");
    TORCH_CHECK(bias->size(0) == h, "bias: bf16 [h]");
  }
  for (const auto* t : {&src_rows, &window, &write_index, &write_rows}) check_index(*t, "conv indices: int64");
  const int64_t B = src_rows.numel(), L = S + 1, W = write_rows.numel(), ext_state = B * S;
  TORCH_CHECK(window.dim() == 2 && window.size(0) == T && window.size(1) == L, "window: [T, L]");
  TORCH_CHECK(write_index.dim() == 2 && write_index.size(0) == W && write_index.size(1) == S, "write_index: [W, L-1]");
  check_range(src_rows, R, "a source row lies outside the conv state");
  check_range(write_rows, R, "a write row lies outside the conv state");
  check_range(window, ext_state + T, "a conv window reaches outside its sequence");
  check_range(write_index, ext_state + T, "a state write reads outside its sequence");

  auto bx = at::empty({T, h}, bcx.options());
  auto out = at::empty({T, h}, bcx.options());
  const bf16* in = bcx.data_ptr<bf16>();
  bf16* st = state.data_ptr<bf16>();
  bf16* bxp = bx.data_ptr<bf16>();
  bf16* o = out.data_ptr<bf16>();
  const float* tp = taps.data_ptr<float>();
  const bf16* bp = bias ? bias->data_ptr<bf16>() : nullptr;
  const int64_t* src = src_rows.data_ptr<int64_t>();
  const int64_t* win = window.data_ptr<int64_t>();
  auto entry = [&](int64_t e) -> const bf16* {
    return e < ext_state ? st + (src[e / S] * S + e % S) * h : bxp + (e - ext_state) * h;
  };

  at::parallel_for(0, T, ROWS_PER_TASK, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t i = 0; i < h; i += LANES) {
        const bf16* row = in + t * 3 * h;
        store_bf16(bxp + t * h + i, mul(load_bf16(row + i, h - i), load_bf16(row + 2 * h + i, h - i)), h - i);
      }
  });
  at::parallel_for(0, T, ROWS_PER_TASK, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t i = 0; i < h; i += LANES) {
        const int64_t m = h - i;
        vf acc = zero();
        for (int64_t j = 0; j < L; ++j)
          acc = add(acc, mul(load_bf16(entry(win[t * L + j]) + i, m), load(tp + j * h + i, m)));
        if (bp != nullptr) acc = add(acc, load_bf16(bp + i, m));
        const vf c = load_bf16(in + t * 3 * h + h + i, m);
        store_bf16(o + t * h + i, mul(c, round_bf16(acc)), m);
      }
  });
  // A state row may be read above and written here (its sequence's own row): gather first.
  const int64_t* widx = write_index.data_ptr<int64_t>();
  const int64_t* wrow = write_rows.data_ptr<int64_t>();
  std::vector<bf16> gathered(W * S * h);
  for (int64_t e = 0; e < W * S; ++e) std::copy_n(entry(widx[e]), h, gathered.data() + e * h);
  for (int64_t w = 0; w < W; ++w) std::copy_n(gathered.data() + w * S * h, S * h, st + wrow[w] * S * h);
  return out;
}

// Attention's input side (Attention.forward before the attention itself), for every token:
// qkv [T, (H + 2 Hkv) D] bf16 -> per-head RMSNorm of q and k (weights [D]), RoPE at
// positions[t] from fp32 tables cos/sin [P, D/2]; k and v are written to their cache slots
// (k_cache, v_cache [slots, Hkv, D]), and q [T, H, D] is returned.
at::Tensor attention_prep(const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight,
                          double eps, const at::Tensor& cos, const at::Tensor& sin,
                          const at::Tensor& positions, at::Tensor& k_cache, at::Tensor& v_cache,
                          const at::Tensor& write_slots, int64_t heads) {
  check_bf16(qkv, 2, "qkv: contiguous bf16 [T, (H + 2 Hkv) D]");
  check_bf16(k_cache, 3, "k_cache: contiguous bf16 [slots, Hkv, D]");
  check_bf16(v_cache, 3, "v_cache: contiguous bf16 [slots, Hkv, D]");
  TORCH_CHECK(v_cache.sizes() == k_cache.sizes(), "k_cache and v_cache must have one shape");
  const int64_t T = qkv.size(0), Hkv = k_cache.size(1), D = k_cache.size(2), half = D / 2, slots = k_cache.size(0);
  TORCH_CHECK(D % 2 == 0 && D <= MAX_HEAD_DIM, "head_dim must be even and at most 256");
  TORCH_CHECK(qkv.size(1) == (heads + 2 * Hkv) * D, "qkv width must be (heads + 2 kv_heads) * head_dim");
  check_bf16(q_weight, 1, "q_weight: bf16 [D]");
  check_bf16(k_weight, 1, "k_weight: bf16 [D]");
  TORCH_CHECK(q_weight.size(0) == D && k_weight.size(0) == D, "norm weights must be [head_dim]");
  for (const auto* t : {&cos, &sin})
    TORCH_CHECK(t->dim() == 2 && t->is_contiguous() && t->scalar_type() == at::kFloat && t->size(1) == half &&
                    t->size(0) == cos.size(0),
                "cos, sin: contiguous fp32 [positions, D/2]");
  check_index(positions, "positions: int64 [T]");
  check_index(write_slots, "write_slots: int64 [T]");
  TORCH_CHECK(positions.numel() == T && write_slots.numel() == T, "one position and one slot per token");
  check_range(positions, cos.size(0), "a position lies past the rotary table");
  check_range(write_slots, slots, "a KV slot lies outside the pool");

  auto q = at::empty({T, heads, D}, qkv.options());
  const bf16* in = qkv.data_ptr<bf16>();
  const bf16* qw = q_weight.data_ptr<bf16>();
  const bf16* kw = k_weight.data_ptr<bf16>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const int64_t* pos = positions.data_ptr<int64_t>();
  const int64_t* slot = write_slots.data_ptr<int64_t>();
  bf16* qp = q.data_ptr<bf16>();
  bf16* kc = k_cache.data_ptr<bf16>();
  bf16* vc = v_cache.data_ptr<bf16>();
  const float feps = static_cast<float>(eps);
  const int64_t width = qkv.size(1);

  at::parallel_for(0, T, ROWS_PER_TASK, [&](int64_t t0, int64_t t1) {
    bf16 normed[MAX_HEAD_DIM];
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = cp + pos[t] * half;
      const float* s = sp + pos[t] * half;
      for (int64_t head = 0; head < heads + Hkv; ++head) {
        const bool is_q = head < heads;
        rms_norm_row(in + t * width + head * D, is_q ? qw : kw, normed, D, feps);
        bf16* dst = is_q ? qp + (t * heads + head) * D : kc + (slot[t] * Hkv + head - heads) * D;
        for (int64_t i = 0; i < half; ++i) {  // rotate-half RoPE in fp32, as apply_rotary does
          const float x1 = normed[i], x2 = normed[i + half];
          dst[i] = bf16(x1 * c[i] - x2 * s[i]);
          dst[i + half] = bf16(x2 * c[i] + x1 * s[i]);
        }
      }
      std::copy_n(in + t * width + (heads + Hkv) * D, Hkv * D, vc + slot[t] * Hkv * D);
    }
  });
  return q;
}

}  // namespace lfm_kernels
