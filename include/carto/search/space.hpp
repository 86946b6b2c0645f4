// carto/search/space.hpp — the stated search spaces: which strategies an op may use, which reads
// must take the stored spec, and which transformer blocks share one layout.
//
// Design note (DESIGN.md §6). A search is exact with respect to a stated space; the Plan names it.
//  - SearchSpace::full: every strategy of every op (or the subset the pins leave), every block
//    laid out on its own with its own checkpoint flag. The one restriction (reads_stored_spec):
//    a view reads its input as stored, and gelu, dropout, bias and scale read their input as
//    stored unless it is Partial (rotary unless it splits the head dim). The
//    reference space, for small problems.
//  - SearchSpace::standard (the default), the full space narrowed by four stated rules:
//    1. mesh order: a dim split over several axes lists them in mesh order (outermost first),
//       in every input and output spec of a strategy (mesh_order_filter);
//    2. stored reads: the add also reads its first input (the residual stream) as stored unless
//       it is Partial, as the elementwise ops do;
//    3. shared layouts: the consecutive identical transformer blocks of a chain (block_chains)
//       share one layout per checkpoint class. The first k blocks of the chain are checkpointed
//       (Megatron-LM's `--recompute-method block` convention) and the search picks k. A class's
//       blocks all run one layout σ and receive the residual in σ's output spec; only the first
//       block of a class, when it receives the residual in another spec (from the op before the
//       chain or from the other class — with rule 2 only a Partial residual can differ), runs a
//       layout of its own τ whose output spec is σ's. A class of one block runs any layout.
//       Blocks outside a chain (not identical to their neighbours, or reading tensors from
//       before them) and the ops before and after the chains are searched freely.
//    4. untied embeddings: a gather whose table no other op reads (an untied input embedding,
//       Llama's) does not split the vocabulary (untied_vocab_split). Its table is sharded as
//       well over the hidden dim, and the residual stream then never enters a chain Partial,
//       so no first block τ is searched from a Partial spec (those held nine tenths of a 3-axis
//       Llama3-8B DP's labels). A tied table (GPT's, read again by the LM head) keeps the split.
//    Measured on GPT-3 blocks (docs/search-performance.md), rules 1 and 2 cost at most 0.13 % of
//    block time; rule 3 is Megatron-LM's practice of one layout per layer; rule 4 cost at most
//    0.6 % of the least step time of Llama3-8B on the 64-device meshes.
// Tests compare the DP in each space with a brute force that enumerates exactly that space
// (tests/support/brute_force.hpp), and the price of the standard space against the full one.
//
// Op names: "<group>.<kind><n>", n counting ops of that kind within the group (block.3.einsum0 is
// the fused QKV projection of block 3). A pin "NAME=SPEC" keeps only the strategies of the named
// op whose output spec is SPEC; '*' in NAME matches any text (block.*.einsum0). A pin naming no
// op, or leaving an op without strategies on some mesh, is an error that names the pin.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/search/strategy.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/sharding.hpp"
#include "carto/spec/text.hpp"

namespace carto {

enum class SearchSpace : std::uint8_t { standard, full };

constexpr std::string_view to_string_view(SearchSpace s) {
  return s == SearchSpace::full ? "full" : "standard";
}

// "standard" or "full"; anything else is an error naming both.
inline SearchSpace parse_search_space(std::string_view text) {
  if (text == "standard") return SearchSpace::standard;
  if (text == "full") return SearchSpace::full;
  detail::fail("carto: search space '", text, "' does not exist; use standard or full");
}

// The strategies each op may use: all of enumerate_strategies, or a subset (pins). allowed[k] lists
// indices into enumerate_strategies(g, k, mesh) order; empty = all.
struct StrategyFilter {
  std::vector<std::vector<std::size_t>> allowed{};
};

// "block.3.einsum0" for every op, in graph order.
inline std::vector<std::string> op_names(const Graph& g) {
  std::vector<std::string> names(g.num_ops());
  for (std::size_t gi = 0; gi < g.groups().size(); ++gi) {
    const OpGroup& grp = g.groups()[gi];
    std::map<OpKind, int> count;
    for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
      const OpKind kind = g.ops()[static_cast<std::size_t>(k)].kind;
      names[static_cast<std::size_t>(k)] =
          detail::concat(grp.name, '.', to_string_view(kind), count[kind]++);
    }
  }
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (names[k].empty()) names[k] = detail::concat("op", k, '.', to_string_view(g.ops()[k].kind));
  }
  return names;
}

