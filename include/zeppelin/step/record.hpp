// zeppelin/step/record.hpp
// The step record: what a backend ran of a step program, in one comparable form.
//   in : entries a backend appends while it runs (the host runner: its rank's compute ops,
//        the transfers it sends, its attention programs' own records; the simulator: the
//        same, for every rank, as it prices them)
//   out: sorted lists, written as JSON
//        {"format":"zeppelin.step_record","version":1,
//         "ops":[{"rank":R,"pass":"fwd"|"bwd"|"recompute","mb":K,"vstage":V,"layer":L,"part":P,"rows":N},...],
//         "transfers":[{"class":"tp"|"cp"|"pp"|"dp","src":S,"dst":D,"bytes":B,"tensor":T,"pass":..,"mb":K,
//                       "vstage":V,"layer":L,"offset":O},...],
//         "attention_transfers":[{"mb":K,"layer":L,"pass":..,"level":E,"round":U,"src":S,"dst":D,"bytes":B},...],
//         "attention_launches":[{"rank":R,"mb":K,"layer":L,"pass":..,"level":E,"round":U,"blocks":N,"rows":Q},...]}
//        one entry per line, each list sorted by its fields in the order written. Ranks are
//        the cluster's; mb is the micro-batch's index in its replica (the rank says which
//        replica); a transfer is recorded once, by its source; the attention lists are the
//        attention programs' records (program/record.hpp) with their CP ranks mapped to the
//        cluster's and the step's micro-batch, layer and pass added.
// Two backends ran the same step exactly when their records are equal.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/record.hpp>
#include <zeppelin/step/block.hpp>
#include <zeppelin/step/program.hpp>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct recorded_step_op {
  rank_index rank = 0;
  step_pass pass = step_pass::forward;
  std::int32_t micro_batch = 0;
  std::int32_t virtual_stage = 0;
  std::int32_t layer = 0;
  model_part part = model_part::embedding;
  token_count rows = 0;
  friend constexpr bool operator==(const recorded_step_op&, const recorded_step_op&) = default;
  friend constexpr auto operator<=>(const recorded_step_op&, const recorded_step_op&) = default;
};

struct recorded_step_transfer {
  traffic_class traffic = traffic_class::pp;
  rank_index src = 0;
  rank_index dst = 0;
  std::int64_t bytes = 0;
  step_tensor tensor = step_tensor::activation;
  step_pass pass = step_pass::forward;
  std::int32_t micro_batch = 0;
  std::int32_t virtual_stage = 0;
  std::int32_t layer = 0;
  std::int64_t offset = 0;
  friend constexpr bool operator==(const recorded_step_transfer&, const recorded_step_transfer&) = default;
  friend constexpr auto operator<=>(const recorded_step_transfer&, const recorded_step_transfer&) = default;
};

struct recorded_attention_transfer {
  std::int32_t micro_batch = 0;
  std::int32_t layer = 0;
  step_pass pass = step_pass::forward;
  std::int32_t level = 0;
  std::int32_t round = 0;
  rank_index src = 0;
  rank_index dst = 0;
  std::int64_t bytes = 0;
  friend constexpr bool operator==(const recorded_attention_transfer&, const recorded_attention_transfer&) = default;
  friend constexpr auto operator<=>(const recorded_attention_transfer&, const recorded_attention_transfer&) = default;
};

struct recorded_attention_launch {
  rank_index rank = 0;
  std::int32_t micro_batch = 0;
  std::int32_t layer = 0;
  step_pass pass = step_pass::forward;
  std::int32_t level = 0;
  std::int32_t round = 0;
  std::int64_t blocks = 0;
  token_count rows = 0;
  friend constexpr bool operator==(const recorded_attention_launch&, const recorded_attention_launch&) = default;
  friend constexpr auto operator<=>(const recorded_attention_launch&, const recorded_attention_launch&) = default;
};

struct step_record {
  std::vector<recorded_step_op> ops;
  std::vector<recorded_step_transfer> transfers;
  std::vector<recorded_attention_transfer> attention_transfers;
  std::vector<recorded_attention_launch> attention_launches;

