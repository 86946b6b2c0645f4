// carto/runtime/executor/einsum.hpp — a local einsum of two operands through the backend's GEMM.
//
// Design note (DESIGN.md §7). The letters of the output that are in both operands are batch
// letters, those in A only are m, those in B only are n; the letters of both operands missing from
// the output are contracted (k). A letter summed out of one operand alone is an error: only
// contractions between both operands run. An operand already ordered (batch, m, k) or (batch, k, m)
// — B (batch, k, n) or (batch, n, k) — goes to the GEMM as it is, with a transpose flag; any other
// order is permuted into a temporary first. The output is written in place when it is ordered
// (batch, m, n), or (batch, n, m) as Cᵀ = Bᵀ·Aᵀ; otherwise through a temporary and a permuting
// copy. `accumulate` adds to C (β = 1), which backward uses to sum into an input gradient.
// Dtypes: the operands and C may be fp32 or bf16 (the GEMM accumulates in fp32 and rounds once
// on a bf16 store); a permuted operand keeps its dtype, and a permuted output goes through a
// temporary of C's dtype (so a bf16 C is rounded there, then added in fp32 and rounded again).
#pragma once

#include "carto/runtime/executor/executor_class.hpp"

namespace carto {

// C (=, +=) einsum(la·A, lb·B -> lc). Letters: batch (A, B, C), m (A, C), n (B, C), k (A, B).
inline void Executor::local_einsum(const IndexLetters& la, ConstTensorView A,
                                   const IndexLetters& lb, ConstTensorView B,
                                   const IndexLetters& lc, TensorView C, bool accumulate) {
  std::string batch, m, n, kk;
  auto has = [](const IndexLetters& l, char c) { return contains(l, c); };
  for (char c : lc) {
    if (has(la, c) && has(lb, c))
      batch += c;
    else if (has(la, c))
      m += c;
    else if (has(lb, c))
      n += c;
    else
      detail::fail("carto: einsum output letter '", c, "' is in no operand");
  }
  for (char c : la) {
    if (has(lb, c) && !has(lc, c))
      kk += c;
    else if (!has(lb, c) && !has(lc, c))
      detail::fail("carto: the executor's einsum sums letter '", c,
                   "' of one operand; only contractions between both operands run");
  }
  for (char c : lb) {
    if (!has(la, c) && !has(lc, c))
      detail::fail("carto: the executor's einsum sums letter '", c,
                   "' of one operand; only contractions between both operands run");
  }
  auto extent_of = [&](char c) -> std::int64_t {
    for (std::size_t d = 0; d < la.size(); ++d)
      if (la[d] == c) return A.shape().dims()[d].extent;
    for (std::size_t d = 0; d < lb.size(); ++d)
      if (lb[d] == c) return B.shape().dims()[d].extent;
    return 1;
  };
  auto prod = [&](const std::string& ls) {
    std::int64_t p = 1;
    for (char c : ls) p *= extent_of(c);
    return p;
  };
  const std::int64_t nb = prod(batch), M = prod(m), N = prod(n), K = prod(kk);
  auto letters = [](const IndexLetters& l) { return std::string(l.begin(), l.end()); };
  const std::string sa = letters(la), sb = letters(lb), sc = letters(lc);

  // Operand A as (batch, M, K) or (batch, K, M).
  std::shared_ptr<Buffer> a_tmp, b_tmp;
  Transpose ta = Transpose::no, tb = Transpose::no;
  ConstTensorView a = A, b = B;
  if (sa == batch + m + kk) {
  } else if (sa == batch + kk + m) {
    ta = Transpose::yes;
  } else {
    a_tmp = permuted(A, sa, batch + m + kk);
    a = a_tmp->view(permuted_shape(A.shape(), sa, batch + m + kk), A.dtype());
  }
  if (sb == batch + kk + n) {
  } else if (sb == batch + n + kk) {
    tb = Transpose::yes;
  } else {
    b_tmp = permuted(B, sb, batch + kk + n);
    b = b_tmp->view(permuted_shape(B.shape(), sb, batch + kk + n), B.dtype());
  }
  auto shape3 = [&](std::int64_t r, std::int64_t c) {
    return nb > 1 || !batch.empty() ? TensorShape{{"batch", nb}, {"rows", r}, {"cols", c}}
                                    : TensorShape{{"rows", r}, {"cols", c}};
  };
  const TensorShape a_shape = ta == Transpose::no ? shape3(M, K) : shape3(K, M);
  const TensorShape b_shape = tb == Transpose::no ? shape3(K, N) : shape3(N, K);
  const GemmArgs args{.a = ta, .b = tb, .alpha = 1.0f, .beta = accumulate ? 1.0f : 0.0f};
  if (sc == batch + m + n) {
    be_.gemm(reshaped(a, a_shape), reshaped(b, b_shape), reshaped(C, shape3(M, N)), args);
  } else if (sc == batch + n + m) {  // Cᵀ = Bᵀ Aᵀ
    const GemmArgs swapped{.a = tb == Transpose::no ? Transpose::yes : Transpose::no,
                           .b = ta == Transpose::no ? Transpose::yes : Transpose::no,
                           .alpha = 1.0f,
                           .beta = args.beta};
    be_.gemm(reshaped(b, b_shape), reshaped(a, a_shape), reshaped(C, shape3(N, M)), swapped);
  } else {
    const std::string canon = batch + m + n;
    const TensorShape cs = permuted_shape(C.shape, sc, canon);
    auto c_tmp = allocate(cs, C.dtype, MemoryCategory::temporaries);
    be_.gemm(reshaped(a, a_shape), reshaped(b, b_shape),
             reshaped(c_tmp->view(cs, C.dtype), shape3(M, N)),
             {.a = ta, .b = tb, .alpha = 1.0f, .beta = 0.0f});
    // C[sc order] (=, +=) c_tmp[canon order].
    copy_permuted(c_tmp->view(cs, C.dtype), canon, C, sc,
                  accumulate ? CopyMode::accumulate : CopyMode::assign);
  }
}

// The shape of `x` (letters `from`) permuted to letters `to`.
inline TensorShape Executor::permuted_shape(const TensorShape& x, const std::string& from,
                                            const std::string& to) {
  TensorShape out;
  for (char c : to) out.push_back(x.dims()[from.find(c)]);
  return out;
}

inline std::shared_ptr<Buffer> Executor::permuted(ConstTensorView x, const std::string& from,
                                                  const std::string& to) {
  const TensorShape shape = permuted_shape(x.shape(), from, to);
  auto out = allocate(shape, x.dtype(), MemoryCategory::temporaries);
  copy_permuted(x, from, out->view(shape, x.dtype()), to, CopyMode::assign);
  return out;
}

// dst (letters `to`) (=, +=) src (letters `from`), walking dst's index space.
inline void Executor::copy_permuted(ConstTensorView src, const std::string& from, TensorView dst,
                                    const std::string& to, CopyMode mode) {
  const TensorShape& ss = src.shape();
  Index src_strides = exec_detail::filled(ss.rank(), 1);
  for (std::size_t d = ss.rank(); d-- > 1;)
    src_strides[d - 1] = src_strides[d] * ss.dims()[d].extent;
  StridedBox from_box{.offset = 0, .strides = {}};
  Index extents;
  for (char c : to) {
    const std::size_t d = from.find(c);
    from_box.strides.push_back(src_strides[d]);
    extents.push_back(ss.dims()[d].extent);
  }
  const StridedBox to_box =
      box_of(dst.shape, {.offset = exec_detail::filled(to.size(), 0), .extent = extents});
  be_.copy_strided(src, from_box, dst, to_box, extents, mode);
}

}  // namespace carto
