// zeppelin/program/record.hpp
// The execution record: what a backend actually moved and launched, in one comparable form.
//   in : entries appended by a backend while it runs a program (the host and device
//        engines: the pieces their rank sends and the launches it makes; the simulator: the
//        flows and launch tasks it prices, once per layer)
//   out: sorted lists, written as JSON
//        {"format":"zeppelin.record","version":1,"transfers":[{"level":L,"round":K,"pass":"fwd"|"bwd","src":S,"dst":D,"bytes":B},...],
//         "launches":[{"rank":R,"level":L,"round":K,"pass":..,"blocks":N,"rows":Q},...]}
//        one entry per line, transfers sorted by (level, round, pass, src, dst, bytes) and
//        launches by (rank, level, round, pass, blocks, rows). level indexes the program's
//        levels (program/program.hpp), round its rounds; a transfer is one routed piece
//        (a proxy-routed payload shows its dispatch, transfer and combine hops), blocks are
//        the launch's attention blocks (without the device's gap fillers) and rows the query
//        rows they cover.
// Two backends executed the same thing exactly when their records are equal.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/program.hpp>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <tuple>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct recorded_transfer {
  std::int32_t level = 0;
  std::int32_t round = 0;
  pass_kind pass = pass_kind::forward;
  rank_index src = 0;
  rank_index dst = 0;
  std::int64_t bytes = 0;
  // == spelled out: the one <=> implies is declared but never defined by nvcc 13's front end
  friend constexpr bool operator==(const recorded_transfer&, const recorded_transfer&) = default;
  friend constexpr auto operator<=>(const recorded_transfer&, const recorded_transfer&) = default;
};

struct recorded_launch {
  rank_index rank = 0;
  std::int32_t level = 0;
  std::int32_t round = 0;
  pass_kind pass = pass_kind::forward;
  std::int64_t blocks = 0;
  token_count rows = 0;
  // == spelled out: the one <=> implies is declared but never defined by nvcc 13's front end
  friend constexpr bool operator==(const recorded_launch&, const recorded_launch&) = default;
  friend constexpr auto operator<=>(const recorded_launch&, const recorded_launch&) = default;
};

struct execution_record {
  std::vector<recorded_transfer> transfers;
  std::vector<recorded_launch> launches;

  //! Records piece `piece` of phase `ph`.
  void add(const program_phase& ph, const transfer& piece) {
    transfers.push_back({ph.level, ph.round, ph.pass, piece.src, piece.dst, piece.bytes});
  }
  //! Records launch `l`.
  void add(const program_launch& l) {
    launches.push_back({l.rank, l.level, l.round, l.pass, static_cast<std::int64_t>(l.blocks.size()), l.rows()});
  }
  //! Appends another record (e.g. another rank's).
  void merge(const execution_record& other) {
    transfers.insert(transfers.end(), other.transfers.begin(), other.transfers.end());
    launches.insert(launches.end(), other.launches.begin(), other.launches.end());
  }
  void sort() {
    std::sort(transfers.begin(), transfers.end());
    std::sort(launches.begin(), launches.end());
  }
  friend bool operator==(const execution_record&, const execution_record&) = default;
};

//! What the program itself says one execution of `passes` moves and launches (every piece of
//! every phase once, every launch once), sorted: the reference the backends' records equal.
[[nodiscard]] inline execution_record program_record(const execution_program& prog) {
  execution_record out;
  for (const program_phase& ph : prog.phases)
    for (const transfer& piece : ph.pieces) out.add(ph, piece);
  for (const program_launch& l : prog.launches) out.add(l);
  out.sort();
  return out;
}

//! Writes `r` (sorted first) as the JSON of the file comment.
inline void write_record_json(std::ostream& os, execution_record r) {
  r.sort();
  os << "{\"format\":\"zeppelin.record\",\"version\":1,\"transfers\":[";
  for (std::size_t i = 0; i < r.transfers.size(); ++i) {
    const recorded_transfer& t = r.transfers[i];
    os << (i ? ",\n" : "\n") << "{\"level\":" << t.level << ",\"round\":" << t.round << ",\"pass\":\"" << to_string(t.pass)
       << "\",\"src\":" << t.src << ",\"dst\":" << t.dst << ",\"bytes\":" << t.bytes << '}';
  }
  os << "],\n\"launches\":[";
  for (std::size_t i = 0; i < r.launches.size(); ++i) {
    const recorded_launch& l = r.launches[i];
    os << (i ? ",\n" : "\n") << "{\"rank\":" << l.rank << ",\"level\":" << l.level << ",\"round\":" << l.round << ",\"pass\":\""
       << to_string(l.pass) << "\",\"blocks\":" << l.blocks << ",\"rows\":" << l.rows << '}';
  }
  os << "]}\n";
}

ZEPPELIN_NAMESPACE_END
