// zeppelin/sim/step_backend.hpp
// The simulator's backend of the step program (step/driver.hpp): every op becomes tasks of one
// event engine (sim/event_engine.hpp), priced by the cost model, with the dependencies a
// device runner's streams and events would give them. TP, CP, PP and DP transfers are all
// flows on the same ports, so they contend.
//   in : the event engine, the step program, the cluster topology, the cost model, the
//        block pricing, an optional step record
//   out: tasks; the record; per rank the seconds a block priced by shape (below) spent in
//        compute, recomputation and each traffic class, and the bytes it sent
// Per rank, the step level: blocks on its compute stream (a block starts after the rank's
// previous block and the groups in its `after`, and ends when all its layer ops have);
// groups on its communication stream: posted once the previous group and the ops in
// `after` are done; each transfer a flow from the later of its two posts (NCCL's rendezvous);
// a group done when its flows are.
// The layer level (a block's ops, step/block.hpp) runs on the rank's compute stream and a
// second communication stream of the block's own (TP collectives and ZeRO-3's gathers do not
// queue behind pipeline sends):
//   compute            tokens x FLOPs per token of the part (cost/linear_flops.hpp) / tp at the
//                      GEMM rate, forward, backward (2x) or recomputed; the embedding and
//                      the context's save and gradient at the GPU's memory bandwidth; the
//                      context's attention on the attention time model (heads / tp);
//   attention          the micro-batch's attention program, run by the simulator's backend of
//                      the execution program (sim/backend.hpp) on the CP ranks' cluster ranks;
//   groups             as at the step level.
// Block pricing (block_pricing):
//   every_op   every block's ops in the one engine: contention everywhere (the reference,
//              and what the record needs);
//   per_shape  a block's ops priced once per shape (replica, micro-batch, pass, layers,
//              recomputed layers, first / last, and the placement of its ranks) in an engine of
//              their own, then one task per rank of that length after all its ranks are
//              ready: a block's TP and CP traffic does not contend with other blocks', the
//              rest does. Orders of magnitude fewer tasks (a planner's inner loop, 1,000+ GPUs).
//              price_shapes prices every shape up front, several at once (simulate_step
//              does, on step_sim_options::threads); otherwise a shape is priced when its
//              first block runs. The same costs either way. A block of many identical
//              layers is priced from its first six when their tasks repeat with a period
//              (then each further layer adds that period: the same step up to rounding).
// Exchange pricing (exchange_pricing), for the groups of a job-wide exchange:
//   per_flow   each transfer a flow from the later of its two posts (the reference);
//   per_port   the exchange starts once every rank with a part in it has posted its group
//              (a barrier: each rank exchanges with most others) and lasts the least time
//              its transfers can take, busiest_port_seconds (cost/busiest_port.hpp): its
//              busiest NVLink port or NIC at full rate, plus the link latency. One task per
//              exchange instead of one flow per transfer, and no fair sharing among up to
//              N^2 / TP flows (the cost that grows with the GPUs); the exchange does not
//              contend with other traffic. Max-min fair sharing leaves ports idle while
//              others drain, so per_flow takes longer, and per_port's barrier makes ranks
//              that posted early wait: docs/step-program.md compares the two.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/busiest_port.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/detail/parallel_for.hpp>
#include <zeppelin/program/driver.hpp>
#include <zeppelin/sim/backend.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/step/block.hpp>
#include <zeppelin/step/driver.hpp>
#include <zeppelin/step/program.hpp>
#include <zeppelin/step/record.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! How the simulator prices blocks (see the file comment).
enum class block_pricing : std::uint8_t { every_op = 0, per_shape = 1 };

[[nodiscard]] constexpr std::string_view to_string(block_pricing p) noexcept { return p == block_pricing::per_shape ? "per_shape" : "every_op"; }

//! How the simulator prices a job-wide exchange (step_group::exchange: Hydraulis' pull, the
//! push's reduction and its link; see the file comment).
enum class exchange_pricing : std::uint8_t { per_flow = 0, per_port = 1 };

[[nodiscard]] constexpr std::string_view to_string(exchange_pricing p) noexcept { return p == exchange_pricing::per_port ? "per_port" : "per_flow"; }

//! One rank's part of an exchange priced whole: the engine task that ends it (its span is
//! the exchange's time in flight) and the bytes the rank sends in it.
struct priced_exchange {
  rank_index rank = 0;
  task_id task = no_task;
  double bytes_sent = 0;
};

//! What the ranks of blocks priced per shape did inside them (their tasks are not in the engine).
struct shaped_block_time {
  double compute_s = 0, recompute_s = 0;
  std::array<double, traffic_classes> traffic_s{};      //!< seconds with a transfer of the class in flight
  std::array<double, traffic_classes> traffic_bytes{};  //!< bytes sent
};

//! The traffic class of a flow's task kind (-1 for a compute kind).
[[nodiscard]] constexpr int traffic_class_of(task_kind k) noexcept {
  switch (k) {
    case task_kind::tp_transfer:
    case task_kind::parameter_gather:
    case task_kind::gradient_scatter: return static_cast<int>(traffic_class::tp);
    case task_kind::kv:
    case task_kind::dkv:
    case task_kind::remap: return static_cast<int>(traffic_class::cp);
    case task_kind::activation:
    case task_kind::gradient: return static_cast<int>(traffic_class::pp);
    case task_kind::gradient_sync:
    case task_kind::parameter_sync: return static_cast<int>(traffic_class::dp);
    default: return -1;
  }
}

