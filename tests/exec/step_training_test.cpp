// tests/exec/step_training_test.cpp
// run_step_rank (exec/step_runner.hpp) trains a toy network split over pipeline stages on the
// host loopback world, against one rank: token embedding, a stack of layers y = tanh(W x + b)
// (each one layer of the step program, its attention_input part; its other parts are the
// identity), a head z = (x * g) H with a half squared error against each row's target. The
// step plans run GPipe, 1F1B and interleaved 1F1B (V = 2) on 1 to 4 stages, micro-batches of
// different row counts, every activation kept or the layers recomputed, stages on any ranks
// (others idle), and two CP ranks per stage, whose gradients the program's ring all-reduce
// sums. After every SGD step the loss and every gradient the stage owns equal an unpipelined
// single-rank reference (same fp64 arithmetic per micro-batch) to 1e-12 relative, and so do
// the weights after the steps; a stage holds at most the schedule's in-flight bound of
// micro-batches, recomputation runs each recomputed layer's forward twice and holds fewer
// values, and a communicator of the wrong size is refused before any communication.
#include <catch2/catch.hpp>

#include "support/expect_error.hpp"

#include <zeppelin/checkpoint/basic_policies.hpp>
#include <zeppelin/comm/host_loopback.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/exec/step_runner.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/make_plan.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

using namespace zeppelin;
using namespace std::chrono_literals;

namespace {

// The toy's shape as a model_config whose parameter count (cost/pipeline_memory.hpp) is the
// toy's: a layer of width 7 holds 8 x 7 parameters either way (W and b; or, with one head of
// dimension 1 and an MLP of width 1, 3 h + h + 2 h + 2 h), the embedding and the head V x 7
// (and the head's 7 norm weights).
constexpr int width = 7;
constexpr int vocab = 5;
constexpr int layer_count = 9;  // one layer per virtual stage up to P V = 8
constexpr double learning_rate = 0.01;

model_config toy_model_config() {
  model_config m;
  m.name = "toy";
  m.layers = layer_count;
  m.hidden = width;
  m.heads = 1, m.kv_heads = 1, m.head_dim = 1;
  m.ffn_hidden = 1;
  m.vocab = vocab;
  m.gated_mlp = false;
  m.bytes_per_element = 8;
  return m;
}

using tensor = std::vector<double>;

struct network {
  tensor embed;                  // vocab x width
  std::vector<tensor> w, b;      // per layer: width x width (out, in), width
  tensor g, head;                // width; width x vocab
};

network zero_network() {
  return {tensor(vocab * width, 0.0), std::vector<tensor>(layer_count, tensor(width * width, 0.0)),
          std::vector<tensor>(layer_count, tensor(width, 0.0)), tensor(width, 0.0), tensor(width * vocab, 0.0)};
}

network random_network(std::uint64_t seed) {
  random_generator r(seed);
  network n = zero_network();
  const auto fill = [&](tensor& t, double scale) {
    for (double& x : t) x = scale * (r.uniform() - 0.5);
  };
  fill(n.embed, 2.0);
  for (auto& w : n.w) fill(w, 1.0);
  for (auto& b : n.b) fill(b, 0.2);
  for (double& x : n.g) x = 1.0 + 0.2 * (r.uniform() - 0.5);
  fill(n.head, 1.0);
  return n;
}

// One step's data: per micro-batch (one document each) its rows' tokens and targets.
struct toy_batch {
  std::vector<int> rows;
  std::vector<std::vector<int>> tokens;  // [micro-batch][row]
  std::vector<tensor> targets;           // [micro-batch]: rows x vocab
};

toy_batch random_batch(std::vector<int> rows, std::uint64_t seed) {
  random_generator r(seed);
  toy_batch b;
  b.rows = std::move(rows);
  for (const int n : b.rows) {
    std::vector<int> tok(static_cast<std::size_t>(n));
    for (int& t : tok) t = static_cast<int>(r.below(vocab));
    tensor t(static_cast<std::size_t>(n) * vocab);
    for (double& x : t) x = 1.6 * r.uniform() - 0.8;
    b.tokens.push_back(std::move(tok));
    b.targets.push_back(std::move(t));
  }
  return b;
}

// y[i][o] = tanh(sum_j w[o][j] x[i][j] + b[o])
tensor layer_forward(const tensor& w, const tensor& b, const tensor& x) {
  const std::size_t rows = x.size() / width;
  tensor y(x.size());
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t o = 0; o < width; ++o) {
      double z = b[o];
      for (std::size_t j = 0; j < width; ++j) z += w[o * width + j] * x[i * width + j];
      y[i * width + o] = std::tanh(z);
    }
  return y;
}

