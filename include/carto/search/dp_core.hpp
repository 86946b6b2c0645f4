// carto/search/dp_core.hpp — one op at a time: a transformer block's checkpoint decision, an
// op's transitions from every state, and the end of a group.
//
// Design note (DESIGN.md §6). step() tries every choice of op k from every state; transition()
// prices one (the label-independent delta: moves in and out, regathers, saved bytes, the op's
// excursion, ZeRO-3 gathers, recompute in a checkpointed block) and builds the next state. The
// space's stored-read rule (search/space.hpp, reads_stored_spec) is applied there: an op whose
// first input must be read as stored only tries the choices that read the stored spec. Labels of
// each next state are filtered exactly in the standard space (with ε in the full space).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/search/dp_merge.hpp"
#include "carto/search/dp_state.hpp"
#include "carto/search/frontier.hpp"
#include "carto/search/gradient_memory.hpp"
#include "carto/search/model.hpp"
#include "carto/search/space.hpp"
#include "carto/util/static_vector.hpp"

namespace carto::detail {

class DpCore : public DpMerge {
 public:
  using DpMerge::DpMerge;

 protected:
  // ---- block entry: the checkpoint decision ----
  std::vector<bool> checkpoint_options() const {
    switch (m_.options().checkpoint) {
      case CheckpointChoice::none: return {false};
      case CheckpointChoice::all: return {true};
      case CheckpointChoice::search: return {false, true};
    }
    return {false};
  }

  Frontier enter_block(std::int32_t gi, const Frontier& in) {
    Frontier out;
    const TensorId x = block_input(gi);
    for (const auto& [state, labels] : in) {
      std::int64_t input_bytes = 0;
      for (const Live& l : state.live) {
        if (x.valid() && l.tensor == x.value) input_bytes = l.bytes;
      }
      for (const bool ckpt : checkpoint_options()) {
        State next = state;
        next.checkpoint = ckpt;
        next.checkpoint_input = ckpt ? input_bytes : 0;
        std::vector<Label>& dst = out[next];
        for (const Label& l : labels) {
          Label n = l;
          if (ckpt && !m_.options().least_time) {  // K_g: the input, kept to the backward
            n.base += input_bytes;
            n.kept += input_bytes;
            n.extra -= input_bytes;
          }
          n.trace = push_trace({.parent = l.trace, .group = gi, .checkpoint = ckpt});
          if (!insert_label(dst, n, persistent_matters())) --traces_used_;
        }
      }
    }
    return out;
  }

  // ---- one op ----
  Frontier step(std::size_t k, const Frontier& in) {
    Frontier pending;
    std::vector<Trace> links;
    const Op& op = g_.ops()[k];
    const std::vector<DpModel::Choice>& choices = m_.choices(k);
    // An op that reads its first input as stored (an activation) runs only the choices that read
    // the stored spec: they are listed per spec, so the others are never tried.
    const TensorId first = op.inputs[0];
    const bool stored_reads =
        g_.tensor(first).producer.valid() && g_.tensor(first).kind == TensorKind::activation;
    std::vector<std::vector<std::uint32_t>> by_spec;
    if (stored_reads) {
      for (std::uint32_t c = 0; c < choices.size(); ++c) {
        const std::uint32_t want = choices[c].inputs[0].want;
        if (by_spec.size() <= want) by_spec.resize(want + 1);
        by_spec[want].push_back(c);
      }
    }
    std::vector<std::uint32_t> every(choices.size());
    for (std::uint32_t c = 0; c < choices.size(); ++c) every[c] = c;
    const std::vector<std::uint32_t> none;
    State next;
    for (const auto& [state, labels] : in) {
      check_deadline();
      const std::vector<std::uint32_t>* tried = &every;
      if (stored_reads) {
        const auto it = std::find_if(state.live.begin(), state.live.end(),
                                     [&](const Live& l) { return l.tensor == first.value; });
        if (it != state.live.end() &&
            reads_stored_spec(op.kind, m_.spec(first, it->spec), m_.options().space)) {
          tried = it->spec < by_spec.size() ? &by_spec[it->spec] : &none;
        }
      }
      for (const std::uint32_t c : *tried) {
        Label delta{};
        if (!transition(k, c, state, delta, next)) continue;
        std::vector<Label>& dst = pending[next];
        for (const Label& l : labels) {
          Label n = l;
          n.time += delta.time;
          n.base += delta.base;
          n.kept += delta.kept;
          n.open_saved += delta.open_saved;
          if (state.checkpoint) {  // backward of op k runs with A_≤k still held
            n.open_temp = std::max(n.open_temp, n.open_saved + delta.open_temp);
          } else {  // U_k above what is kept up to k; what op k keeps lowers the earlier ones
            n.extra = std::max(n.extra - delta.kept, delta.open_temp);
          }
          if (step_tolerance() > 0) ++n.trims;
          n.trace = static_cast<std::int32_t>(links.size());
          links.push_back({.parent = l.trace,
                           .op = static_cast<std::int32_t>(k),
                           .choice = static_cast<std::int32_t>(c)});
          dst.push_back(n);
          ++labels_created_;
        }
      }
    }
    return filter_pending(pending, links, budget_at(static_cast<std::int32_t>(k) + 1),
                          step_tolerance());
  }

