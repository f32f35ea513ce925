// zeppelin/step/step_plan_json.hpp
// A step plan (step/step_plan.hpp) as JSON and back: the text form of
// step/step_plan_bytes.hpp, for files, logs and other languages.
//   write_step_plan_json(os, step_plan) -> os
//     one line:
//     {"format":"zeppelin.step_plan","version":1,"fingerprint":"<16 hex digits>","nodes",
//      "gpus_per_node","sync":"all_reduce|sharded_optimizer|fully_sharded|switching",
//      "documents":[...],
//      "replicas":[{"tp","cp","pp","ranks":[...],"layers":[...],
//                   "tp_mode":"all_reduce|sequence_parallel",
//                   "schedule":{"kind":"gpipe|1f1b|interleaved|chunk-1f1b","virtual_stages",
//                               "chains":[...]},
//                   "recompute":[...],
//                   "micro_batches":[{"pieces":[{"document","begin","end"}],
//                                     "layout":<the plan object of core/plan_json.hpp>}]}]}
//     "fingerprint" is fingerprint(step_plan) (step/fingerprint.hpp); virtual_stages is 1 but
//     for interleaved, chains empty but for chunk-1f1b; each layout is the object
//     write_plan_json writes (without lengths: its sequences are the pieces), with its own
//     format, version and fingerprint. Replica by replica to the stream: memory O(1) beyond
//     the plan.
//   read_step_plan_json(text) -> step_plan, equal (operator==) to the one written
//     checks the format name and version, every member's type and range (nodes, gpus_per_node
//     and degrees >= 1, ranks inside nodes x gpus_per_node, a piece's document one of
//     "documents", virtual stages >= 1 and 1 but for interleaved, chains >= 1 and only for
//     chunk-1f1b, counts and token positions >= 0), the enum names, each layout as
//     read_plan_json checks a plan (its fingerprint included), and that the fingerprint
//     written equals fingerprint() of the step plan read (a hand-edited or corrupted file is
//     refused, not run). Members it does not know are ignored. It does not validate the plan
//     against a cluster and model: step/validate.hpp does.
// Errors: invalid_argument naming the member (and the byte offset for malformed JSON); inside
// a replica, the message names replicas[i] (and micro_batches[k].layout) and the error
// carries "replica" (and "micro_batch") with the numbers of the check that failed.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/detail/json_fields.hpp>
#include <zeppelin/core/detail/json_reader.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan_json.hpp>
#include <zeppelin/schedule/pipeline/any_schedule.hpp>
#include <zeppelin/step/fingerprint.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The JSON step plan format's name and version (the reader accepts exactly these).
inline constexpr std::string_view step_plan_json_format = "zeppelin.step_plan";
inline constexpr int step_plan_json_version = 1;

namespace detail {
// The step plan's JSON object, without the line end: what write_step_plan_json writes, and
// what formats that embed a step plan write as a member's value.
inline void write_step_plan_json_object(std::ostream& os, const step_plan& p) {
  os << "{\"format\":\"" << step_plan_json_format << "\",\"version\":" << step_plan_json_version << ",\"fingerprint\":\""
     << fingerprint_hex(fingerprint(p)) << "\",\"nodes\":" << p.nodes << ",\"gpus_per_node\":" << p.gpus_per_node
     << ",\"sync\":\"" << to_string(p.sync) << "\",\"documents\":[";
  for (std::size_t d = 0; d < p.documents.size(); ++d) os << (d ? "," : "") << p.documents[d];
  os << "],\"replicas\":[";
  for (std::size_t i = 0; i < p.replicas.size(); ++i) {
    const step_replica& r = p.replicas[i];
    os << (i ? "," : "") << "{\"tp\":" << r.tp << ",\"cp\":" << r.cp << ",\"pp\":" << r.pp << ",\"ranks\":[";
    for (std::size_t k = 0; k < r.ranks.size(); ++k) os << (k ? "," : "") << r.ranks[k];
    os << "],\"layers\":[";
    for (std::size_t k = 0; k < r.layers.size(); ++k) os << (k ? "," : "") << r.layers[k];
    os << "],\"tp_mode\":\"" << to_string(r.tp_mode) << "\",\"schedule\":{\"kind\":\"" << to_string(r.schedule.kind())
       << "\",\"virtual_stages\":" << r.schedule.virtual_stages() << ",\"chains\":[";
    if (const auto* chunked = std::get_if<chunk_one_f_one_b>(&r.schedule.policy))
      for (std::size_t k = 0; k < chunked->chains.size(); ++k) os << (k ? "," : "") << chunked->chains[k];
    os << "]},\"recompute\":[";
    for (std::size_t k = 0; k < r.recompute.size(); ++k) os << (k ? "," : "") << r.recompute[k];
    os << "],\"micro_batches\":[";
    for (std::size_t k = 0; k < r.micro_batches.size(); ++k) {
      const step_micro_batch& mb = r.micro_batches[k];
      os << (k ? "," : "") << "{\"pieces\":[";
      for (std::size_t j = 0; j < mb.pieces.size(); ++j)
        os << (j ? "," : "") << "{\"document\":" << mb.pieces[j].document << ",\"begin\":" << mb.pieces[j].begin
           << ",\"end\":" << mb.pieces[j].end << '}';
      os << "],\"layout\":";
      write_plan_json_object(os, mb.layout, nullptr, {});
      os << '}';
    }
    os << "]}";
  }
  os << "]}";
}
}  // namespace detail