// Adds the weight and bias gradients to gw, gb; returns the input gradient.
tensor layer_backward(const tensor& w, const tensor& x, const tensor& y, const tensor& gy, tensor& gw, tensor& gb) {
  const std::size_t rows = x.size() / width;
  tensor gz(gy.size()), gx(x.size(), 0.0);
  for (std::size_t i = 0; i < gz.size(); ++i) gz[i] = gy[i] * (1.0 - y[i] * y[i]);
  for (std::size_t o = 0; o < width; ++o) {
    for (std::size_t i = 0; i < rows; ++i) gb[o] += gz[i * width + o];
    for (std::size_t j = 0; j < width; ++j)
      for (std::size_t i = 0; i < rows; ++i) gw[o * width + j] += gz[i * width + o] * x[i * width + j];
  }
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < width; ++j)
      for (std::size_t o = 0; o < width; ++o) gx[i * width + j] += gz[i * width + o] * w[o * width + j];
  return gx;
}

tensor embed_forward(const network& n, std::span<const int> tokens) {
  tensor x(tokens.size() * width);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    std::copy_n(n.embed.begin() + tokens[i] * width, width, x.begin() + static_cast<std::ptrdiff_t>(i * width));
  return x;
}

void embed_backward(std::span<const int> tokens, const tensor& gx, tensor& g_embed) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (std::size_t j = 0; j < width; ++j) g_embed[static_cast<std::size_t>(tokens[i]) * width + j] += gx[i * width + j];
}

// z = (x * g) H; returns the half squared error against `target`, and the head's gradients
// and the input gradient when `grads` is given.
double head(const network& n, const tensor& x, const tensor& target, network* grads, tensor* gx) {
  const std::size_t rows = x.size() / width;
  double loss = 0;
  if (gx) gx->assign(x.size(), 0.0);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t v = 0; v < vocab; ++v) {
      double z = 0;
      for (std::size_t j = 0; j < width; ++j) z += x[i * width + j] * n.g[j] * n.head[j * vocab + v];
      const double d = z - target[i * vocab + v];
      loss += 0.5 * d * d;
      if (!grads) continue;
      for (std::size_t j = 0; j < width; ++j) {
        grads->head[j * vocab + v] += d * x[i * width + j] * n.g[j];
        grads->g[j] += d * x[i * width + j] * n.head[j * vocab + v];
        (*gx)[i * width + j] += d * n.g[j] * n.head[j * vocab + v];
      }
    }
  return loss;
}

struct step_result {
  double loss = 0;
  network grads = zero_network();
};

// The unpipelined reference: micro-batch after micro-batch, every layer on one rank.
step_result reference_step(const network& n, const toy_batch& data) {
  step_result r;
  for (std::size_t k = 0; k < data.rows.size(); ++k) {
    std::vector<tensor> acts{embed_forward(n, data.tokens[k])};
    for (std::size_t l = 0; l < static_cast<std::size_t>(layer_count); ++l) acts.push_back(layer_forward(n.w[l], n.b[l], acts.back()));
    tensor g;
    r.loss += head(n, acts.back(), data.targets[k], &r.grads, &g);
    for (int l = layer_count - 1; l >= 0; --l) {
      const auto u = static_cast<std::size_t>(l);
      g = layer_backward(n.w[u], acts[u], acts[u + 1], g, r.grads.w[u], r.grads.b[u]);
    }
    embed_backward(data.tokens[k], g, r.grads.embed);
  }
  return r;
}