  // The cost of op k with choice c from `state` (label-independent), and the next state.
  bool transition(std::size_t k, std::size_t c, const State& state, Label& d, State& next) {
    const Op& op = g_.ops()[k];
    const DpModel::Choice& ch = m_.choices(k)[c];
    const double m = static_cast<double>(m_.options().micro_batches);
    next = state;
    std::vector<Live>& live = next.live;
    double micro = ch.micro_s;
    double fwd = ch.forward_s;
    std::int64_t saved = ch.private_saved;
    d.time = ch.sync_s;
    std::int64_t forward_moves = 0;   // moved inputs, live together while the op runs
    std::int64_t forward_kept_copies = 0;  // moved copies saved for backward (counted as saved)
    std::int64_t regathers = 0;            // inputs moved again for the backward
    std::int64_t backward_moves = 0;  // the largest gradient move
    std::array<bool, 3> grad_moved{};  // input i's gradient is moved to the stored spec
    std::array<std::int64_t, 3> stored_bytes{};  // input i's local bytes as stored
    auto mark_saved = [&](std::int32_t root) {
      for (Live& l : live) {
        if (l.root == root) l.saved = true;
      }
    };
    StaticVector<std::int32_t, 3> saved_roots_now;  // roots saved by this op (dedupe within the op)
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId t = op.inputs[i];
      const TensorInfo& info = g_.tensor(t);
      const DpModel::Input& in = ch.inputs[i];
      auto it = find(live, t.value);
      Live stored;
      if (it == live.end()) {
        if (info.producer.valid())
          fail("carto: internal: tensor ", t.value, " is not live at op ", k);
        // First consumer of a parameter or graph input: stored as read.
        stored = {.tensor = t.value,
                  .spec = in.want,
                  .root = t.value,
                  .bytes = m_.local_bytes(t, in.want),
                  .saved = false};
        if (info.kind == TensorKind::parameter) {
          const auto [persistent, gather, optimizer] = m_.parameter_cost(t, in.want);
          d.base += persistent;
          d.time += optimizer;  // once per step
          micro += gather;
          fwd += gather / 2;  // the forward gather reruns with the block's recompute
        }
        if (m_.last_use(t) > static_cast<std::int32_t>(k)) {
          live.push_back(stored);
          sort_live(live);
        }
      } else {
        stored = *it;
      }
      const bool moved = stored.spec != in.want;
      if (moved && i == 0 && info.producer.valid() &&
          reads_stored_spec(op.kind, m_.spec(t, stored.spec), m_.options().space))
        return false;  // see the design note's search space
      double forward_move = 0;
      if (moved) {
        forward_move = m_.move_time(t, stored.spec, in.want);
        if (!(forward_move < std::numeric_limits<double>::infinity())) return false;
        micro += forward_move;
        fwd += forward_move;
        forward_moves += m_.move_transient(t, stored.spec, in.want);
      }
      if (info.kind == TensorKind::parameter) {
        if (moved) {
          const double back = m_.move_time(t, in.want_plain, stored.spec);
          if (!(back < std::numeric_limits<double>::infinity())) return false;
          micro += back;
          backward_moves =
              std::max(backward_moves, m_.move_transient(t, in.want_plain, stored.spec));
        }
      } else if (info.kind == TensorKind::activation && info.producer.valid()) {
        const std::uint32_t needed = m_.plain_index(t, stored.spec);
        grad_moved[i] = in.grad != needed;
        stored_bytes[i] = m_.local_bytes(t, stored.spec);
        if (in.grad != needed) {
          const double back = m_.move_time(t, in.grad, needed);
          if (!(back < std::numeric_limits<double>::infinity())) return false;
          micro += back;
          backward_moves = std::max(backward_moves, m_.move_transient(t, in.grad, needed));
        }
      }
      if (in.saved) {
        const bool already =
            stored.saved || std::find(saved_roots_now.begin(), saved_roots_now.end(),
                                      stored.root) != saved_roots_now.end();
        if (!moved || m_.local_bytes(t, stored.spec) < m_.local_bytes(t, in.want)) {
          if (!already) saved += stored.bytes;
          saved_roots_now.push_back(stored.root);
          mark_saved(stored.root);
          if (moved) {  // regather before the op's backward, held through it
            micro += forward_move;
            regathers += m_.move_transient(t, stored.spec, in.want);
          }
        } else {
          saved += m_.local_bytes(t, in.want);
          forward_kept_copies += m_.local_bytes(t, in.want);
        }
      }
    }
    // The buffers op k's forward holds that no op has saved (its activation inputs, its output),
    // each once.
    auto unsaved_bytes = [&](const Live& o) {
      StaticVector<std::int32_t, 4> roots;
      std::int64_t bytes = 0;
      auto count = [&](const Live& l) {
        if (l.saved || std::find(roots.begin(), roots.end(), l.root) != roots.end()) return;
        roots.push_back(l.root);
        bytes += l.bytes;
      };
      count(o);
      for (const TensorId t : op.inputs) {
        const TensorInfo& info = g_.tensor(t);
        if (info.kind != TensorKind::activation || !info.producer.valid()) continue;
        const auto it = find(live, t.value);
        if (it != live.end()) count(*it);
      }
      return bytes;
    };
    // The output.
    Live out{.tensor = op.output.value,
             .spec = ch.output,
             .root = op.output.value,
             .bytes = m_.local_bytes(op.output, ch.output),
             .saved = false};
    if (op.kind == OpKind::view) {  // unmoved (checked above): aliases its input's buffer
      auto src = find(live, op.inputs[0].value);
      if (src != live.end()) {
        out.root = src->root;
        out.bytes = src->bytes;
        out.saved = src->saved;
      }
    }
    if (ch.saves_output && !out.saved) {  // softmax, fused attention
      saved += out.bytes;
      out.saved = true;
    }
    const std::int64_t forward_held = unsaved_bytes(out);
    // Drop what is dead after op k, then add the output if something reads it later.
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const Live& l) {
                                return m_.last_use(TensorId{l.tensor}) <=
                                       static_cast<std::int32_t>(k);
                              }),
               live.end());
    if (m_.last_use(op.output) > static_cast<std::int32_t>(k)) {
      for (const Live& l : live) {
        if (l.root == out.root && l.saved) out.saved = true;
      }
      live.push_back(out);
      sort_live(live);
    }
    // U_k (search/gradient_memory.hpp's ExcursionParts).
    const OpGradientLayout& layout = m_.gradient_layout(k);
    ExcursionParts u{.fixed = ch.zero_held};
    for (const std::int32_t t : layout.across) {  // those in the state: a table's riders come later
      const auto it = std::lower_bound(
          state.live.begin(), state.live.end(), t,
          [](const Live& l, std::int32_t x) { return l.tensor < x; });
      if (it != state.live.end() && it->tensor == t) u.across += m_.local_bytes(TensorId{t}, it->spec);
    }
    u.forward = forward_held + forward_moves - forward_kept_copies +
                (state.checkpoint && layout.counts_block_gradient ? state.checkpoint_input : 0);
    u.backward =
        ch.workspace + regathers + backward_moves + (layout.counts_dy ? ch.output_bytes : 0);
    StaticVector<InputGradient, 3> grads;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      grads.push_back({.bytes = ch.inputs[i].grad_bytes, .moved = grad_moved[i]});
    }
    for (const std::uint8_t i : layout.read_later) u.backward += stored_bytes[i];
    u.backward += written_gradient_bytes(g_, m_.roots(), k, {grads.begin(), grads.size()},
                                         m_.options().zero_stage);
    d.open_temp = u.total();
    d.time += m * micro;
    if (state.checkpoint) {
      d.time += m * fwd;  // recomputed in backward
      d.open_saved = saved;
    } else {
      d.base += saved;
      d.kept = saved;
    }
    if (m_.options().least_memory) d.time = 0;
    if (m_.options().least_time) d.base = d.kept = d.open_saved = d.open_temp = 0;
    return true;
  }

  // ---- groups ----
  TensorId block_input(std::int32_t gi) const { return group_input(g_, gi); }

  // Closes the open group: a checkpointed block's candidates, max_k(A_≤k + U_k) and A, sit on
  // what was kept before it (base less its input); an unchecked group's are in extra already.
  static Label close(const Label& l, const State& state) {
    Label n = l;
    if (state.checkpoint) {
      n.extra =
          std::max(l.extra, std::max(l.open_temp, l.open_saved) - state.checkpoint_input);
    }
    n.open_saved = 0;
    n.open_temp = 0;
    return n;
  }

  Frontier end_group(const Frontier& in) {
    Frontier out;
    for (const auto& [state, labels] : in) {
      State next = state;
      next.checkpoint = false;
      next.checkpoint_input = 0;
      std::vector<Label>& dst = out[next];
      for (const Label& l : labels) {
        Label n = close(l, state);
        n.trace = l.trace;
        insert_label(dst, n, persistent_matters());
      }
    }
    return out;
  }
};

}  // namespace carto::detail