namespace detail {

// The flow kind of a transfer.
[[nodiscard]] constexpr task_kind flow_kind_of(const step_transfer& t) noexcept {
  switch (t.from.tensor) {
    case step_tensor::activation: return task_kind::activation;
    case step_tensor::activation_gradient: return task_kind::gradient;
    case step_tensor::layer_input:
    case step_tensor::layer_output:
    case step_tensor::loss_statistics: return task_kind::tp_transfer;
    case step_tensor::master_parameters: return task_kind::parameter_sync;
    case step_tensor::master_gradients: return task_kind::gradient_sync;
    case step_tensor::parameters: return t.traffic == traffic_class::tp ? task_kind::parameter_gather : task_kind::parameter_sync;
    case step_tensor::gradients: return t.traffic == traffic_class::tp ? task_kind::gradient_scatter : task_kind::gradient_sync;
    case step_tensor::context:
    case step_tensor::gathered_context: return task_kind::kv;
    case step_tensor::context_gradient:
    case step_tensor::gathered_context_gradient: return task_kind::dkv;
  }
  return task_kind::activation;
}

// Per-second seconds of interval unions (the in-flight time of a traffic class on a rank).
inline double union_length(std::vector<std::pair<double, double>>& spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0, start = 0, end = -1;
  for (const auto& [s, e] : spans) {
    if (s > end) {
      if (end > start) total += end - start;
      start = s, end = e;
    } else {
      end = std::max(end, e);
    }
  }
  if (end > start) total += end - start;
  return total;
}

}  // namespace detail

class step_sim_backend {
 public:
  //! Runs `ranks` (ascending) of `prog` on `e`. `record` (optional) receives what it runs
  //! (every_op pricing only).
  step_sim_backend(event_engine& e, const step_program& prog, const topology& t, const sim_cost_model& cost, block_pricing pricing,
                   std::span<const rank_index> ranks, step_record* record = nullptr)
      : step_sim_backend(e, prog, t, cost, pricing, record) {
    ZEPPELIN_EXPECTS(record == nullptr || pricing == block_pricing::every_op, "a step record needs every op priced (block_pricing::every_op)", {});
    ranks_.assign(ranks.begin(), ranks.end());
    const auto R = prog.ranks.size();
    step_task_.resize(R);
    for (const rank_index r : ranks_) step_task_[static_cast<std::size_t>(r)].assign(prog.ranks[static_cast<std::size_t>(r)].size(), no_task);
    step_compute_.assign(R, no_task);
    step_comm_.assign(R, no_task);
    step_post_.assign(prog.transfers.size() * 2, no_task);
    step_flow_.assign(prog.transfers.size(), no_task);
    shaped_.assign(R, {});
  }

  //! How exchanges are priced; set before the program is walked.
  void set_exchange_pricing(exchange_pricing p) noexcept { exchanges_ = p; }
  //! per_port: every rank's part of every exchange (in the order the walk completed them).
  [[nodiscard]] const std::vector<priced_exchange>& exchanges_priced() const noexcept { return priced_; }

  [[nodiscard]] std::span<const rank_index> ranks() const noexcept { return ranks_; }
  //! Per rank, what its blocks priced per shape did (zeros under every_op).
  [[nodiscard]] const std::vector<shaped_block_time>& shaped() const noexcept { return shaped_; }
  //! Whether task `id` recomputes (the report splits compute from recomputation).
  [[nodiscard]] bool recomputes(task_id id) const noexcept {
    return static_cast<std::size_t>(id) < recompute_.size() && recompute_[static_cast<std::size_t>(id)] != 0;
  }
  //! per_shape: the shapes priced so far, and how many of them from their first layers (a
  //! block of many identical layers, see price_shape).
  [[nodiscard]] std::size_t shapes_priced() const noexcept { return shapes_.size(); }
  [[nodiscard]] std::size_t shapes_priced_by_period() const noexcept {
    return static_cast<std::size_t>(std::count_if(shapes_.begin(), shapes_.end(), [](const auto& s) { return s.second.by_period; }));
  }
  //! The block each compute task belongs to (-1: none), by task id.
  [[nodiscard]] const std::vector<std::int32_t>& block_of_task() const noexcept { return block_of_task_; }