struct Pin {
  std::string op;    // a name, '*' matching any text
  std::string spec;  // the output spec text
};

inline Pin parse_pin(std::string_view text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size()) {
    detail::fail("carto: pin '", text, "' is not OP=SPEC (e.g. block.*.einsum0=R,R,S(tp))");
  }
  Pin p{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
  (void)parse_spec(p.spec);  // fails naming the position
  return p;
}

namespace detail {
inline bool glob_match(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern[0] == '*') {
    for (std::size_t i = 0; i <= text.size(); ++i) {
      if (glob_match(pattern.substr(1), text.substr(i))) return true;
    }
    return false;
  }
  return !text.empty() && pattern[0] == text[0] && glob_match(pattern.substr(1), text.substr(1));
}
}  // namespace detail

// The filter the pins give on one mesh; throws naming a pin that matches no op or no strategy.
inline StrategyFilter pin_filter(const Graph& g, const DeviceMesh& mesh,
                                 const std::vector<Pin>& pins, const StrategyOptions& sopt = {}) {
  StrategyFilter f;
  if (pins.empty()) return f;
  f.allowed.resize(g.num_ops());
  const std::vector<std::string> names = op_names(g);
  StrategyCache cache(mesh, sopt);
  for (const Pin& pin : pins) {
    const ShardingSpec want = parse_spec(pin.spec);
    bool any = false;
    for (std::size_t k = 0; k < g.num_ops(); ++k) {
      if (!detail::glob_match(pin.op, names[k])) continue;
      any = true;
      const std::vector<Strategy>& all = cache.of(g, OpId{static_cast<std::int32_t>(k)});
      std::vector<std::size_t> keep;
      const std::vector<std::size_t> before = f.allowed[k];
      for (std::size_t i = 0; i < all.size(); ++i) {
        const bool allowed =
            before.empty() || std::find(before.begin(), before.end(), i) != before.end();
        if (allowed && all[i].sharding.output == want) keep.push_back(i);
      }
      if (keep.empty()) {
        detail::fail("carto: pin '", pin.op, '=', pin.spec, "' leaves op ", names[k], " (",
                     to_string_view(g.ops()[k].kind), ", output ",
                     g.tensor(g.ops()[k].output).shape, ") without a strategy on mesh ", mesh,
                     "; pin an output spec it can produce");
      }
      f.allowed[k] = keep;
    }
    if (!any)
      detail::fail("carto: pin '", pin.op, '=', pin.spec,
                   "' names no op; op names look like block.0.einsum0");
  }
  return f;
}

// Whether every dim of `spec` that is split over several axes lists them in mesh order (outermost
// first).
inline bool axes_in_mesh_order(const ShardingSpec& spec, const DeviceMesh& mesh) {
  for (const AxisList& dim : spec.dims()) {
    for (std::size_t i = 1; i < dim.size(); ++i) {
      if (mesh.index_of(dim[i - 1]) > mesh.index_of(dim[i])) return false;
    }
  }
  return true;
}

// Whether every input and output spec of `s` keeps a dim's axes in mesh order (rule 1).
inline bool in_mesh_order(const Strategy& s, const DeviceMesh& mesh) {
  if (!axes_in_mesh_order(s.sharding.output, mesh)) return false;
  return std::all_of(s.sharding.inputs.begin(), s.sharding.inputs.end(),
                     [&](const ShardingSpec& in) { return axes_in_mesh_order(in, mesh); });
}

// Rule 4: whether `s`, a strategy of op k, splits the vocabulary of an untied gather's table
// (one no other op reads): such strategies are not in the standard space.
inline bool untied_vocab_split(const Graph& g, std::size_t k, const Strategy& s) {
  const Op& op = g.ops()[k];
  if (op.kind != OpKind::gather || s.sharding.inputs.empty() ||
      s.sharding.inputs[0].dims().empty() || s.sharding.inputs[0].dims()[0].empty())
    return false;
  const TensorId table = op.inputs[0];
  for (std::size_t j = 0; j < g.num_ops(); ++j) {
    if (j == k) continue;
    const auto& in = g.ops()[j].inputs;
    if (std::find(in.begin(), in.end(), table) != in.end()) return false;  // tied
  }
  return true;
}