// Visits the tensors of `n` that stage `stage` of replica `r` owns: the embedding (virtual
// stage 0), its layers ascending (W, b), the head's norm and matrix (the last virtual stage).
template <class N, class F>
void for_each_owned(N& n, const step_replica& r, int stage, F&& f) {
  const int PV = static_cast<int>(r.layers.size());
  if (stage == 0) f(n.embed);
  for (int v = stage; v < PV; v += r.pp)
    for (int l = r.first_layer(v); l < r.first_layer(v) + r.layers[static_cast<std::size_t>(v)]; ++l)
      f(n.w[static_cast<std::size_t>(l)]), f(n.b[static_cast<std::size_t>(l)]);
  if ((PV - 1) % r.pp == stage) f(n.g), f(n.head);
}

// One rank's toy network as a step model: its CP rank's rows of every micro-batch (the
// layout's shards in placement order), caches per (micro-batch, virtual stage).
class toy_step_model {
 public:
  using value_type = double;
  struct layer_state {
    tensor input, output;  // a recomputed layer keeps only its input between forward and backward
  };

  toy_step_model(const step_program& prog, rank_index rank, const network& net, const toy_batch& data)
      : prog_(prog), at_(prog.positions[static_cast<std::size_t>(rank)]), net_(net), grads_(zero_network()) {
    const step_replica& r = prog.replica(0);
    for (std::size_t k = 0; k < r.micro_batches.size(); ++k) {
      std::vector<int>& tok = tokens_.emplace_back();
      tensor& target = targets_.emplace_back();
      for (const shard& s : r.micro_batches[k].layout.placements[static_cast<std::size_t>(at_.cp)].shards)
        for (token_count i = s.range.begin; i < s.range.end; ++i) {
          tok.push_back(data.tokens[k][static_cast<std::size_t>(i)]);
          target.insert(target.end(), data.targets[k].begin() + i * vocab, data.targets[k].begin() + (i + 1) * vocab);
        }
    }
  }

  std::span<std::byte> buffer(const step_buffer& b) {
    tensor* t = nullptr;
    if (b.tensor == step_tensor::gradients) {
      if (flat_.empty()) for_each_owned(grads_, prog_.replica(0), at_.stage, [&](tensor& x) { flat_.insert(flat_.end(), x.begin(), x.end()); });
      t = &flat_;
    } else {
      REQUIRE((b.tensor == step_tensor::activation || b.tensor == step_tensor::activation_gradient));
      t = &boundary_[{static_cast<int>(b.tensor), b.micro_batch, b.virtual_stage}];
      if (t->empty()) t->assign(tokens_[static_cast<std::size_t>(b.micro_batch)].size() * width, 0.0);
    }
    return std::as_writable_bytes(std::span<double>(*t)).subspan(static_cast<std::size_t>(b.offset), static_cast<std::size_t>(b.bytes));
  }

  void compute(const step_block& blk, const layer_op& op) {
    const auto k = static_cast<std::size_t>(blk.micro_batch);
    switch (op.part) {
      case model_part::embedding:
        if (op.pass == step_pass::forward) input_ = embed_forward(net_, tokens_[k]);
        else embed_backward(tokens_[k], grad_, grads_.embed);
        break;
      case model_part::attention_input: {
        std::vector<layer_state>& kept = stash_[{blk.micro_batch, blk.virtual_stage}];
        const auto l = static_cast<std::size_t>(op.layer), a = static_cast<std::size_t>(op.layer - blk.first_layer);
        if (op.pass == step_pass::forward) {
          if (a == 0 && !blk.first) input_ = take(step_tensor::activation, blk.micro_batch, blk.virtual_stage - 1);
          layer_state& x = kept.emplace_back();
          x.input = std::move(input_);
          x.output = layer_forward(net_.w[l], net_.b[l], x.input);
          input_ = x.output;
          ++layer_forwards_;
          if (a + 1 == static_cast<std::size_t>(blk.layers)) finish_forward(blk, kept);
        } else if (op.pass == step_pass::recompute) {
          kept[a].output = layer_forward(net_.w[l], net_.b[l], kept[a].input);  // from the kept input
          ++layer_forwards_;
        } else {
          if (a + 1 == static_cast<std::size_t>(blk.layers) && !blk.last)
            grad_ = take(step_tensor::activation_gradient, blk.micro_batch, blk.virtual_stage + 1);
          grad_ = layer_backward(net_.w[l], kept[a].input, kept[a].output, grad_, grads_.w[l], grads_.b[l]);
          kept.pop_back();
          if (a == 0) {
            if (!blk.first) boundary_[{static_cast<int>(step_tensor::activation_gradient), blk.micro_batch, blk.virtual_stage}] = grad_;
            stash_.erase({blk.micro_batch, blk.virtual_stage});
          }
        }
        break;
      }
      case model_part::head:
        if (op.pass == step_pass::forward) loss_ += head(net_, head_input_[blk.micro_batch], targets_[k], nullptr, nullptr);
        else (void)head(net_, head_input_[blk.micro_batch], targets_[k], &grads_, &grad_);
        break;
      default: break;  // the other parts are the identity
    }
  }

