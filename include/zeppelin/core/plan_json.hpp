// zeppelin/core/plan_json.hpp
// A plan as JSON and back: the text form of core/plan_bytes.hpp, for files, logs and other
// languages (`zeppelin plan --json` writes it, `zeppelin plan --read` reads it).
//   write_plan_json(os, plan, lengths = nullptr, extra = "")
//     one line:
//     {"format":"zeppelin.plan","version":1,"fingerprint":"<16 hex digits>","method",
//      "topology":{"nodes","gpus_per_node"},"capacity","micro_batches",
//      ["lengths":[...],]  (the batch's sequence lengths, when given: seq indexes them)
//      "ranks":[{"rank","node","shards":[{"seq","begin","end","group","micro_batch"}]}],
//      "groups":[{"id","zone":"local|intra|inter","collective":"ring|all_gather|all_to_all",
//                 "ranks":[...]}],
//      "notes":[{"kind","text","sequences":[...],"values":[{"name","value"}]}]<extra>}
//     "group" is null for a sequence held by one rank; `extra`, when not empty, is written
//     verbatim before the closing brace and must be ",\"name\":<JSON value>"... members.
//     Shard by shard to the stream: memory O(1) beyond the plan.
//   read_plan_json(text) -> plan_document{plan, lengths (empty when absent)}
//     checks the format name and version, every member's type and range, the ranks' and
//     groups' indexes, and that the fingerprint written equals fingerprint() of the plan read
//     (a hand-edited or corrupted file is refused, not planned on). Members it does not know
//     are ignored (the tool's "explain"). It does not validate the plan against a batch and
//     topology: core/validate.hpp does.
// Errors: invalid_argument naming the member (and the byte offset for malformed JSON).
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/detail/json_fields.hpp>
#include <zeppelin/core/detail/json_reader.hpp>
#include <zeppelin/core/detail/json_writer.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/plan_indices.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The JSON plan format's name and version (the reader accepts exactly these).
inline constexpr std::string_view plan_json_format = "zeppelin.plan";
inline constexpr int plan_json_version = 1;

namespace detail {
inline void write_json_string(std::ostream& os, std::string_view s) { os << '"' << json_escape(s) << '"'; }

inline std::string fingerprint_hex(std::uint64_t f) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(f));
  return buf;
}
}  // namespace detail

namespace detail {
// The plan object of the file comment without the line's newline: what write_plan_json writes,
// and what formats that embed a plan write as a member's value.
inline void write_plan_json_object(std::ostream& os, const plan& p, const batch* lengths, std::string_view extra) {
  os << "{\"format\":\"" << plan_json_format << "\",\"version\":" << plan_json_version << ",\"fingerprint\":\""
     << detail::fingerprint_hex(fingerprint(p)) << "\",\"method\":";
  detail::write_json_string(os, p.method);
  os << ",\"topology\":{\"nodes\":" << p.nodes << ",\"gpus_per_node\":" << p.gpus_per_node << "},\"capacity\":" << p.capacity
     << ",\"micro_batches\":" << p.micro_batches();
  if (lengths) {
    os << ",\"lengths\":[";
    for (sequence_index s = 0; s < lengths->size(); ++s) os << (s ? "," : "") << lengths->length(s);
    os << ']';
  }
  os << ",\"ranks\":[";
  for (rank_index r = 0; r < p.num_ranks(); ++r) {
    os << (r ? "," : "") << "{\"rank\":" << r << ",\"node\":" << (p.gpus_per_node > 0 ? r / p.gpus_per_node : 0) << ",\"shards\":[";
    bool first = true;
    for (const shard& s : p.placements[static_cast<std::size_t>(r)].shards) {
      os << (first ? "" : ",") << "{\"seq\":" << s.seq << ",\"begin\":" << s.range.begin << ",\"end\":" << s.range.end << ",\"group\":";
      if (s.group == no_group) os << "null";
      else os << s.group;
      os << ",\"micro_batch\":" << s.micro_batch << '}';
      first = false;
    }
    os << "]}";
  }
  os << "],\"groups\":[";
  for (std::size_t i = 0; i < p.groups.size(); ++i) {
    const ring_group& g = p.groups[i];
    os << (i ? "," : "") << "{\"id\":" << g.id << ",\"zone\":\"" << to_string(g.zone) << "\",\"collective\":\""
       << to_string(g.collective) << "\",\"ranks\":[";
    for (std::size_t k = 0; k < g.ranks.size(); ++k) os << (k ? "," : "") << g.ranks[k];
    os << "]}";
  }
  os << "],\"notes\":[";
  for (std::size_t i = 0; i < p.notes.size(); ++i) {
    const plan_note& n = p.notes[i];
    os << (i ? "," : "") << "{\"kind\":\"" << to_string(n.kind) << "\",\"text\":";
    detail::write_json_string(os, n.text);
    os << ",\"sequences\":[";
    for (std::size_t k = 0; k < n.sequences.size(); ++k) os << (k ? "," : "") << n.sequences[k];
    os << "],\"values\":[";
    for (std::size_t k = 0; k < n.values.size(); ++k) {
      os << (k ? "," : "") << "{\"name\":";
      detail::write_json_string(os, n.values[k].name);
      os << ",\"value\":" << detail::json_double(n.values[k].value) << '}';
    }
    os << "]}";
  }
  os << ']' << extra << '}';
}
}  // namespace detail