// `base` (all strategies, or the pins' subset) narrowed to the strategies in mesh order (rule 1 of
// the standard space). Tensors are then stored in such specs only; moves between them may still
// pass through others. An op left without a strategy (a pin that asks for another order) is an
// error naming it.
inline StrategyFilter mesh_order_filter(const Graph& g, const DeviceMesh& mesh, StrategyFilter base,
                                        const StrategyOptions& sopt = {}) {
  base.allowed.resize(g.num_ops());
  const std::vector<std::string> names = op_names(g);
  StrategyCache cache(mesh, sopt);
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const std::vector<Strategy>& all = cache.of(g, OpId{static_cast<std::int32_t>(k)});
    std::vector<std::size_t> from = base.allowed[k];
    if (from.empty()) {
      for (std::size_t i = 0; i < all.size(); ++i) from.push_back(i);
    }
    std::vector<std::size_t> keep;
    for (const std::size_t i : from) {
      if (in_mesh_order(all[i], mesh)) keep.push_back(i);
    }
    if (keep.empty()) {
      detail::fail("carto: op ", names[k],
                   " has no strategy left whose specs keep a dim's axes in mesh order on mesh ",
                   mesh,
                   "; drop the pin that asks for another order or search the full space "
                   "(SearchSpace::full)");
    }
    base.allowed[k] = std::move(keep);
  }
  return base;
}

namespace detail {

// The space's rule for the first input of an op when that input is an activation stored in spec
// `stored`: true when the op must read it in `stored`. Views always do (a view moves no data, so
// moving its input first costs what moving its output afterwards costs); gelu, dropout, bias and
// scale do unless `stored` is Partial (the producer picks the spec they run in; a move before
// such an op carries as many bytes as the same move after it, and a Partial input, which gelu,
// dropout and bias cannot read, may be read in any spec); rotary does too unless `stored` splits
// the head dim, which rotary cannot read (it is linear, so it reads a Partial input; its output
// has its input's shape and dtype, so the same argument holds); in the standard space the add does
// too (rule 2: its first input is the residual stream).
inline bool reads_stored_spec(OpKind kind, const ShardingSpec& stored, SearchSpace space) {
  switch (kind) {
    case OpKind::view: return true;
    case OpKind::gelu:
    case OpKind::dropout:
    case OpKind::bias:
    case OpKind::scale: return !stored.is_partial();
    case OpKind::rotary: return stored.dims().back().empty();
    case OpKind::add: return space == SearchSpace::standard && !stored.is_partial();
    default: return false;
  }
}

// The input of group gi: the first activation its ops read that was produced before the group.
inline TensorId group_input(const Graph& g, std::int32_t gi) {
  const OpGroup& grp = g.groups()[static_cast<std::size_t>(gi)];
  for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
    for (TensorId t : g.ops()[static_cast<std::size_t>(k)].inputs) {
      const TensorInfo& info = g.tensor(t);
      if (info.kind == TensorKind::activation && info.producer.valid() &&
          info.producer.value < grp.first_op) {
        return t;
      }
    }
  }
  return TensorId{};
}

// Whether block gi sees the rest of the graph only through its input: the input owns its buffer
// (its producer is no view, and no view of it from before the block is read from the block on),
// no other tensor from before the block is read inside it (a parameter or graph input first read
// before it, an activation other than the input), and nothing it produces is read after it
// except its last op's output.
inline bool self_contained_block(const Graph& g, std::int32_t gi) {
  const OpGroup& grp = g.groups()[static_cast<std::size_t>(gi)];
  const TensorId x = group_input(g, gi);
  if (!x.valid() || g.op(g.tensor(x).producer).kind == OpKind::view) return false;
  std::vector<std::int32_t> first_use(g.tensors().size(), -1);
  std::vector<std::int32_t> last_use(g.tensors().size(), -1);
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    for (TensorId t : g.ops()[k].inputs) {
      if (first_use[t.index()] < 0) first_use[t.index()] = static_cast<std::int32_t>(k);
      last_use[t.index()] = static_cast<std::int32_t>(k);
    }
  }
  for (std::size_t t = 0; t < g.tensors().size(); ++t) {  // a view of x from before the block
    const TensorInfo& info = g.tensors()[t];
    if (t != x.index() && info.storage == g.tensor(x).storage && info.producer.valid() &&
        info.producer.value < grp.first_op && last_use[t] >= grp.first_op)
      return false;
  }
  for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
    const Op& op = g.ops()[static_cast<std::size_t>(k)];
    if (k + 1 < grp.end_op && last_use[op.output.index()] >= grp.end_op) return false;
    for (TensorId t : op.inputs) {
      if (t == x) continue;
      const TensorInfo& info = g.tensor(t);
      if (info.producer.valid() && info.producer.value < grp.first_op) return false;
      if (!info.producer.valid() && first_use[t.index()] < grp.first_op) return false;
    }
  }
  return true;
}