  template <class C>
  void attention(const step_block&, const block_attention&, C&, execution_record*) {}  // the identity

  [[nodiscard]] double loss() const { return loss_; }
  //! The stage's gradients after the step (summed over its CP ranks) in a network's tensors.
  [[nodiscard]] network gradients() const {
    network out = zero_network();
    network g = grads_;
    if (!flat_.empty()) {  // the all-reduced ones
      std::size_t at = 0;
      for_each_owned(g, prog_.replica(0), at_.stage, [&](tensor& x) {
        std::copy_n(flat_.begin() + static_cast<std::ptrdiff_t>(at), x.size(), x.begin());
        at += x.size();
      });
    }
    return g;
  }
  [[nodiscard]] std::size_t flat_size() {
    std::size_t n = 0;
    for_each_owned(grads_, prog_.replica(0), at_.stage, [&](tensor& x) { n += x.size(); });
    return n;
  }
  [[nodiscard]] int peak_in_flight() const { return peak_in_flight_; }
  [[nodiscard]] std::size_t peak_values() const { return peak_values_; }
  [[nodiscard]] int layer_forwards() const { return layer_forwards_; }
  [[nodiscard]] bool stash_empty() const { return stash_.empty(); }

 private:
  tensor take(step_tensor t, int k, int v) {
    const auto it = boundary_.find({static_cast<int>(t), k, v});
    REQUIRE(it != boundary_.end());
    tensor out = std::move(it->second);
    boundary_.erase(it);
    return out;
  }
  // the end of a forward block: its output to the next stage (or the head), the recomputed
  // layers' outputs dropped
  void finish_forward(const step_block& blk, std::vector<layer_state>& kept) {
    if (blk.last) head_input_[blk.micro_batch] = std::move(input_);
    else boundary_[{static_cast<int>(step_tensor::activation), blk.micro_batch, blk.virtual_stage}] = std::move(input_);
    const int recomputed = prog_.replica(0).recomputed(blk.virtual_stage, blk.micro_batch);
    for (int a = 0; a < recomputed; ++a) kept[static_cast<std::size_t>(a)].output.clear();
    peak_in_flight_ = std::max(peak_in_flight_, static_cast<int>(stash_.size()));
    std::size_t held = 0;
    for (const auto& [key, states] : stash_)
      for (const layer_state& x : states) held += x.input.size() + x.output.size();
    peak_values_ = std::max(peak_values_, held);
  }

  const step_program& prog_;
  step_position at_;
  const network& net_;
  network grads_;
  std::vector<std::vector<int>> tokens_;  // [micro-batch]: the rank's rows
  std::vector<tensor> targets_;
  std::map<std::pair<int, int>, std::vector<layer_state>> stash_;  // (micro-batch, virtual stage): per layer
  std::map<std::tuple<int, int, int>, tensor> boundary_;            // (tensor, micro-batch, virtual stage)
  std::map<int, tensor> head_input_;
  tensor input_, grad_, flat_;  // the forward's running input, the backward's running gradient
  double loss_ = 0;
  int peak_in_flight_ = 0, layer_forwards_ = 0;
  std::size_t peak_values_ = 0;
};
static_assert(step_model<toy_step_model, host_loopback_comm>);

// The model of a rank that runs nothing: the runner never calls it.
struct idle_model {
  using value_type = double;
  std::span<std::byte> buffer(const step_buffer&) { FAIL("an idle rank was asked for a buffer"); return {}; }
  void compute(const step_block&, const layer_op&) { FAIL("an idle rank computed"); }
  template <class C>
  void attention(const step_block&, const block_attention&, C&, execution_record*) { FAIL("an idle rank ran attention"); }
};
static_assert(step_model<idle_model, host_loopback_comm>);