  //! Records compute op `op` of block `b` on `rank`.
  void add(rank_index rank, const step_block& b, const layer_op& op) {
    ops.push_back({rank, op.pass, b.micro_batch, b.virtual_stage, op.layer, op.part, op.rows});
  }
  //! Records transfer `t` (call once per transfer: from its source).
  void add(const step_transfer& t) {
    transfers.push_back({t.traffic, t.src, t.dst, t.bytes, t.from.tensor, t.from.pass, t.from.micro_batch, t.from.virtual_stage,
                         t.from.layer, t.from.offset});
  }
  //! Records what one run of an attention program recorded (`r`, in its CP ranks), for
  //! attention `a` of block `b`.
  void add(const step_block& b, const block_attention& a, const execution_record& r) {
    const auto global = [&](rank_index cp_rank) { return a.ranks[static_cast<std::size_t>(cp_rank)]; };
    for (const recorded_transfer& t : r.transfers)
      attention_transfers.push_back({b.micro_batch, a.layer, a.pass, t.level, t.round, global(t.src), global(t.dst), t.bytes});
    for (const recorded_launch& l : r.launches)
      attention_launches.push_back({global(l.rank), b.micro_batch, a.layer, a.pass, l.level, l.round, l.blocks, l.rows});
  }
  //! Appends another record (e.g. another rank's).
  void merge(const step_record& other) {
    ops.insert(ops.end(), other.ops.begin(), other.ops.end());
    transfers.insert(transfers.end(), other.transfers.begin(), other.transfers.end());
    attention_transfers.insert(attention_transfers.end(), other.attention_transfers.begin(), other.attention_transfers.end());
    attention_launches.insert(attention_launches.end(), other.attention_launches.begin(), other.attention_launches.end());
  }
  void sort() {
    std::sort(ops.begin(), ops.end());
    std::sort(transfers.begin(), transfers.end());
    std::sort(attention_transfers.begin(), attention_transfers.end());
    std::sort(attention_launches.begin(), attention_launches.end());
  }
  friend bool operator==(const step_record&, const step_record&) = default;
};

//! Writes `r` (sorted first) as the JSON of the file comment. Returns `os` (check it).
inline std::ostream& write_step_record_json(std::ostream& os, step_record r) {
  r.sort();
  os << "{\"format\":\"zeppelin.step_record\",\"version\":1,\"ops\":[";
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const recorded_step_op& x = r.ops[i];
    os << (i ? ",\n" : "\n") << "{\"rank\":" << x.rank << ",\"pass\":\"" << to_string(x.pass) << "\",\"mb\":" << x.micro_batch
       << ",\"vstage\":" << x.virtual_stage << ",\"layer\":" << x.layer << ",\"part\":\"" << to_string(x.part) << "\",\"rows\":" << x.rows
       << '}';
  }
  os << "],\n\"transfers\":[";
  for (std::size_t i = 0; i < r.transfers.size(); ++i) {
    const recorded_step_transfer& x = r.transfers[i];
    os << (i ? ",\n" : "\n") << "{\"class\":\"" << to_string(x.traffic) << "\",\"src\":" << x.src << ",\"dst\":" << x.dst
       << ",\"bytes\":" << x.bytes << ",\"tensor\":\"" << to_string(x.tensor) << "\",\"pass\":\"" << to_string(x.pass)
       << "\",\"mb\":" << x.micro_batch << ",\"vstage\":" << x.virtual_stage << ",\"layer\":" << x.layer << ",\"offset\":" << x.offset
       << '}';
  }
  os << "],\n\"attention_transfers\":[";
  for (std::size_t i = 0; i < r.attention_transfers.size(); ++i) {
    const recorded_attention_transfer& x = r.attention_transfers[i];
    os << (i ? ",\n" : "\n") << "{\"mb\":" << x.micro_batch << ",\"layer\":" << x.layer << ",\"pass\":\"" << to_string(x.pass)
       << "\",\"level\":" << x.level << ",\"round\":" << x.round << ",\"src\":" << x.src << ",\"dst\":" << x.dst << ",\"bytes\":" << x.bytes
       << '}';
  }
  os << "],\n\"attention_launches\":[";
  for (std::size_t i = 0; i < r.attention_launches.size(); ++i) {
    const recorded_attention_launch& x = r.attention_launches[i];
    os << (i ? ",\n" : "\n") << "{\"rank\":" << x.rank << ",\"mb\":" << x.micro_batch << ",\"layer\":" << x.layer << ",\"pass\":\""
       << to_string(x.pass) << "\",\"level\":" << x.level << ",\"round\":" << x.round << ",\"blocks\":" << x.blocks
       << ",\"rows\":" << x.rows << '}';
  }
  os << "]}\n";
  return os;
}

ZEPPELIN_NAMESPACE_END