//! Writes `p` (and the lengths of `lengths`, when given) as one line of JSON (file comment).
inline void write_plan_json(std::ostream& os, const plan& p, const batch* lengths = nullptr, std::string_view extra = {}) {
  detail::write_plan_json_object(os, p, lengths, extra);
  os << '\n';
}

//! A plan read back, with the batch lengths when the file has them.
struct plan_document {
  plan layout;
  std::vector<token_count> lengths{};  //!< empty when the file has no "lengths"
};

namespace detail {
// The typed member reads of the plan format (core/detail/json_fields.hpp).
inline constexpr json_fields plan_json_fields{"plan JSON"};
}  // namespace detail

namespace detail {
// The plan of a parsed plan object, checked as the file comment says: what read_plan_json
// reads, and what formats that embed a plan read from a member's value.
inline plan_document read_plan_json_object(const json_value& doc) {
  ZEPPELIN_EXPECTS(doc.is_object(), "plan JSON: the document must be an object", {});
  ZEPPELIN_EXPECTS(doc.at("format").as_string("format") == plan_json_format,
                   "plan JSON: \"format\" must be \"zeppelin.plan\", not \"" + doc.at("format").as_string("format").substr(0, 40) + "\"",
                   {});
  const auto version = doc.at("version").as_int("version");
  ZEPPELIN_EXPECTS(version == plan_json_version, "plan JSON: unsupported version",
                   {{"version", double(version)}, {"supported", double(plan_json_version)}});
  plan_document out;
  plan& p = out.layout;
  p.method = doc.at("method").as_string("method");
  const detail::json_value& topo = doc.at("topology");
  p.nodes = plan_json_fields.integer<int>(topo.at("nodes"), "topology.nodes", 1);
  p.gpus_per_node = plan_json_fields.integer<int>(topo.at("gpus_per_node"), "topology.gpus_per_node", 1);
  ZEPPELIN_EXPECTS(std::int64_t{p.nodes} * p.gpus_per_node <= (std::int64_t{1} << 30), "plan JSON: too many ranks",
                   {{"nodes", double(p.nodes)}, {"gpus_per_node", double(p.gpus_per_node)}});
  p.capacity = plan_json_fields.integer<token_count>(doc.at("capacity"), "capacity", 0);
  if (const detail::json_value* lengths = doc.find("lengths"))
    for (const detail::json_value& l : lengths->as_array("lengths")) out.lengths.push_back(plan_json_fields.integer<token_count>(l, "lengths[]", 0));

  const detail::json_array& ranks = doc.at("ranks").as_array("ranks");
  ZEPPELIN_EXPECTS(static_cast<std::int64_t>(ranks.size()) == std::int64_t{p.nodes} * p.gpus_per_node,
                   "plan JSON: \"ranks\" must list nodes x gpus_per_node ranks",
                   {{"ranks", double(ranks.size())}, {"nodes", double(p.nodes)}, {"gpus_per_node", double(p.gpus_per_node)}});
  p.placements.resize(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ZEPPELIN_EXPECTS(plan_json_fields.integer<std::int64_t>(ranks[r].at("rank"), "ranks[].rank") == static_cast<std::int64_t>(r),
                     "plan JSON: ranks must be listed in order", {{"position", double(r)}});
    for (const detail::json_value& s : ranks[r].at("shards").as_array("shards")) {
      shard x;
      x.seq = plan_json_fields.integer<sequence_index>(s.at("seq"), "shards[].seq", 0);
      x.range.begin = plan_json_fields.integer<token_count>(s.at("begin"), "shards[].begin", 0);
      x.range.end = plan_json_fields.integer<token_count>(s.at("end"), "shards[].end", 0);
      const detail::json_value& group = s.at("group");
      x.group = group.is_null() ? no_group : plan_json_fields.integer<group_index>(group, "shards[].group", 0);
      x.micro_batch = plan_json_fields.integer<std::int32_t>(s.at("micro_batch"), "shards[].micro_batch", 0);
      p.placements[r].shards.push_back(x);
    }
  }
  const detail::json_array& groups = doc.at("groups").as_array("groups");
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ring_group x;
    x.id = plan_json_fields.integer<group_index>(groups[g].at("id"), "groups[].id", 0);
    ZEPPELIN_EXPECTS(x.id == static_cast<group_index>(g), "plan JSON: groups must be listed in id order",
                     {{"position", double(g)}, {"id", double(x.id)}});
    constexpr zone_kind zones[] = {zone_kind::local, zone_kind::intra_node, zone_kind::inter_node};
    constexpr collective_kind collectives[] = {collective_kind::ring, collective_kind::all_gather, collective_kind::all_to_all};
    x.zone = plan_json_fields.choice(groups[g].at("zone"), "zone", zones);
    x.collective = plan_json_fields.choice(groups[g].at("collective"), "collective", collectives);
    for (const detail::json_value& r : groups[g].at("ranks").as_array("groups[].ranks"))
      x.ranks.push_back(plan_json_fields.integer<rank_index>(r, "groups[].ranks[]", 0, static_cast<std::int64_t>(ranks.size()) - 1));
    p.groups.push_back(std::move(x));
  }
  constexpr note_kind kinds[] = {note_kind::proportional_split,  note_kind::streamed_split,      note_kind::inter_node_spill,
                                 note_kind::intra_node_spill,    note_kind::metric_allocation,   note_kind::contiguous_fallback,
                                 note_kind::extra_micro_batches, note_kind::other};
  for (const detail::json_value& n : doc.at("notes").as_array("notes")) {
    plan_note x;
    x.kind = plan_json_fields.choice(n.at("kind"), "note kind", kinds);
    x.text = n.at("text").as_string("notes[].text");
    for (const detail::json_value& q : n.at("sequences").as_array("notes[].sequences"))
      x.sequences.push_back(plan_json_fields.integer<sequence_index>(q, "notes[].sequences[]", 0));
    for (const detail::json_value& v : n.at("values").as_array("notes[].values"))
      x.values.push_back({v.at("name").as_string("notes[].values[].name"), plan_json_fields.number(v.at("value"), "notes[].values[].value")});
    p.notes.push_back(std::move(x));
  }
  check_plan_indices(p, "plan JSON");

  const std::string written = doc.at("fingerprint").as_string("fingerprint");
  const std::string computed = detail::fingerprint_hex(fingerprint(p));
  ZEPPELIN_EXPECTS(written == computed,
                   "plan JSON: the fingerprint written (" + written.substr(0, 20) + ") is not the plan's (" + computed +
                       "): the file was edited or corrupted",
                   {});
  return out;
}
}  // namespace detail

//! Reads what write_plan_json wrote (see the file comment).
[[nodiscard]] inline plan_document read_plan_json(std::string_view text) {
  return detail::read_plan_json_object(detail::parse_json(text));
}

ZEPPELIN_NAMESPACE_END