// What is not a step model: no attention.
struct no_attention_model {
  using value_type = double;
  std::span<std::byte> buffer(const step_buffer&) { return {}; }
  void compute(const step_block&, const layer_op&) {}
};
static_assert(!step_model<no_attention_model, host_loopback_comm>);

bool close(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max({1e-300, std::abs(a), std::abs(b)}); }
bool close(const tensor& a, const tensor& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!close(a[i], b[i])) return false;
  return true;
}

std::vector<int> rotated(std::vector<int> rows, int by) {
  std::rotate(rows.begin(), rows.begin() + by % static_cast<int>(rows.size()), rows.end());
  return rows;
}

struct setup {
  any_pipeline_schedule schedule;
  int stages = 1;
  int cp = 1;
  bool recompute = false;
  std::vector<rank_index> ranks{};  // (c, s) at s cp + c; empty: s cp + c itself
  int cluster_ranks = 0;            // 0: stages x cp
};

// The step program of one step's data (one document per micro-batch) on `cluster`.
step_program program_of(const setup& x, const toy_batch& data, const topology& cluster) {
  std::vector<rank_index> ranks = x.ranks;
  if (ranks.empty())
    for (int r = 0; r < x.stages * x.cp; ++r) ranks.push_back(r);
  std::vector<std::vector<step_piece>> pieces;
  std::vector<token_count> documents;
  for (std::size_t k = 0; k < data.rows.size(); ++k) {
    pieces.push_back({{static_cast<std::int64_t>(k), 0, data.rows[k]}});
    documents.push_back(data.rows[k]);
  }
  const any_partitioner layout = partitioner_by_name("even_split", {.capacity = 64});
  const model_config model = toy_model_config();
  const auto replica = [&](const auto& checkpoint) {
    return make_replica(cluster, model, 1, x.cp, x.stages, ranks, tp_collectives::all_reduce, x.schedule, pieces, layout, checkpoint);
  };
  step_replica r = x.recompute ? replica(full_recompute{}) : replica(no_recompute{});
  step_plan p{cluster.nodes(), cluster.gpus_per_node(), documents, {std::move(r)}, gradient_sync::all_reduce};
  step_program_options o;
  o.activation_bytes = o.parameter_bytes = o.gradient_bytes = o.accumulator_bytes = 8;
  return make_step_program(p, cluster, model, o);
}

void sgd(network& n, const network& g, const step_replica& r, int stage) {
  std::vector<tensor*> to;
  std::vector<const tensor*> by;
  for_each_owned(n, r, stage, [&](tensor& t) { to.push_back(&t); });
  for_each_owned(g, r, stage, [&](const tensor& t) { by.push_back(&t); });
  for (std::size_t i = 0; i < to.size(); ++i)
    for (std::size_t j = 0; j < to[i]->size(); ++j) (*to[i])[j] -= learning_rate * (*by[i])[j];
}

// Runs `prog` on every rank of `world`: the models of the ranks that run a stage (the others
// idle), after the step.
std::vector<std::optional<toy_step_model>> run_toy_step(const step_program& prog, const std::vector<network>& nets, const toy_batch& data,
                                                    const host_loopback_world& world) {
  std::vector<std::optional<toy_step_model>> models(static_cast<std::size_t>(prog.num_ranks()));
  for (rank_index g = 0; g < prog.num_ranks(); ++g)
    if (prog.positions[static_cast<std::size_t>(g)].replica == 0)
      models[static_cast<std::size_t>(g)].emplace(prog, g, nets[static_cast<std::size_t>(g)], data);
  world.run([&](host_loopback_comm& comm) {
    auto& m = models[static_cast<std::size_t>(comm.rank())];
    if (m) {
      run_step_rank(prog, *m, comm);
      return;
    }
    idle_model idle;
    run_step_rank(prog, idle, comm);
  });
  return models;
}

