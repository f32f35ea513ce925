// zeppelin/exec/step_runner.hpp
// The host backend of the step program (step/driver.hpp): runs the calling rank's part of a
// training iteration over a communicator. The one runner of pipeline, tensor, context and
// data parallelism on real ranks; the simulator (sim/simulate_step.hpp) prices the same ops.
//   in : the step program (step/program.hpp), the user's model (step_model below), a
//        communicator whose ranks are the program's cluster ranks, an optional step record
//   out: the model's parts called in the program's order, every group of the rank posted
//        (group_start, its sends and receives in order, group_end) with the bytes the model's
//        buffers hold; receives that add (ring reduction steps) land in scratch and are added
//        into the model's buffer, element by element in value_type, once the group is done
// The model owns every tensor; the runner asks it for byte ranges by name (step_buffer) and
// calls it for each compute op and for each attention (with a communicator over the CP ranks
// of its TP index: comm/sub_communicator.hpp, and the execution record to pass to the
// attention engine). A rank that runs nothing (no replica) returns at once.
// Host code: the ops run one after another on the calling thread, which satisfies the
// program's stream semantics. Errors: invalid_argument when the communicator's size is not
// the program's, the program holds its exchanges' traffic alone (exchange_detail::
// traffic_only), a buffer the model returns has the wrong size or an add's bytes are not
// whole elements; communicator and model exceptions propagate unchanged.
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/comm/sub_communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/program/record.hpp>
#include <zeppelin/step/block.hpp>
#include <zeppelin/step/driver.hpp>
#include <zeppelin/step/program.hpp>
#include <zeppelin/step/record.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What the user supplies for the step runner on a communicator of type C. Element type
//! value_type is that of every tensor a transfer adds into (gradients, TP partial sums, the
//! context's dK/dV).
//!   buffer(b)                       the bytes [b.offset, b.offset + b.bytes) of tensor b on
//!                                   this rank (valid until the next call into the model)
//!   compute(block, op)              a compute op of a block (step/block.hpp)
//!   attention(block, a, cp, record) the attention `a` (pass, layer) of the block's
//!                                   micro-batch on communicator cp (the CP ranks of the TP
//!                                   index); pass `record` to the attention engine
template <class M, class C>
concept step_model = std::is_trivially_copyable_v<typename M::value_type> &&
                     requires(M& m, const step_buffer& b, const step_block& blk, const layer_op& op, const block_attention& a,
                              sub_communicator<C>& cp, execution_record* record) {
                       { m.buffer(b) } -> std::same_as<std::span<std::byte>>;
                       m.compute(blk, op);
                       m.attention(blk, a, cp, record);
                     };

template <communicator C, step_model<C> M>
class step_host_backend {
  using T = typename M::value_type;

 public:
  step_host_backend(const step_program& prog, M& model, C& comm, step_record* record)
      : prog_(prog), model_(model), comm_(comm), record_(record), me_{static_cast<rank_index>(comm.rank())} {
    ZEPPELIN_EXPECTS(static_cast<rank_index>(comm.size()) == prog.num_ranks(), "step runner: the communicator is not the program's cluster",
                     {{"communicator", double(comm.size())}, {"program_ranks", double(prog.num_ranks())}});
  }
  [[nodiscard]] std::span<const rank_index> ranks() const noexcept { return {&me_, 1}; }