//! Writes `p` as one line of JSON (see the file comment); returns `os`.
inline std::ostream& write_step_plan_json(std::ostream& os, const step_plan& p) {
  detail::write_step_plan_json_object(os, p);
  return os << '\n';
}

namespace detail {
// The typed member reads of the step plan format (core/detail/json_fields.hpp).
inline constexpr json_fields step_plan_json_fields{"step plan JSON"};

// e.what() without the numbers and location core/error.hpp appends to the message (the whole
// of it when it does not end so), for a message that says where e was thrown.
inline std::string bare_message(const error& e) {
  std::ostringstream suffix;
  suffix.precision(17);
  if (!e.values().empty()) {
    suffix << " (";
    for (std::size_t i = 0; i < e.values().size(); ++i) suffix << (i ? ", " : "") << e.values()[i].name << '=' << e.values()[i].value;
    suffix << ')';
  }
  suffix << " [" << e.file() << ':' << e.line() << ']';
  std::string text = e.what();
  const std::string s = suffix.str();
  if (text.size() >= s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) text.resize(text.size() - s.size());
  return text;
}

// Replica `index` of a step plan JSON (see read_step_plan_json); an error names the replica
// (and the micro-batch whose layout it is in).
inline step_replica read_step_replica_json(const json_value& v, std::size_t index, std::int64_t ranks, std::int64_t documents) {
  std::int64_t layout_of = -1;  // the micro-batch whose layout is being read
  try {
    step_replica r;
    r.tp = step_plan_json_fields.integer<int>(v.at("tp"), "tp", 1);
    r.cp = step_plan_json_fields.integer<int>(v.at("cp"), "cp", 1);
    r.pp = step_plan_json_fields.integer<int>(v.at("pp"), "pp", 1);
    for (const json_value& x : v.at("ranks").as_array("ranks")) r.ranks.push_back(step_plan_json_fields.integer<rank_index>(x, "ranks[]", 0, ranks - 1));
    for (const json_value& x : v.at("layers").as_array("layers")) r.layers.push_back(step_plan_json_fields.integer<int>(x, "layers[]", 0));
    constexpr tp_collectives modes[] = {tp_collectives::all_reduce, tp_collectives::sequence_parallel};
    r.tp_mode = step_plan_json_fields.choice(v.at("tp_mode"), "tp_mode", modes);

    const json_value& schedule = v.at("schedule");
    constexpr pipeline_schedule_kind kinds[] = {pipeline_schedule_kind::gpipe, pipeline_schedule_kind::one_f_one_b,
                                                pipeline_schedule_kind::interleaved, pipeline_schedule_kind::chunk_one_f_one_b};
    const pipeline_schedule_kind kind = step_plan_json_fields.choice(schedule.at("kind"), "schedule kind", kinds);
    const int virtual_stages = step_plan_json_fields.integer<int>(schedule.at("virtual_stages"), "schedule.virtual_stages", 1);
    ZEPPELIN_EXPECTS(kind == pipeline_schedule_kind::interleaved || virtual_stages == 1,
                     "step plan JSON: \"schedule.virtual_stages\" other than 1 apply to the interleaved schedule only",
                     {{"virtual_stages", double(virtual_stages)}});
    std::vector<int> chains;
    for (const json_value& x : schedule.at("chains").as_array("schedule.chains")) chains.push_back(step_plan_json_fields.integer<int>(x, "schedule.chains[]", 1));
    ZEPPELIN_EXPECTS(kind == pipeline_schedule_kind::chunk_one_f_one_b || chains.empty(),
                     "step plan JSON: \"schedule.chains\" apply to the chunk-1f1b schedule only", {{"chains", double(chains.size())}});
    switch (kind) {
      case pipeline_schedule_kind::gpipe: r.schedule = {gpipe{}}; break;
      case pipeline_schedule_kind::one_f_one_b: r.schedule = {one_f_one_b{}}; break;
      case pipeline_schedule_kind::interleaved: r.schedule = {interleaved_one_f_one_b{.virtual_stages = virtual_stages}}; break;
      case pipeline_schedule_kind::chunk_one_f_one_b: r.schedule = {chunk_one_f_one_b{.chains = std::move(chains)}}; break;
    }

    for (const json_value& x : v.at("recompute").as_array("recompute")) r.recompute.push_back(step_plan_json_fields.integer<std::int32_t>(x, "recompute[]", 0));
    const json_array& micro_batches = v.at("micro_batches").as_array("micro_batches");
    for (std::size_t k = 0; k < micro_batches.size(); ++k) {
      step_micro_batch mb;
      for (const json_value& x : micro_batches[k].at("pieces").as_array("micro_batches[].pieces")) {
        step_piece piece;
        piece.document = step_plan_json_fields.integer<std::int64_t>(x.at("document"), "pieces[].document", 0, documents - 1);
        piece.begin = step_plan_json_fields.integer<token_count>(x.at("begin"), "pieces[].begin", 0);
        piece.end = step_plan_json_fields.integer<token_count>(x.at("end"), "pieces[].end", 0);
        mb.pieces.push_back(piece);
      }
      layout_of = static_cast<std::int64_t>(k);
      mb.layout = read_plan_json_object(micro_batches[k].at("layout")).layout;
      layout_of = -1;
      r.micro_batches.push_back(std::move(mb));
    }
    return r;
  } catch (const invalid_argument& e) {
    std::vector<named_value> values = e.values();
    values.push_back({"replica", double(index)});
    std::string where = "replicas[" + std::to_string(index) + "]";
    if (layout_of >= 0) {
      values.push_back({"micro_batch", double(layout_of)});
      where += ".micro_batches[" + std::to_string(layout_of) + "].layout";
    }
    std::string message = bare_message(e);
    constexpr std::string_view own = "step plan JSON: ";
    if (message.starts_with(own)) message.erase(0, own.size());
    throw invalid_argument("step plan JSON: in " + where + ": " + message, std::move(values), e.file(), e.line());
  }
}
}  // namespace detail

