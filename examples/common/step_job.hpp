// examples/common/step_job.hpp
// A step job: what a trainer ran in one step (train_gpt --write-job), as a file another tool
// builds the very same step program from (zeppelin pipeline --job simulates it).
//   in : write_step_job(os, job): the cluster preset and size, the model, the step program
//        options and the step plan; read_step_job(text): what write_step_job wrote
//   out: one JSON object on one line,
//        {"format":"zeppelin.step_job","version":1,
//         "cluster":{"preset":NAME,"nodes":N,"gpus_per_node":P},
//         "model":{"name","layers","hidden","heads","kv_heads","head_dim","ffn_hidden","vocab",
//                  "gated_mlp","experts","experts_per_token","bytes_per_element"},
//         "options":{"activation_bytes","parameter_bytes","gradient_bytes","accumulator_bytes",
//                    "attention":{"launch":"per_group|fused_round","engine":"in_order|prioritized",
//                                 "router":"direct|proxy",
//                                 "remap":null|"max-send"|"max-send-receive"|"min-inter-volume",
//                                 "max_member_rounds","max_shard_pairs"}},
//         "plan":<the step plan object of zeppelin/step/step_plan_json.hpp>}
//        the names are the library's to_string names; read_step_job returns a job equal to
//        the one written. The cluster is cluster_by_name(preset, nodes, gpus_per_node)
//        (core/topology_presets.hpp); the attention's wire format is not written, since
//        make_step_program sets it from the model.
// Errors (invalid_argument): write_step_job, for a proxy router whose members are not the
// defaults (the job names a router by its kind only, so it could not be read back as it ran);
// read_step_job, naming the member, for malformed JSON, another format or version, a missing
// member, a value of the wrong type or out of range, an unknown name, an unknown cluster
// preset; and what read_step_plan_json throws for the plan (its fingerprint checked).
// Host-only.
#pragma once

#include <zeppelin/core/detail/json_fields.hpp>
#include <zeppelin/core/detail/json_reader.hpp>
#include <zeppelin/core/detail/json_writer.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/remap/problem.hpp>
#include <zeppelin/step/program.hpp>
#include <zeppelin/step/step_plan.hpp>
#include <zeppelin/step/step_plan_json.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>

namespace example_cli {

//! The JSON step job format's name and version (the reader accepts exactly these).
inline constexpr std::string_view step_job_format = "zeppelin.step_job";
inline constexpr int step_job_version = 1;

//! One step as a job: the cluster it ran on, the model, the options and the step plan.
struct step_job {
  std::string cluster;     //!< a cluster_by_name preset
  int nodes = 1;
  int gpus_per_node = 1;
  zeppelin::model_config model;
  zeppelin::step_program_options options;
  zeppelin::step_plan plan;