  // ---- the step level
  void post(rank_index rank, std::int32_t index, const step_group& g) {
    if (block_ != nullptr) return post_in_block(rank, index, g);
    const auto r = static_cast<std::size_t>(rank);
    deps_.assign(1, step_comm_[r]);
    for (const std::int32_t a : prog_.ranks[r][static_cast<std::size_t>(index)].after) deps_.push_back(step_task_[r][static_cast<std::size_t>(a)]);
    const task_id posted = joined(deps_);
    if (priced_whole(g)) return post_to_exchange(g, posted);
    for (const std::int32_t x : g.transfers) mark_posted(step_post_, prog_.transfers[static_cast<std::size_t>(x)], x, rank, posted);
  }
  void complete(rank_index rank, std::int32_t index, const step_group& g) {
    if (block_ != nullptr) return complete_in_block(rank, index, g);
    const auto r = static_cast<std::size_t>(rank);
    const task_id done = priced_whole(g) ? exchange_part(rank, g) : flows_of(g, prog_.transfers, step_post_, step_flow_, -1, -1);
    step_comm_[r] = done;
    step_task_[r][static_cast<std::size_t>(index)] = done;
  }
  void block(std::int32_t index, std::span<const rank_index> ranks, std::span<const std::int32_t> at) {
    const step_block& b = prog_.blocks[static_cast<std::size_t>(index)];
    // each rank's start: its previous block and the groups the block waits for
    std::vector<task_id> start(ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const auto r = static_cast<std::size_t>(ranks[i]);
      deps_.assign(1, step_compute_[r]);
      for (const std::int32_t a : prog_.ranks[r][static_cast<std::size_t>(at[i])].after) deps_.push_back(step_task_[r][static_cast<std::size_t>(a)]);
      start[i] = joined(deps_);
    }
    std::vector<task_id> end(ranks.size());
    if (pricing_ == block_pricing::per_shape) {
      const shape_cost& cost = shape_of(index, ranks);
      const task_id all = e_.join(start);
      for (std::size_t i = 0; i < ranks.size(); ++i) {
        const auto m = static_cast<std::size_t>(member_index(b, ranks[i]));
        const task_tag tag{b.pass == step_pass::forward ? task_kind::linear_forward : task_kind::linear_backward, flow_leg::direct, -1, -1,
                           b.first_layer, b.micro_batch};
        end[i] = note_block(e_.compute(ranks[i], cost.seconds[m], tag, linear_priority_, {all}), index, false);
        shaped_block_time& s = shaped_[static_cast<std::size_t>(ranks[i])];
        const shaped_block_time& c = cost.inside[m];
        s.compute_s += c.compute_s;
        s.recompute_s += c.recompute_s;
        for (int k = 0; k < traffic_classes; ++k) s.traffic_s[static_cast<std::size_t>(k)] += c.traffic_s[static_cast<std::size_t>(k)],
                                                  s.traffic_bytes[static_cast<std::size_t>(k)] += c.traffic_bytes[static_cast<std::size_t>(k)];
      }
    } else {
      end = run_expanded(b, index, ranks, start);
    }
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const auto r = static_cast<std::size_t>(ranks[i]);
      step_compute_[r] = end[i];
      step_task_[r][static_cast<std::size_t>(at[i])] = end[i];
    }
  }

  // ---- the layer level
  void compute(rank_index rank, std::int32_t index, const layer_op& op) {
    const auto m = static_cast<std::size_t>(block_->member_of(rank));
    deps_.assign(1, layer_compute_[m]);
    for (const std::int32_t a : op.after) deps_.push_back(layer_task_[m][static_cast<std::size_t>(a)]);
    const bool forward = op.pass != step_pass::backward;
    const bool attention_part = op.part == model_part::context_attention;
    const task_tag tag{attention_part ? (forward ? task_kind::attention_forward : task_kind::attention_backward)
                                      : (forward ? task_kind::linear_forward : task_kind::linear_backward),
                       flow_leg::direct, -1, -1, op.layer, block_info_->micro_batch};
    const task_id id = e_.compute(rank, seconds_of(op), tag, linear_priority_, deps_);
    note_block(id, block_index_, op.pass == step_pass::recompute);
    layer_compute_[m] = id;
    layer_task_[m][static_cast<std::size_t>(index)] = id;
    if (record_ != nullptr) record_->add(rank, *block_info_, op);
  }
  void attention(const block_attention& a, std::span<const rank_index> ranks, std::span<const std::int32_t> at) {
    const step_block& b = *block_info_;
    const step_layout& lay = prog_.layout(b.replica, b.micro_batch);
    const std::vector<detail::call_cost>& prices = prices_of(b.replica, b.micro_batch);
    const auto C = a.ranks.size();
    std::vector<task_id> prev(C);
    std::vector<std::int32_t> op_at(C);
    for (std::size_t c = 0; c < C; ++c) {
      const auto i = static_cast<std::size_t>(std::lower_bound(ranks.begin(), ranks.end(), a.ranks[c]) - ranks.begin());
      const auto m = static_cast<std::size_t>(block_->member_of(a.ranks[c]));
      deps_.assign(1, layer_compute_[m]);
      for (const std::int32_t x : block_->ops[m][static_cast<std::size_t>(at[i])].after) deps_.push_back(layer_task_[m][static_cast<std::size_t>(x)]);
      prev[c] = joined(deps_);
      op_at[c] = at[i];
    }
    std::vector<rank_index> program_ranks(C);
    for (std::size_t c = 0; c < C; ++c) program_ranks[c] = static_cast<rank_index>(c);
    execution_record rec;
    const std::size_t first_task = e_.size();
    sim_backend be(e_, lay.attention, attention_pass(a.pass), t_, prices, prev, a.layer, b.micro_batch, stats_, program_ranks,
                   record_ != nullptr ? &rec : nullptr, a.ranks);
    run_pass(lay.attention, attention_pass(a.pass), be, [](const program_segment&) { return true; });
    for (std::size_t id = first_task; id < e_.size(); ++id) note_block(static_cast<task_id>(id), block_index_, a.pass == step_pass::recompute);
    for (std::size_t c = 0; c < C; ++c) {
      const auto m = static_cast<std::size_t>(block_->member_of(a.ranks[c]));
      layer_compute_[m] = prev[c];
      layer_task_[m][static_cast<std::size_t>(op_at[c])] = prev[c];
    }
    if (record_ != nullptr) record_->add(b, a, rec);
  }

 private:
  struct shape_cost {
    std::vector<double> seconds;             // [member]
    std::vector<shaped_block_time> inside;   // [member]
    bool by_period = false;                  // priced from its first layers (periodic_cost)
  };

  // the engine task joining `deps` (the single one itself)
  task_id joined(std::vector<task_id>& deps) {
    deps.erase(std::remove(deps.begin(), deps.end(), no_task), deps.end());
    if (deps.empty()) return no_task;
    return deps.size() == 1 ? deps.front() : e_.join(deps);
  }
  // ---- exchanges priced whole (exchange_pricing::per_port)
  [[nodiscard]] bool priced_whole(const step_group& g) const noexcept { return exchanges_ == exchange_pricing::per_port && g.exchange >= 0; }
  // the exchange's barrier (created with its first post) waits for this post too
  void post_to_exchange(const step_group& g, task_id posted) {
    if (exchange_seconds_.empty()) price_exchanges();
    const auto x = static_cast<std::size_t>(g.exchange);
    ZEPPELIN_EXPECTS(x < exchange_seconds_.size(), "step program: a group names an exchange the program does not have",
                     {{"exchange", double(g.exchange)}, {"exchanges", double(prog_.exchanges)}, {"rank", double(g.rank)}});
    if (exchange_barrier_[x] == no_task) {
      exchange_barrier_[x] = e_.join({});
      exchange_done_[x] = e_.delay(exchange_seconds_[x], task_tag{task_kind::parameter_sync, flow_leg::direct, -1, -1, -1, -1}, {exchange_barrier_[x]});
    }
    if (posted != no_task) e_.wait_for(exchange_barrier_[x], posted);
  }
  // the task ending `rank`'s part of g's exchange, noted with the bytes it sends (and, with a
  // record, its transfers: each once, from its source)
  task_id exchange_part(rank_index rank, const step_group& g) {
    const auto x = static_cast<std::size_t>(g.exchange);
    const rank_traffic& mine = (*exchange_traffic_)[x][static_cast<std::size_t>(rank)];
    priced_.push_back({rank, exchange_done_[x], mine.sent_intra + mine.sent_inter});
    if (record_ != nullptr)
      for (const std::int32_t i : g.transfers)
        if (prog_.transfers[static_cast<std::size_t>(i)].src == rank) record_->add(prog_.transfers[static_cast<std::size_t>(i)]);
    return exchange_done_[x];
  }
  // every exchange's ranks' traffic (the program's, or summed from its transfers, each once
  // from the group of its source) and seconds:
  // busiest_port_seconds of that traffic
  void price_exchanges() {
    const auto X = static_cast<std::size_t>(prog_.exchanges);
    exchange_barrier_.assign(X, no_task);
    exchange_done_.assign(X, no_task);
    exchange_traffic_ = &prog_.exchange_traffic;
    if (prog_.exchange_traffic.empty()) {
      listed_traffic_.assign(X, std::vector<rank_traffic>(prog_.ranks.size()));
      for (const step_group& g : prog_.groups) {
        if (g.exchange < 0) continue;
        ZEPPELIN_EXPECTS(static_cast<std::size_t>(g.exchange) < X && !g.transfers.empty(),
                         "step program: a group names an exchange the program does not have, or lists no transfers",
                         {{"exchange", double(g.exchange)}, {"exchanges", double(X)}, {"rank", double(g.rank)}});
        for (const std::int32_t i : g.transfers) {
          const step_transfer& t = prog_.transfers[static_cast<std::size_t>(i)];
          if (t.src == g.rank) add_traffic(listed_traffic_[static_cast<std::size_t>(g.exchange)], t.src, t.dst, static_cast<double>(t.bytes), t_);
        }
      }
      exchange_traffic_ = &listed_traffic_;
    }
    ZEPPELIN_EXPECTS(exchange_traffic_->size() == X, "step program: exchange_traffic needs an entry per exchange",
                     {{"entries", double(exchange_traffic_->size())}, {"exchanges", double(X)}});
    exchange_seconds_.assign(X, 0.0);
    for (std::size_t x = 0; x < X; ++x) exchange_seconds_[x] = busiest_port_seconds(std::span<const rank_traffic>((*exchange_traffic_)[x]), t_);
  }

  // records that `rank` posted its end of transfer x (both ends, for a transfer to itself)
  static void mark_posted(std::vector<task_id>& posts, const step_transfer& t, std::int32_t x, rank_index rank, task_id posted) {
    const auto at = static_cast<std::size_t>(x) * 2;
    if (t.src == rank) posts[at] = posted;
    if (t.dst == rank) posts[at + 1] = posted;
  }
  // creates the flows of `g` that do not exist yet (both ends have posted) and returns the
  // task completing when all of them have
  task_id flows_of(const step_group& g, const std::vector<step_transfer>& transfers, const std::vector<task_id>& posts, std::vector<task_id>& flows,
                   std::int32_t layer, std::int32_t micro_batch) {
    done_.clear();
    for (const std::int32_t x : g.transfers) {
      const step_transfer& t = transfers[static_cast<std::size_t>(x)];
      task_id& f = flows[static_cast<std::size_t>(x)];
      if (f == no_task) {
        const task_tag tag{detail::flow_kind_of(t), flow_leg::direct, -1, -1, layer >= 0 ? layer : t.from.layer,
                           micro_batch >= 0 ? micro_batch : t.from.micro_batch};
        f = e_.flow(t.src, t.dst, static_cast<double>(t.bytes), tag,
                    {posts[static_cast<std::size_t>(x) * 2], posts[static_cast<std::size_t>(x) * 2 + 1]});
        if (record_ != nullptr) record_->add(t);
      }
      done_.push_back(f);
    }
    return joined(done_);
  }
  void post_in_block(rank_index rank, std::int32_t index, const step_group& g) {
    const auto m = static_cast<std::size_t>(block_->member_of(rank));
    deps_.assign(1, layer_comm_[m]);
    for (const std::int32_t a : block_->ops[m][static_cast<std::size_t>(index)].after) deps_.push_back(layer_task_[m][static_cast<std::size_t>(a)]);
    const task_id posted = joined(deps_);
    for (const std::int32_t x : g.transfers) mark_posted(layer_post_, block_->transfers[static_cast<std::size_t>(x)], x, rank, posted);
  }
  void complete_in_block(rank_index rank, std::int32_t index, const step_group& g) {
    const auto m = static_cast<std::size_t>(block_->member_of(rank));
    const task_id done = flows_of(g, block_->transfers, layer_post_, layer_flow_, -1, block_info_->micro_batch);
    layer_comm_[m] = done;
    layer_task_[m][static_cast<std::size_t>(index)] = done;
  }

  // the index of `rank` among the ranks of block b's stage (member c x tp + t)
  [[nodiscard]] std::int32_t member_index(const step_block& b, rank_index rank) const {
    return static_cast<std::int32_t>(member_in(stage_members(b), rank));
  }

  // every op of `b` (block `index`, or one like it with fewer layers) in this engine;
  // returns each rank's end
  std::vector<task_id> run_expanded(const step_block& b, std::int32_t index, std::span<const rank_index> ranks, std::span<const task_id> start) {
    const block_program bp = make_block_program(prog_, b, index);
    block_ = &bp;
    block_index_ = index;
    block_info_ = &b;
    const std::size_t members = bp.members.size();
    layer_compute_.assign(members, no_task);
    layer_comm_.assign(members, no_task);
    layer_task_.assign(members, {});
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const auto m = static_cast<std::size_t>(bp.member_of(ranks[i]));
      layer_compute_[m] = layer_comm_[m] = start[i];
      layer_task_[m].assign(bp.ops[m].size(), no_task);
    }
    layer_post_.assign(bp.transfers.size() * 2, no_task);
    layer_flow_.assign(bp.transfers.size(), no_task);
    run_block(bp, ranks, *this);
    std::vector<task_id> end(ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const auto m = static_cast<std::size_t>(bp.member_of(ranks[i]));
      deps_.assign({layer_compute_[m], layer_comm_[m]});
      end[i] = joined(deps_);
    }
    block_ = nullptr;
    block_info_ = nullptr;
    block_index_ = -1;
    return end;
  }

  // The key of block `index`'s shape: what its cost depends on, with the placement of the
  // stage's ranks relative to its first rank's node.
  [[nodiscard]] std::vector<std::int64_t> shape_key(std::int32_t index) const {
    const step_block& b = prog_.blocks[static_cast<std::size_t>(index)];
    std::vector<std::int64_t> key{b.replica, b.micro_batch, static_cast<std::int64_t>(b.pass), b.first_layer == 0 ? 0 : 1, b.layers, b.recomputed,
                                  b.first ? 1 : 0, b.last ? 1 : 0};
    const std::span<const rank_index> members = stage_members(b);
    const int node0 = t_.node_of(members.front());
    for (const rank_index g : members) key.insert(key.end(), {t_.node_of(g) - node0, t_.local_gpu_of(g), t_.nic_of(g) - t_.nic_of(members.front())});
    return key;
  }
  [[nodiscard]] std::span<const rank_index> stage_members(const step_block& b) const {
    const step_replica& rep = prog_.replica(b.replica);
    return {rep.ranks.data() + static_cast<std::size_t>(b.stage) * static_cast<std::size_t>(rep.tp * rep.cp),
            static_cast<std::size_t>(rep.tp * rep.cp)};
  }

  // the cost of block `index`'s shape, simulated once
  const shape_cost& shape_of(std::int32_t index, std::span<const rank_index> ranks) {
    std::vector<std::int64_t> key = shape_key(index);
    auto it = shapes_.find(key);
    if (it != shapes_.end()) return it->second;
    return shapes_.emplace(std::move(key), price_shape(index, ranks)).first->second;
  }

  // Block `index` priced alone: an engine and a backend of their own, every op; a block of
  // many identical layers from its first sampled_layers when they repeat (periodic_cost).
  // Reads the launch prices only, so shapes whose micro-batches' prices are cached price at
  // once.
  [[nodiscard]] shape_cost price_shape(std::int32_t index, std::span<const rank_index> ranks) const {
    const step_block& b = prog_.blocks[static_cast<std::size_t>(index)];
    if (std::optional<shape_cost> periodic = periodic_cost(b, index, ranks)) return std::move(*periodic);
    return cost_of(run_alone(b, index, ranks), b);
  }

  // A block (or a cut of one) run on an engine of its own: the run, each rank's end, and
  // which tasks recompute.
  struct alone_run {
    engine_run run;
    std::vector<rank_index> ranks;
    std::vector<task_id> end;
    std::vector<char> recompute;
  };
  [[nodiscard]] alone_run run_alone(const step_block& b, std::int32_t index, std::span<const rank_index> ranks) const {
    event_engine sub(t_, e_policy_, cost_.link, cost_.contention.slowdown(t_.gpu()));
    step_sim_backend inner(sub, prog_, t_, cost_, block_pricing::every_op, nullptr);
    inner.prices_ = prices_;  // share the launch prices, priced once for both
    std::vector<task_id> start(ranks.size(), no_task);
    alone_run out;
    out.end = inner.run_expanded(b, index, ranks, start);
    out.run = sub.run();
    out.ranks.assign(ranks.begin(), ranks.end());
    out.recompute.resize(out.run.tags.size());
    for (std::size_t i = 0; i < out.recompute.size(); ++i) out.recompute[i] = inner.recomputes(static_cast<task_id>(i)) ? 1 : 0;
    return out;
  }

  // What the members of block b's stage did in a run alone: their ends, compute,
  // recomputation, and per traffic class the seconds in flight and the bytes sent.
  [[nodiscard]] shape_cost cost_of(const alone_run& a, const step_block& b) const {
    const std::span<const rank_index> members = stage_members(b);
    shape_cost out;
    out.seconds.assign(members.size(), 0.0);
    for (std::size_t i = 0; i < a.ranks.size(); ++i) {
      const std::int64_t m = member_in(members, a.ranks[i]);
      out.seconds[static_cast<std::size_t>(m)] = a.end[i] == no_task ? 0.0 : a.run.end[static_cast<std::size_t>(a.end[i])];
    }
    out.inside = inside_of(a, members, nullptr, -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity());
    return out;
  }

  // Per member, what it did in run `a`: the compute and recomputation of the tasks `counted`
  // marks (every task when null) and the bytes of their flows it sent, and per traffic class
  // the seconds a flow of the class was in flight on it within [from, to).
  [[nodiscard]] static std::vector<shaped_block_time> inside_of(const alone_run& a, std::span<const rank_index> members,
                                                                const std::vector<char>* counted, double from, double to) {
    const auto counts = [&](task_id t) { return counted == nullptr || (*counted)[static_cast<std::size_t>(t)] != 0; };
    std::vector<shaped_block_time> out(members.size());
    for (const compute_segment& s : a.run.segments) {
      const std::int64_t m = member_in(members, s.rank);
      if (m < 0 || !counts(s.task)) continue;
      shaped_block_time& x = out[static_cast<std::size_t>(m)];
      (a.recompute[static_cast<std::size_t>(s.task)] != 0 ? x.recompute_s : x.compute_s) += s.end - s.start;
    }
    std::vector<std::vector<std::pair<double, double>>> spans(members.size() * traffic_classes);
    for (const flow_record& f : a.run.flows) {
      const int k = traffic_class_of(a.run.tags[static_cast<std::size_t>(f.task)].kind);
      if (k < 0) continue;
      const std::int64_t src = member_in(members, f.source);
      if (src >= 0 && counts(f.task)) out[static_cast<std::size_t>(src)].traffic_bytes[static_cast<std::size_t>(k)] += f.bytes;
      if (f.end <= from || f.start >= to) continue;
      for (const rank_index g : {f.source, f.destination}) {
        const std::int64_t m = member_in(members, g);
        if (m >= 0) spans[static_cast<std::size_t>(m) * traffic_classes + static_cast<std::size_t>(k)].emplace_back(std::max(f.start, from), std::min(f.end, to));
      }
    }
    for (std::size_t m = 0; m < members.size(); ++m)
      for (int k = 0; k < traffic_classes; ++k)
        out[m].traffic_s[static_cast<std::size_t>(k)] = detail::union_length(spans[m * traffic_classes + static_cast<std::size_t>(k)]);
    return out;
  }
  [[nodiscard]] static std::int64_t member_in(std::span<const rank_index> members, rank_index g) {
    const auto i = std::find(members.begin(), members.end(), g);
    return i == members.end() ? -1 : i - members.begin();
  }

  // The layers a block samples before it prices the rest by their period.
  static constexpr std::int32_t sampled_layers = 6;

  // A block of L >= 2 x sampled_layers identical layers (one run of them: every layer
  // recomputed or none; no ZeRO-3, whose first and last layers differ) from a cut of its
  // first sampled_layers. When, in the order the cut runs its layers, the tasks of the 3rd,
  // 4th and 5th layer are those of the layer before shifted by one period P (in time order,
  // each of the same kind, its start and end P later, up to 1e-9 of the run), the layers in
  // between repeat: a layer's tasks wait for the previous layer's last op on their member's
  // streams, so a layer meets only its neighbours, and a layer that starts P after one like
  // it, after the same neighbours, runs P after it. The block then ends (L - sampled_layers)
  // x P after the cut, and its members computed, recomputed and sent (L - sampled_layers) x
  // the 3rd layer's more, with (L - sampled_layers) x one period's in-flight time (a window
  // of one period that only the repeating layers' tasks reach into). nullopt when the block
  // does not qualify or its layers do not repeat: the caller runs it whole.
  [[nodiscard]] std::optional<shape_cost> periodic_cost(const step_block& b, std::int32_t index, std::span<const rank_index> ranks) const {
    const step_replica& rep = prog_.replica(b.replica);
    const bool zero3 = prog_.plan.sync == gradient_sync::fully_sharded && rep.cp > 1;
    const bool one_run = b.pass == step_pass::forward || b.recomputed == 0 || b.recomputed == b.layers;
    if (zero3 || !one_run || b.layers < 2 * sampled_layers) return std::nullopt;
    step_block cut = b;
    cut.layers = sampled_layers;
    cut.recomputed = b.pass != step_pass::forward && b.recomputed == b.layers ? sampled_layers : 0;
    const alone_run a = run_alone(cut, index, ranks);
    // each sampled layer's tasks (joins aside) in creation order, by the position it runs at
    std::array<std::vector<std::size_t>, sampled_layers> at;
    for (std::size_t i = 0; i < a.run.tags.size(); ++i) {
      const task_tag& tag = a.run.tags[i];
      const std::int32_t l = tag.layer - cut.first_layer;
      if (tag.kind == task_kind::join || l < 0 || l >= sampled_layers) continue;
      at[static_cast<std::size_t>(b.pass == step_pass::forward ? l : sampled_layers - 1 - l)].push_back(i);
    }
    // each layer's tasks in time order (the driver may create a layer's tasks in another
    // order than the last layer's), compared with the next layer's
    for (std::vector<std::size_t>& tasks : at)
      std::sort(tasks.begin(), tasks.end(), [&](std::size_t x, std::size_t y) {
        return std::tuple(a.run.start[x], a.run.end[x], a.run.tags[x].kind, a.run.tags[x].leg) <
               std::tuple(a.run.start[y], a.run.end[y], a.run.tags[y].kind, a.run.tags[y].leg);
      });
    const double tolerance = 1e-9 * a.run.makespan;
    double period = -1;
    for (std::size_t p = 1; p + 2 < sampled_layers; ++p) {
      const std::vector<std::size_t>& x = at[p];
      const std::vector<std::size_t>& y = at[p + 1];
      if (x.empty() || x.size() != y.size()) return std::nullopt;
      if (period < 0) period = a.run.start[y.front()] - a.run.start[x.front()];
      for (std::size_t k = 0; k < x.size(); ++k) {
        const task_tag& tx = a.run.tags[x[k]];
        const task_tag& ty = a.run.tags[y[k]];
        if (tx.kind != ty.kind || tx.leg != ty.leg || std::abs(a.run.start[y[k]] - a.run.start[x[k]] - period) > tolerance ||
            std::abs(a.run.end[y[k]] - a.run.end[x[k]] - period) > tolerance)
          return std::nullopt;
      }
    }
    if (!(period > 0)) return std::nullopt;
    // the cut, then L - sampled_layers more periods, each like the 3rd layer run: its
    // compute and bytes, and the in-flight time of a window of one period from its first
    // start (`like` is in time order), which only the repeating layers' tasks may reach into
    const std::vector<std::size_t>& like = at[2];
    const double from = a.run.start[like.front()], to = from + period;
    std::vector<char> repeating(a.run.tags.size(), 0), in_like(a.run.tags.size(), 0);
    for (std::size_t p = 1; p + 1 < sampled_layers; ++p)
      for (const std::size_t i : at[p]) repeating[i] = 1;
    for (std::size_t i = 0; i < a.run.tags.size(); ++i)
      if (repeating[i] == 0 && a.run.tags[i].kind != task_kind::join && a.run.end[i] > from && a.run.start[i] < to) return std::nullopt;
    for (const std::size_t i : like) in_like[i] = 1;
    shape_cost out = cost_of(a, b);
    out.by_period = true;
    const auto extra = static_cast<double>(b.layers - sampled_layers);
    const std::vector<shaped_block_time> layer = inside_of(a, stage_members(b), &in_like, from, to);
    for (std::size_t m = 0; m < out.seconds.size(); ++m) {
      shaped_block_time& x = out.inside[m];
      out.seconds[m] += extra * period;
      x.compute_s += extra * layer[m].compute_s;
      x.recompute_s += extra * layer[m].recompute_s;
      for (std::size_t k = 0; k < traffic_classes; ++k) {
        x.traffic_s[k] += extra * layer[m].traffic_s[k];
        x.traffic_bytes[k] += extra * layer[m].traffic_bytes[k];
      }
    }
    return out;
  }

  // the launch prices of a micro-batch's attention program, priced once
  const std::vector<detail::call_cost>& prices_of(std::int32_t replica, std::int32_t micro_batch) {
    auto at = prices_->find({replica, micro_batch});
    if (at == prices_->end())
      at = prices_->emplace(std::pair{replica, micro_batch}, price_launches(prog_.layout(replica, micro_batch).attention, cost_.attention)).first;
    return at->second;  // map nodes stay put as others are added
  }

  // the seconds of a compute op
  [[nodiscard]] double seconds_of(const layer_op& op) const {
    const model_config& m = prog_.model;
    const step_replica& rep = prog_.replica(block_info_->replica);
    const gpu_spec& gpu = t_.gpu();
    const bool backward = op.pass == step_pass::backward;
    const auto rows = static_cast<double>(op.rows);
    const double kv_row_bytes = 2.0 * (m.kv_heads / rep.tp) * m.head_dim * prog_.options.activation_bytes;
    switch (op.part) {
      case model_part::embedding: return rows * m.hidden * prog_.options.activation_bytes / gpu.memory_bandwidth;
      case model_part::context_save: return 2.0 * rows * kv_row_bytes / gpu.memory_bandwidth;
      case model_part::context_gradient: return 3.0 * rows * kv_row_bytes / gpu.memory_bandwidth;
      case model_part::context_attention:
        return backward ? cost_.attention.backward_seconds(op.rows, op.pairs, m.heads / rep.tp, m.head_dim)
                        : cost_.attention.forward_seconds(op.rows, op.pairs, m.heads / rep.tp, m.head_dim);
      case model_part::attention_input:
      case model_part::attention_output:
      case model_part::mlp:
      case model_part::head: break;
    }
    const double flops = rows * part_flops_[static_cast<std::size_t>(op.part)] / rep.tp * (backward ? 2.0 : 1.0);
    return cost_.linear.seconds(flops, gpu);
  }

  task_id note_block(task_id id, std::int32_t block, bool recompute) {
    const auto i = static_cast<std::size_t>(id);
    if (recompute_.size() <= i) recompute_.resize(i + 1, 0), block_of_task_.resize(i + 1, -1);
    recompute_[i] = recompute ? 1 : 0;
    block_of_task_[i] = block;
    return id;
  }

 public:
  //! The stream policy of the engines it makes for shapes (the caller's engine's).
  void set_stream_policy(stream_policy p) noexcept { e_policy_ = p; }

  //! per_shape: prices the shape of every block of the program not priced yet, `threads`
  //! shapes at once (each on an engine of its own; the costs do not depend on the threads),
  //! so the step level finds them priced. Call before running the step. With a finite
  //! `deadline_s` the shapes are priced in the order of their first blocks, `threads` at a
  //! time, and the pricing stops once one rank's blocks priced so far add up past the
  //! deadline, returning that sum: a rank runs its blocks one after another on its compute
  //! stream, so the step takes longer than the deadline whatever the rest costs. Returns 0
  //! when every shape is priced (the sums stayed within the deadline).
  double price_shapes(int threads, double deadline_s = std::numeric_limits<double>::infinity()) {
    ZEPPELIN_EXPECTS(threads >= 1, "pricing shapes needs at least 1 thread", {{"threads", double(threads)}});
    ZEPPELIN_EXPECTS(!std::isnan(deadline_s), "a deadline must not be NaN", {});
    std::map<std::vector<std::int64_t>, std::int32_t> slot_of;  // a shape -> its slot in `shapes` below
    struct pending {
      const shape_cost* priced = nullptr;         // a shape priced before
      const std::vector<std::int64_t>* key = nullptr;  // slot_of's (its nodes stay put)
      std::vector<std::int32_t> blocks;           // the blocks of the shape, the first first
    };
    std::vector<pending> shapes;
    for (std::size_t i = 0; i < prog_.blocks.size(); ++i) {
      auto [at, added] = slot_of.try_emplace(shape_key(static_cast<std::int32_t>(i)), static_cast<std::int32_t>(shapes.size()));
      if (added) {
        const auto known = shapes_.find(at->first);
        shapes.push_back({known == shapes_.end() ? nullptr : &known->second, &at->first, {}});
      }
      shapes[static_cast<std::size_t>(at->second)].blocks.push_back(static_cast<std::int32_t>(i));
    }
    // each rank's blocks priced so far, added up
    std::vector<double> busy(static_cast<std::size_t>(prog_.num_ranks()), 0.0);
    double busiest = 0;
    const auto add = [&](const pending& x, const shape_cost& c) {
      for (const std::int32_t i : x.blocks) {
        const std::span<const rank_index> members = stage_members(prog_.blocks[static_cast<std::size_t>(i)]);
        for (std::size_t m = 0; m < members.size(); ++m) {
          double& b = busy[static_cast<std::size_t>(members[m])];
          b += c.seconds[m];
          busiest = std::max(busiest, b);
        }
      }
    };
    std::vector<std::size_t> unpriced;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      if (shapes[k].priced != nullptr)
        add(shapes[k], *shapes[k].priced);
      else
        unpriced.push_back(k);
    }
    if (busiest > deadline_s) return busiest;
    // the launch prices they read, priced first (the pricing below only reads the cache)
    std::vector<std::pair<std::int32_t, std::int32_t>> micro_batches;
    for (const std::size_t k : unpriced) {
      const step_block& b = prog_.blocks[static_cast<std::size_t>(shapes[k].blocks.front())];
      if (!prices_->contains({b.replica, b.micro_batch})) micro_batches.emplace_back(b.replica, b.micro_batch);
    }
    std::sort(micro_batches.begin(), micro_batches.end());
    micro_batches.erase(std::unique(micro_batches.begin(), micro_batches.end()), micro_batches.end());
    std::vector<std::vector<detail::call_cost>> prices(micro_batches.size());
    detail::parallel_for(micro_batches.size(), threads, [&](std::size_t k) {
      prices[k] = price_launches(prog_.layout(micro_batches[k].first, micro_batches[k].second).attention, cost_.attention);
    });
    for (std::size_t k = 0; k < micro_batches.size(); ++k) prices_->emplace(micro_batches[k], std::move(prices[k]));
    // `threads` shapes at a time, the sums checked after each wave (all at once without a deadline)
    const std::size_t wave = std::isfinite(deadline_s) ? static_cast<std::size_t>(threads) : std::max<std::size_t>(1, unpriced.size());
    for (std::size_t from = 0; from < unpriced.size(); from += wave) {
      const std::size_t n = std::min(wave, unpriced.size() - from);
      std::vector<shape_cost> costs(n);
      detail::parallel_for(n, threads, [&](std::size_t k) {
        // the members in ascending rank order, as the driver hands them to block()
        const std::int32_t first = shapes[unpriced[from + k]].blocks.front();
        const std::span<const rank_index> members = stage_members(prog_.blocks[static_cast<std::size_t>(first)]);
        std::vector<rank_index> ranks(members.begin(), members.end());
        std::sort(ranks.begin(), ranks.end());
        costs[k] = price_shape(first, ranks);
      });
      for (std::size_t k = 0; k < n; ++k) {
        pending& x = shapes[unpriced[from + k]];
        add(x, costs[k]);
        shapes_.emplace(*x.key, std::move(costs[k]));
      }
      if (busiest > deadline_s) return busiest;
    }
    return 0;
  }

 private:
  // The state every backend has; the public constructor adds the step level's.
  step_sim_backend(event_engine& e, const step_program& prog, const topology& t, const sim_cost_model& cost, block_pricing pricing,
                   step_record* record)
      : e_(e), prog_(prog), t_(t), cost_(cost), pricing_(pricing), record_(record) {
    const model_config& m = prog.model;
    const linear_flops_breakdown f = linear_forward_flops_breakdown(m);
    part_flops_ = {0.0, f.qkv, f.output, f.mlp + f.router, lm_head_flops_per_token(m)};
    linear_priority_ = 1 << 20;
  }

  event_engine& e_;
  const step_program& prog_;
  const topology& t_;
  const sim_cost_model& cost_;
  block_pricing pricing_;
  exchange_pricing exchanges_ = exchange_pricing::per_flow;
  step_record* record_;
  std::vector<rank_index> ranks_;
  stream_policy e_policy_ = stream_policy::in_order;
  std::array<double, 5> part_flops_{};
  std::int64_t linear_priority_ = 0;
  launch_stats stats_;
  // the step level
  std::vector<std::vector<task_id>> step_task_;  // [rank][op]
  std::vector<task_id> step_compute_, step_comm_;  // [rank]
  std::vector<task_id> step_post_, step_flow_;     // [transfer x 2 ends], [transfer]
  std::vector<double> exchange_seconds_;           // [exchange] (per_port, once its first group is posted)
  const std::vector<std::vector<rank_traffic>>* exchange_traffic_ = nullptr;  // [exchange][rank]: the program's or listed_traffic_
  std::vector<std::vector<rank_traffic>> listed_traffic_;                     // summed from a listed program's transfers
  std::vector<task_id> exchange_barrier_, exchange_done_;  // [exchange]
  std::vector<priced_exchange> priced_;
  // the block being expanded
  const block_program* block_ = nullptr;
  const step_block* block_info_ = nullptr;
  std::int32_t block_index_ = -1;
  std::vector<std::vector<task_id>> layer_task_;    // [member][op]
  std::vector<task_id> layer_compute_, layer_comm_; // [member]
  std::vector<task_id> layer_post_, layer_flow_;
  // per shape
  std::map<std::vector<std::int64_t>, shape_cost> shapes_;
  std::vector<shaped_block_time> shaped_;
  // the launch prices per (replica, micro-batch), shared with the backends that price shapes
  // (one per new shape: copying the cache into each cost O(micro-batches) per shape)
  using price_cache = std::map<std::pair<std::int32_t, std::int32_t>, std::vector<detail::call_cost>>;
  std::shared_ptr<price_cache> prices_ = std::make_shared<price_cache>();
  std::vector<char> recompute_;
  std::vector<std::int32_t> block_of_task_;
  std::vector<task_id> deps_, done_;
};

ZEPPELIN_NAMESPACE_END