namespace detail {
// The step plan of a parsed step plan object, checked as the file comment says: what
// read_step_plan_json reads, and what formats that embed a step plan read from a member.
inline step_plan read_step_plan_json_object(const json_value& doc) {
  const json_fields& fields = step_plan_json_fields;
  ZEPPELIN_EXPECTS(doc.is_object(), "step plan JSON: the document must be an object", {});
  ZEPPELIN_EXPECTS(doc.at("format").as_string("format") == step_plan_json_format,
                   "step plan JSON: \"format\" must be \"zeppelin.step_plan\", not \"" + doc.at("format").as_string("format").substr(0, 40) + "\"",
                   {});
  const auto version = doc.at("version").as_int("version");
  ZEPPELIN_EXPECTS(version == step_plan_json_version, "step plan JSON: unsupported version",
                   {{"version", double(version)}, {"supported", double(step_plan_json_version)}});
  step_plan p;
  p.nodes = fields.integer<int>(doc.at("nodes"), "nodes", 1);
  p.gpus_per_node = fields.integer<int>(doc.at("gpus_per_node"), "gpus_per_node", 1);
  const std::int64_t ranks = std::int64_t{p.nodes} * p.gpus_per_node;
  ZEPPELIN_EXPECTS(ranks <= (std::int64_t{1} << 30), "step plan JSON: too many ranks",
                   {{"nodes", double(p.nodes)}, {"gpus_per_node", double(p.gpus_per_node)}});
  constexpr gradient_sync syncs[] = {gradient_sync::all_reduce, gradient_sync::sharded_optimizer, gradient_sync::fully_sharded,
                                     gradient_sync::switching};
  p.sync = fields.choice(doc.at("sync"), "sync", syncs);
  for (const json_value& d : doc.at("documents").as_array("documents")) p.documents.push_back(fields.integer<token_count>(d, "documents[]", 0));

  const json_array& replicas = doc.at("replicas").as_array("replicas");
  for (std::size_t i = 0; i < replicas.size(); ++i)
    p.replicas.push_back(read_step_replica_json(replicas[i], i, ranks, static_cast<std::int64_t>(p.documents.size())));

  const std::string written = doc.at("fingerprint").as_string("fingerprint");
  const std::string computed = fingerprint_hex(fingerprint(p));
  ZEPPELIN_EXPECTS(written == computed,
                   "step plan JSON: the fingerprint written (" + written.substr(0, 20) + ") is not the step plan's (" + computed +
                       "): the file was edited or corrupted",
                   {});
  return p;
}
}  // namespace detail

//! Reads what write_step_plan_json wrote (see the file comment).
[[nodiscard]] inline step_plan read_step_plan_json(std::string_view text) {
  return detail::read_step_plan_json_object(detail::parse_json(text));
}

ZEPPELIN_NAMESPACE_END