  //! The cluster's topology: cluster_by_name(cluster, nodes, gpus_per_node).
  [[nodiscard]] zeppelin::topology topology() const { return zeppelin::cluster_by_name(cluster, nodes, gpus_per_node); }
  friend bool operator==(const step_job&, const step_job&) = default;
};

namespace detail {

// The typed member reads of the step job format (core/detail/json_fields.hpp).
inline constexpr zeppelin::detail::json_fields job_fields{"step job"};

}  // namespace detail

//! Writes `job` (see the file comment). Returns `os` (check it).
inline std::ostream& write_step_job(std::ostream& os, const step_job& job) {
  using namespace zeppelin;
  const program_options& a = job.options.attention;
  const auto* proxy = std::get_if<proxy_router>(&a.router.policy);
  ZEPPELIN_EXPECTS(proxy == nullptr || *proxy == proxy_router{},
                   "step job: the attention's proxy router has members other than the defaults (proxies, max_proxies, fallback, link "
                   "model), which a job cannot hold: it names the router by its kind only",
                   {{"proxies", double(proxy ? proxy->proxies.size() : 0)}, {"max_proxies", double(proxy ? proxy->max_proxies : 0)}});
  const model_config& m = job.model;
  os << "{\"format\":\"" << step_job_format << "\",\"version\":" << step_job_version << ",\"cluster\":{\"preset\":";
  zeppelin::detail::write_json_string(os, job.cluster);
  os << ",\"nodes\":" << job.nodes << ",\"gpus_per_node\":" << job.gpus_per_node << "},\"model\":{\"name\":";
  zeppelin::detail::write_json_string(os, m.name);
  os << ",\"layers\":" << m.layers << ",\"hidden\":" << m.hidden << ",\"heads\":" << m.heads << ",\"kv_heads\":" << m.kv_heads
     << ",\"head_dim\":" << m.head_dim << ",\"ffn_hidden\":" << m.ffn_hidden << ",\"vocab\":" << m.vocab
     << ",\"gated_mlp\":" << (m.gated_mlp ? "true" : "false") << ",\"experts\":" << m.experts
     << ",\"experts_per_token\":" << m.experts_per_token << ",\"bytes_per_element\":" << m.bytes_per_element << "},\"options\":{";
  const step_program_options& o = job.options;
  os << "\"activation_bytes\":" << o.activation_bytes << ",\"parameter_bytes\":" << o.parameter_bytes
     << ",\"gradient_bytes\":" << o.gradient_bytes << ",\"accumulator_bytes\":" << o.accumulator_bytes << ",\"attention\":{\"launch\":\""
     << to_string(a.launch) << "\",\"engine\":\"" << to_string(a.engine) << "\",\"router\":\"" << (proxy ? "proxy" : "direct")
     << "\",\"remap\":";
  if (a.remap) os << '"' << to_string(*a.remap) << '"';
  else os << "null";
  os << ",\"max_member_rounds\":" << a.max_member_rounds << ",\"max_shard_pairs\":" << a.max_shard_pairs << "}},\"plan\":";
  zeppelin::detail::write_step_plan_json_object(os, job.plan);
  return os << "}\n";
}

//! Reads what write_step_job wrote (see the file comment).
[[nodiscard]] inline step_job read_step_job(std::string_view text) {
  using namespace zeppelin;
  const zeppelin::detail::json_fields& fields = detail::job_fields;
  const zeppelin::detail::json_value doc = zeppelin::detail::parse_json(text);
  ZEPPELIN_EXPECTS(doc.is_object(), "step job: the document must be an object", {});
  const std::string& format = doc.at("format").as_string("format");
  ZEPPELIN_EXPECTS(format == step_job_format, "step job: \"format\" must be \"zeppelin.step_job\", not \"" + format.substr(0, 40) + "\"", {});
  const auto version = doc.at("version").as_int("version");
  ZEPPELIN_EXPECTS(version == step_job_version, "step job: unsupported version",
                   {{"version", double(version)}, {"supported", double(step_job_version)}});

  step_job job;
  const auto& cluster = doc.at("cluster");
  job.cluster = cluster.at("preset").as_string("cluster.preset");
  job.nodes = fields.integer<int>(cluster.at("nodes"), "cluster.nodes", 1, 1 << 20);
  job.gpus_per_node = fields.integer<int>(cluster.at("gpus_per_node"), "cluster.gpus_per_node", 1, 1 << 20);
  (void)job.topology();  // an unknown preset fails here, naming the presets

  const auto& m = doc.at("model");
  model_config& model = job.model;
  model.name = m.at("name").as_string("model.name");
  model.layers = fields.integer<int>(m.at("layers"), "model.layers", 1);
  model.hidden = fields.integer<int>(m.at("hidden"), "model.hidden", 1);
  model.heads = fields.integer<int>(m.at("heads"), "model.heads", 1);
  model.kv_heads = fields.integer<int>(m.at("kv_heads"), "model.kv_heads", 1);
  model.head_dim = fields.integer<int>(m.at("head_dim"), "model.head_dim", 1);
  model.ffn_hidden = fields.integer<int>(m.at("ffn_hidden"), "model.ffn_hidden", 1);
  model.vocab = fields.integer<int>(m.at("vocab"), "model.vocab", 1);
  model.gated_mlp = fields.boolean(m.at("gated_mlp"), "model.gated_mlp");
  model.experts = fields.integer<int>(m.at("experts"), "model.experts", 0);
  model.experts_per_token = fields.integer<int>(m.at("experts_per_token"), "model.experts_per_token", 0);
  model.bytes_per_element = fields.integer<int>(m.at("bytes_per_element"), "model.bytes_per_element", 1);
  validate(model);

  const auto& o = doc.at("options");
  step_program_options& po = job.options;
  po.activation_bytes = fields.integer<int>(o.at("activation_bytes"), "options.activation_bytes", 1);
  po.parameter_bytes = fields.integer<int>(o.at("parameter_bytes"), "options.parameter_bytes", 1);
  po.gradient_bytes = fields.integer<int>(o.at("gradient_bytes"), "options.gradient_bytes", 1);
  po.accumulator_bytes = fields.integer<int>(o.at("accumulator_bytes"), "options.accumulator_bytes", 1);
  const auto& a = o.at("attention");
  constexpr launch_policy launches[] = {launch_policy::per_group, launch_policy::fused_round};
  constexpr engine_policy engines[] = {engine_policy::in_order, engine_policy::prioritized};
  po.attention.launch = fields.choice(a.at("launch"), "options.attention.launch", launches);
  po.attention.engine = fields.choice(a.at("engine"), "options.attention.engine", engines);
  const std::string& router = a.at("router").as_string("options.attention.router");
  ZEPPELIN_EXPECTS(router == "direct" || router == "proxy",
                   "step job: unknown options.attention.router \"" + router.substr(0, 40) + "\" (valid: direct, proxy)", {});
  if (router == "proxy") po.attention.router.policy = proxy_router{};
  if (const auto& remap = a.at("remap"); !remap.is_null()) {
    constexpr remap_objective objectives[] = {remap_objective::max_send, remap_objective::max_send_receive, remap_objective::min_inter_volume};
    po.attention.remap = fields.choice(remap, "options.attention.remap", objectives);
  }
  po.attention.max_member_rounds = fields.integer<std::int64_t>(a.at("max_member_rounds"), "options.attention.max_member_rounds", 1);
  po.attention.max_shard_pairs = fields.integer<std::int64_t>(a.at("max_shard_pairs"), "options.attention.max_shard_pairs", 1);

  job.plan = zeppelin::detail::read_step_plan_json_object(doc.at("plan"));
  return job;
}

}  // namespace example_cli