  void post(rank_index, std::int32_t, const step_group& g) {
    const std::vector<step_transfer>& all = block_ != nullptr ? block_->transfers : prog_.transfers;
    scratch_.clear();
    sent_to_self_.clear();
    comm_.group_start();
    for (const std::int32_t x : g.transfers) {
      const step_transfer& t = all[static_cast<std::size_t>(x)];
      // a transfer to this rank itself is listed twice: its send, then its receive
      const bool sending = t.src == me_ && (t.dst != me_ || std::find(sent_to_self_.begin(), sent_to_self_.end(), x) == sent_to_self_.end());
      if (sending) {
        if (t.dst == me_) sent_to_self_.push_back(x);
        const std::span<std::byte> from = checked(t.from);
        comm_.send(std::span<const std::byte>(from), t.dst);
        if (record_ != nullptr) record_->add(t);
        continue;
      }
      if (t.combine == combine_kind::add) {
        ZEPPELIN_EXPECTS(t.bytes % static_cast<std::int64_t>(sizeof(T)) == 0, "step runner: an added transfer is not whole elements",
                         {{"bytes", double(t.bytes)}, {"element_bytes", double(sizeof(T))}});
        scratch_.emplace_back(static_cast<std::size_t>(t.bytes) / sizeof(T));
        comm_.recv(std::as_writable_bytes(std::span<T>(scratch_.back())), t.src);
      } else {
        comm_.recv(checked(t.to), t.src);
      }
    }
  }
  void complete(rank_index, std::int32_t index, const step_group& g) {
    comm_.group_end(label(index));
    const std::vector<step_transfer>& all = block_ != nullptr ? block_->transfers : prog_.transfers;
    std::size_t next = 0;
    sent_to_self_.clear();
    for (const std::int32_t x : g.transfers) {
      const step_transfer& t = all[static_cast<std::size_t>(x)];
      if (t.src == me_ && t.dst == me_ && std::find(sent_to_self_.begin(), sent_to_self_.end(), x) == sent_to_self_.end()) {
        sent_to_self_.push_back(x);  // its send
        continue;
      }
      if (t.dst != me_ || t.combine != combine_kind::add) continue;
      const std::span<std::byte> to = checked(t.to);
      const std::vector<T>& in = scratch_[next++];
      for (std::size_t i = 0; i < in.size(); ++i) {
        T v;
        std::memcpy(&v, to.data() + i * sizeof(T), sizeof(T));
        v = v + in[i];
        std::memcpy(to.data() + i * sizeof(T), &v, sizeof(T));
      }
    }
  }
  void block(std::int32_t index, std::span<const rank_index>, std::span<const std::int32_t>) {
    const block_program bp = make_block_program(prog_, index);
    block_ = &bp;
    block_info_ = &prog_.blocks[static_cast<std::size_t>(index)];
    run_block(bp, ranks(), *this);
    block_ = nullptr;
    block_info_ = nullptr;
  }
  void compute(rank_index, std::int32_t, const layer_op& op) {
    model_.compute(*block_info_, op);
    if (record_ != nullptr) record_->add(me_, *block_info_, op);
  }
  void attention(const block_attention& a, std::span<const rank_index>, std::span<const std::int32_t>) {
    sub_communicator<C> cp(comm_, a.ranks);
    execution_record rec;
    model_.attention(*block_info_, a, cp, record_ != nullptr ? &rec : nullptr);
    if (record_ != nullptr) record_->add(*block_info_, a, rec);
  }

 private:
  std::span<std::byte> checked(const step_buffer& b) {
    const std::span<std::byte> s = model_.buffer(b);
    ZEPPELIN_EXPECTS(static_cast<std::int64_t>(s.size()) == b.bytes, "step runner: the model's buffer has the wrong size",
                     {{"bytes", double(s.size())}, {"expected", double(b.bytes)}, {"tensor", double(static_cast<int>(b.tensor))}});
    return s;
  }
  [[nodiscard]] std::string label(std::int32_t index) const {
    if (block_ == nullptr) return "step rank " + std::to_string(me_) + " op " + std::to_string(index);
    return "step block " + std::to_string(block_->block) + " rank " + std::to_string(me_) + " op " + std::to_string(index);
  }

  const step_program& prog_;
  M& model_;
  C& comm_;
  step_record* record_;
  rank_index me_;
  const block_program* block_ = nullptr;
  const step_block* block_info_ = nullptr;
  std::vector<std::vector<T>> scratch_;     // the current group's added receives
  std::vector<std::int32_t> sent_to_self_;  // the current group's transfers to this rank whose send is posted
};

//! Runs the calling rank's part of `prog` (see the file comment). Every rank of `comm` calls it.
template <communicator C, step_model<C> M>
void run_step_rank(const step_program& prog, M& model, C& comm, step_record* record = nullptr) {
  ZEPPELIN_EXPECTS(prog.exchange_traffic.empty(),
                   "step runner: the program holds its exchanges' traffic alone (exchange_detail::traffic_only), not the transfers "
                   "to run; build it with exchange_detail::listed",
                   {{"exchanges", double(prog.exchanges)}});
  step_host_backend<C, M> backend(prog, model, comm, record);
  run_step(prog, backend);
}

ZEPPELIN_NAMESPACE_END