// Whether groups a and b have the same ops, wiring (tensor ids shifted by one offset), shapes
// and allowed strategies (`allowed[k]`: op k's strategy indices).
inline bool same_structure(const Graph& g, const std::vector<std::vector<std::size_t>>& allowed,
                           std::int32_t a, std::int32_t b) {
  const OpGroup& ga = g.groups()[static_cast<std::size_t>(a)];
  const OpGroup& gb = g.groups()[static_cast<std::size_t>(b)];
  if (ga.end_op - ga.first_op != gb.end_op - gb.first_op) return false;
  const std::int32_t dt = group_input(g, b).value - group_input(g, a).value;
  for (std::int32_t i = 0; i < ga.end_op - ga.first_op; ++i) {
    const std::size_t ka = static_cast<std::size_t>(ga.first_op + i);
    const std::size_t kb = static_cast<std::size_t>(gb.first_op + i);
    const Op& x = g.ops()[ka];
    const Op& y = g.ops()[kb];
    if (x.kind != y.kind || x.inputs.size() != y.inputs.size() || x.dim != y.dim ||
        x.view != y.view || x.masking != y.masking || x.probability != y.probability ||
        x.factor != y.factor || !(x.einsum.output == y.einsum.output) ||
        !(x.einsum.inputs == y.einsum.inputs)) {
      return false;
    }
    if (y.output.value - x.output.value != dt) return false;
    if (allowed[ka] != allowed[kb]) return false;
    for (std::size_t j = 0; j < x.inputs.size(); ++j) {
      if (y.inputs[j].value - x.inputs[j].value != dt) return false;
      const TensorInfo& tx = g.tensor(x.inputs[j]);
      const TensorInfo& ty = g.tensor(y.inputs[j]);
      if (!(tx.shape == ty.shape) || tx.dtype != ty.dtype || tx.kind != ty.kind) return false;
    }
  }
  return true;
}

}  // namespace detail

// A run of consecutive identical transformer blocks (rule 3 of the standard space): groups
// first_group .. first_group + blocks - 1, each reading only the previous one's output.
struct BlockChain {
  std::int32_t first_group = 0;
  std::int32_t blocks = 0;
  friend bool operator==(const BlockChain&, const BlockChain&) = default;
};

// The chains of `g` when op k may use the strategies allowed[k] (one entry per op): every
// self-contained transformer block starts a chain or extends the previous one when it follows it
// directly (its input is the previous block's last output) with the same structure and allowed
// strategies.
inline std::vector<BlockChain> block_chains(const Graph& g,
                                            const std::vector<std::vector<std::size_t>>& allowed) {
  std::vector<BlockChain> chains;
  const auto& groups = g.groups();
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const auto i = static_cast<std::int32_t>(gi);
    if (groups[gi].kind != GroupKind::transformer_block || !detail::self_contained_block(g, i))
      continue;
    if (!chains.empty()) {
      BlockChain& c = chains.back();
      const std::int32_t last = c.first_group + c.blocks - 1;
      const OpGroup& prev = groups[static_cast<std::size_t>(last)];
      const bool follows =
          last + 1 == i && prev.end_op == groups[gi].first_op &&
          g.ops()[static_cast<std::size_t>(prev.end_op - 1)].output == detail::group_input(g, i);
      if (follows && detail::same_structure(g, allowed, c.first_group, i)) {
        ++c.blocks;
        continue;
      }
    }
    chains.push_back({.first_group = i, .blocks = 1});
  }
  return chains;
}

}  // namespace carto