// Trains `steps` SGD steps with the step runner and on one rank, checking loss, gradients,
// in-flight bound and recomputation after every step, and the weights at the end.
void train_and_compare(const setup& x, const std::vector<int>& rows, int steps) {
  CAPTURE(to_string(x.schedule.kind()), x.stages, x.cp, x.recompute, rows, x.ranks);
  const network initial = random_network(7u + static_cast<std::uint64_t>(x.stages));
  network reference = initial;
  const int cluster_ranks = x.cluster_ranks > 0 ? x.cluster_ranks : x.stages * x.cp;
  const topology cluster = cluster_by_name("c", 1, cluster_ranks);
  std::vector<network> nets(static_cast<std::size_t>(cluster_ranks), initial);  // each rank's own copy
  step_replica owner;                 // the layers' split (the same every step)
  std::vector<step_position> positions;
  const host_loopback_world world{.ranks = cluster_ranks, .gpus_per_node = cluster_ranks, .timeout = 20000ms};
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const toy_batch data = random_batch(rotated(rows, step), 1000u + static_cast<std::uint64_t>(step));
    const step_program prog = program_of(x, data, cluster);
    const step_replica& r = prog.replica(0);
    positions = prog.positions;
    std::vector<std::optional<toy_step_model>> models = run_toy_step(prog, nets, data, world);
    const step_result expected = reference_step(reference, data);
    std::vector<token_count> tokens(data.rows.begin(), data.rows.end());
    const pipeline_schedule schedule = r.schedule.build(r.pp, tokens);
    double loss = 0;
    for (const auto& m : models)
      if (m) loss += m->loss();
    CHECK(close(loss, expected.loss));
    for (rank_index g = 0; g < cluster_ranks; ++g) {
      auto& m = models[static_cast<std::size_t>(g)];
      if (!m) continue;
      const step_position at = prog.positions[static_cast<std::size_t>(g)];
      CAPTURE(g, at.stage, at.cp);
      // the gradient buffer is the program's: its stage's parameters
      CHECK(static_cast<double>(m->flat_size()) == prog.stage_parameters[0][static_cast<std::size_t>(at.stage)]);
      const network got = m->gradients();
      std::vector<const tensor*> mine, want;
      for_each_owned(got, r, at.stage, [&](const tensor& t) { mine.push_back(&t); });
      for_each_owned(expected.grads, r, at.stage, [&](const tensor& t) { want.push_back(&t); });
      for (std::size_t i = 0; i < mine.size(); ++i) {
        CAPTURE(i);
        CHECK(close(*mine[i], *want[i]));
      }
      CHECK(m->stash_empty());
      CHECK(m->peak_in_flight() == schedule.in_flight_bound[static_cast<std::size_t>(at.stage)]);
      int owned_layers = 0;
      for (int v = at.stage; v < static_cast<int>(r.layers.size()); v += r.pp) owned_layers += r.layers[static_cast<std::size_t>(v)];
      const int forwards = owned_layers * static_cast<int>(data.rows.size());
      CHECK(m->layer_forwards() == (x.recompute ? 2 : 1) * forwards);
      sgd(nets[static_cast<std::size_t>(g)], got, r, at.stage);
    }
    for (int s = 0; s < r.pp; ++s) sgd(reference, expected.grads, r, s);
    owner = r;
  }
  // every rank's own tensors moved with the reference's
  for (rank_index g = 0; g < cluster_ranks; ++g) {
    const step_position at = positions[static_cast<std::size_t>(g)];
    if (at.replica < 0) continue;
    CAPTURE(g);
    std::vector<const tensor*> mine, want, before;
    for_each_owned(nets[static_cast<std::size_t>(g)], owner, at.stage, [&](const tensor& t) { mine.push_back(&t); });
    for_each_owned(reference, owner, at.stage, [&](const tensor& t) { want.push_back(&t); });
    for_each_owned(initial, owner, at.stage, [&](const tensor& t) { before.push_back(&t); });
    for (std::size_t i = 0; i < mine.size(); ++i) {
      CAPTURE(i);
      CHECK(close(*mine[i], *want[i]));
      CHECK_FALSE(close(*mine[i], *before[i]));  // the steps moved them: not untouched copies
    }
  }
}

void train_every_schedule(int stages, const std::vector<int>& rows, int steps, int cp = 1) {
  for (const bool recompute : {false, true}) {
    train_and_compare({gpipe{}, stages, cp, recompute}, rows, steps);
    train_and_compare({one_f_one_b{}, stages, cp, recompute}, rows, steps);
    train_and_compare({interleaved_one_f_one_b{.virtual_stages = 2}, stages, cp, recompute}, rows, steps);
  }
}

}  // namespace

TEST_CASE("step-program training equals the unpipelined reference for every schedule", "[exec][step]") {
  const std::vector<int> rows{3, 7, 1, 5, 2, 6, 4};  // M = 7: a multiple of no P here
  for (const int stages : {4, 3, 2}) {
    CAPTURE(stages);
    train_every_schedule(stages, rows, 3);
  }
}

TEST_CASE("step-program training with fewer micro-batches than stages, and on one stage", "[exec][step]") {
  train_every_schedule(4, {5, 2}, 2);
  train_every_schedule(3, {1}, 2);
  train_every_schedule(1, {4, 1, 3}, 2);
}

TEST_CASE("step-program training on the ranks the plan names, other ranks idle", "[exec][step]") {
  const std::vector<int> rows{2, 6, 3, 1, 4};
  train_and_compare({one_f_one_b{}, 3, 1, false, {4, 0, 2}, 5}, rows, 2);
  train_and_compare({interleaved_one_f_one_b{.virtual_stages = 2}, 3, 1, true, {2, 1, 0}, 3}, rows, 2);
}

TEST_CASE("step-program training on two CP ranks per stage: the all-reduce sums a stage's gradients", "[exec][step]") {
  const std::vector<int> rows{3, 7, 2, 5, 2, 6, 4};
  train_every_schedule(2, rows, 2, 2);
  train_every_schedule(1, {5, 3}, 2, 2);
}

TEST_CASE("recomputing holds fewer values than storing, in the same in-flight window", "[exec][step]") {
  const toy_batch data = random_batch({3, 7, 1, 5, 2, 6, 4}, 5);
  const topology cluster = cluster_by_name("c", 1, 3);
  const std::vector<network> nets(3, random_network(11));
  const host_loopback_world world{.ranks = 3, .gpus_per_node = 3, .timeout = 20000ms};
  const step_program stored_prog = program_of({one_f_one_b{}, 3, 1, false}, data, cluster);
  const step_program recomputed_prog = program_of({one_f_one_b{}, 3, 1, true}, data, cluster);
  const auto stored = run_toy_step(stored_prog, nets, data, world);
  const auto recomputed = run_toy_step(recomputed_prog, nets, data, world);
  for (std::size_t s = 0; s < 3; ++s) {
    CAPTURE(s);
    CHECK(stored[s]->peak_in_flight() == recomputed[s]->peak_in_flight());
    CHECK(recomputed[s]->peak_values() < stored[s]->peak_values());
    CHECK(close(stored[s]->loss(), recomputed[s]->loss()));
  }
}

namespace {
// A communicator that only counts calls: proves a refused call never communicated.
struct call_counting_comm {
  rank_index me = 0;
  rank_index ranks = 4;
  int calls = 0;
  [[nodiscard]] rank_index rank() const { return me; }
  [[nodiscard]] rank_index size() const { return ranks; }
  [[nodiscard]] int node_of(rank_index) const { return 0; }
  void group_start() { ++calls; }
  void send(std::span<const std::byte>, rank_index) { ++calls; }
  void recv(std::span<std::byte>, rank_index) { ++calls; }
  void group_end(std::string_view) { ++calls; }
};
static_assert(communicator<call_counting_comm>);
}  // namespace

TEST_CASE("run_step_rank refuses a communicator that is not the program's cluster before any communication", "[exec][step]") {
  const toy_batch data = random_batch({3, 1, 2}, 3);
  const topology cluster = cluster_by_name("c", 1, 2);
  const step_program prog = program_of({one_f_one_b{}, 2, 1, false}, data, cluster);
  const network net = random_network(3);
  toy_step_model model(prog, 0, net, data);
  call_counting_comm comm{.me = 0, .ranks = 3};
  const auto e = zeppelin_test::expect_invalid([&] { run_step_rank(prog, model, comm); });
  CHECK(e.value("communicator") == 3.0);
  CHECK(e.value("program_ranks") == 2.0);
  CHECK(comm.calls == 0);
}
