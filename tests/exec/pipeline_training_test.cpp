// tests/exec/pipeline_training_test.cpp
// run_pipeline_stage (exec/pipeline_runner.hpp) trains a toy network, a stack of layers
// y = tanh(W x + b), split over pipeline stages on the host loopback world: with GPipe, 1F1B
// and interleaved 1F1B (V = 2), on 2, 3 and 4 stages, micro-batches of different row counts,
// storing every activation or recomputing them from the stage input. After every SGD step
// the loss and every weight and bias gradient equal an unpipelined single-rank reference
// (same fp64 arithmetic per micro-batch) to 1e-12 relative, and so do the weights after the
// steps. The stage models never hold more forwards than the schedule's in-flight bound, and
// a schedule validate() rejects throws before any communication.
#include <catch2/catch.hpp>

#include "support/expect_error.hpp"

#include <zeppelin/comm/host_loopback.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/exec/pipeline_runner.hpp>
#include <zeppelin/schedule/pipeline.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

using namespace zeppelin;
using namespace std::chrono_literals;

namespace {

constexpr int width = 4;       // features per row
constexpr int layer_count = 9;  // enough for one layer per virtual stage up to P V = 8
constexpr double learning_rate = 0.01;

using tensor = std::vector<double>;  // rows x width, row-major

struct layer {
  tensor w;  // width x width, row-major (out, in)
  tensor b;  // width
};
using network = std::vector<layer>;

network zero_network() { return network(layer_count, layer{tensor(width * width, 0.0), tensor(width, 0.0)}); }

network random_network(std::uint64_t seed) {
  random_generator g(seed);
  network n = zero_network();
  for (auto& l : n) {
    for (auto& x : l.w) x = g.uniform() - 0.5;
    for (auto& x : l.b) x = 0.2 * (g.uniform() - 0.5);
  }
  return n;
}

struct toy_batch {
  std::vector<int> rows;         // per micro-batch
  std::vector<tensor> inputs;    // per micro-batch, rows x width
  std::vector<tensor> targets;   // per micro-batch, rows x width

  [[nodiscard]] int micro_batches() const { return static_cast<int>(rows.size()); }
  [[nodiscard]] std::vector<token_count> tokens() const { return {rows.begin(), rows.end()}; }
};

toy_batch random_batch(std::vector<int> rows, std::uint64_t seed) {
  random_generator g(seed);
  toy_batch b;
  b.rows = std::move(rows);
  for (const int r : b.rows) {
    tensor x(static_cast<std::size_t>(r * width)), t(x.size());
    for (auto& v : x) v = 2.0 * g.uniform() - 1.0;
    for (auto& v : t) v = 1.6 * g.uniform() - 0.8;
    b.inputs.push_back(std::move(x));
    b.targets.push_back(std::move(t));
  }
  return b;
}

// y[i][o] = tanh(sum_j w[o][j] x[i][j] + b[o])
tensor layer_forward(const layer& l, std::span<const double> x) {
  const std::size_t rows = x.size() / width;
  tensor y(x.size());
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t o = 0; o < width; ++o) {
      double z = l.b[o];
      for (std::size_t j = 0; j < width; ++j) z += l.w[o * width + j] * x[i * width + j];
      y[i * width + o] = std::tanh(z);
    }
  return y;
}

// From the layer's input x, output y and output gradient gy: adds the weight and bias
// gradients to `grad` and returns the input gradient.
tensor layer_backward(const layer& l, std::span<const double> x, std::span<const double> y, std::span<const double> gy,
                      layer& grad) {
  const std::size_t rows = x.size() / width;
  tensor gz(gy.size()), gx(x.size(), 0.0);
  for (std::size_t i = 0; i < gz.size(); ++i) gz[i] = gy[i] * (1.0 - y[i] * y[i]);
  for (std::size_t o = 0; o < width; ++o) {
    double gb = 0.0;
    for (std::size_t i = 0; i < rows; ++i) gb += gz[i * width + o];
    grad.b[o] += gb;
    for (std::size_t j = 0; j < width; ++j) {
      double gw = 0.0;
      for (std::size_t i = 0; i < rows; ++i) gw += gz[i * width + o] * x[i * width + j];
      grad.w[o * width + j] += gw;
    }
  }
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < width; ++j) {
      double s = 0.0;
      for (std::size_t o = 0; o < width; ++o) s += gz[i * width + o] * l.w[o * width + j];
      gx[i * width + j] = s;
    }
  return gx;
}

double half_squared_error(std::span<const double> y, std::span<const double> t) {
  double s = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) s += (y[i] - t[i]) * (y[i] - t[i]);
  return 0.5 * s;
}

tensor loss_gradient(std::span<const double> y, std::span<const double> t) {
  tensor g(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) g[i] = y[i] - t[i];
  return g;
}

struct step_result {
  double loss = 0.0;
  network grads = zero_network();
};

// The unpipelined reference: micro-batch after micro-batch, every layer on one rank.
step_result reference_step(const network& net, const toy_batch& data) {
  step_result r;
  std::vector<double> losses;
  for (int k = 0; k < data.micro_batches(); ++k) {
    std::vector<tensor> acts{data.inputs[static_cast<std::size_t>(k)]};
    for (const auto& l : net) acts.push_back(layer_forward(l, acts.back()));
    const tensor& target = data.targets[static_cast<std::size_t>(k)];
    losses.push_back(half_squared_error(acts.back(), target));
    tensor g = loss_gradient(acts.back(), target);
    for (int l = layer_count - 1; l >= 0; --l) {
      const auto u = static_cast<std::size_t>(l);
      g = layer_backward(net[u], acts[u], acts[u + 1], g, r.grads[u]);
    }
  }
  for (const double x : losses) r.loss += x;
  return r;
}

void sgd(network& net, const network& grads, std::span<const int> which) {
  for (const int l : which) {
    const auto u = static_cast<std::size_t>(l);
    for (std::size_t i = 0; i < net[u].w.size(); ++i) net[u].w[i] -= learning_rate * grads[u].w[i];
    for (std::size_t i = 0; i < net[u].b.size(); ++i) net[u].b[i] -= learning_rate * grads[u].b[i];
  }
}

// What a forward keeps for its backward, as a policy of the stage model: everything, or
// only the stage input, re-running the forward in the backward.
template <class A>
concept activation_policy =
    std::regular<A> && requires(const A& a, std::vector<tensor> acts, std::vector<tensor> (*forward)(const tensor&)) {
      { a.keep(std::move(acts)) } -> std::same_as<std::vector<tensor>>;
      { a.restore(std::move(acts), forward) } -> std::same_as<std::vector<tensor>>;
    };

//! Keeps every layer's input and output from the forward to the backward.
struct store_activations {
  [[nodiscard]] std::vector<tensor> keep(std::vector<tensor> acts) const { return acts; }
  template <class Forward>
  [[nodiscard]] std::vector<tensor> restore(std::vector<tensor> kept, Forward&&) const {
    return kept;
  }
  friend bool operator==(const store_activations&, const store_activations&) = default;
};
static_assert(activation_policy<store_activations>);

//! Keeps only the stage input; the backward re-runs the forward from it.
struct recompute_activations {
  [[nodiscard]] std::vector<tensor> keep(std::vector<tensor> acts) const { return {std::move(acts.front())}; }
  template <class Forward>
  [[nodiscard]] std::vector<tensor> restore(std::vector<tensor> kept, Forward&& forward) const {
    return forward(kept.front());
  }
  friend bool operator==(const recompute_activations&, const recompute_activations&) = default;
};
static_assert(activation_policy<recompute_activations>);

// Virtual stage v holds layers [first_layer(v), first_layer(v + 1)).
int first_layer(int v, int virtual_stages_total) { return v * layer_count / virtual_stages_total; }

// One pipeline stage of the toy network: its chunks' layers, their gradients, the loss of
// every micro-batch when it holds the last virtual stage.
template <activation_policy Activations>
class toy_stage {
 public:
  using value_type = double;

  toy_stage(const network& net, const toy_batch* data, int stage, int stages, int chunks, Activations activations = {})
      : data_(data), stage_(stage), stages_(stages), chunks_(chunks), activations_(activations), params_(net),
        grads_(zero_network()) {}

  void start_step(const toy_batch* data) {
    data_ = data;
    losses_.assign(static_cast<std::size_t>(data->micro_batches()), 0.0);
    peak_stash_ = 0;
    layer_forwards_ = 0;
  }

  [[nodiscard]] std::size_t activation_elements(int micro_batch) const {
    return static_cast<std::size_t>(data_->rows[static_cast<std::size_t>(micro_batch)] * width);
  }

  void forward(int micro_batch, int chunk, std::span<const double> input, std::span<double> output) {
    const int v = virtual_stage(chunk);
    tensor x0 = v == 0 ? data_->inputs[static_cast<std::size_t>(micro_batch)] : tensor(input.begin(), input.end());
    std::vector<tensor> acts = run_layers(v, std::move(x0));
    if (v == last_virtual()) losses_[static_cast<std::size_t>(micro_batch)] = half_squared_error(acts.back(), target(micro_batch));
    else std::copy(acts.back().begin(), acts.back().end(), output.begin());
    stash_.emplace(std::pair{micro_batch, chunk}, activations_.keep(std::move(acts)));
    peak_stash_ = std::max(peak_stash_, static_cast<int>(stash_.size()));
    std::size_t held = 0;
    for (const auto& [key, kept] : stash_)
      for (const auto& t : kept) held += t.size();
    peak_stash_elements_ = std::max(peak_stash_elements_, held);
  }

  void backward(int micro_batch, int chunk, std::span<const double> output_gradient, std::span<double> input_gradient) {
    const int v = virtual_stage(chunk);
    auto node = stash_.extract(std::pair{micro_batch, chunk});
    const std::vector<tensor> acts =
        activations_.restore(std::move(node.mapped()), [&](const tensor& x0) { return run_layers(v, x0); });
    tensor g = v == last_virtual() ? loss_gradient(acts.back(), target(micro_batch))
                                   : tensor(output_gradient.begin(), output_gradient.end());
    const int lo = first_layer(v, stages_ * chunks_);
    for (int l = first_layer(v + 1, stages_ * chunks_) - 1; l >= lo; --l) {
      const auto u = static_cast<std::size_t>(l), a = static_cast<std::size_t>(l - lo);
      g = layer_backward(params_[u], acts[a], acts[a + 1], g, grads_[u]);
    }
    if (v > 0) std::copy(g.begin(), g.end(), input_gradient.begin());
  }

  //! The layers this stage holds, over all its chunks.
  [[nodiscard]] std::vector<int> owned_layers() const {
    std::vector<int> out;
    for (int c = 0; c < chunks_; ++c)
      for (int l = first_layer(virtual_stage(c), stages_ * chunks_); l < first_layer(virtual_stage(c) + 1, stages_ * chunks_); ++l)
        out.push_back(l);
    return out;
  }
  void apply_sgd() {
    sgd(params_, grads_, owned_layers());
    grads_ = zero_network();
  }

  [[nodiscard]] const network& params() const { return params_; }
  [[nodiscard]] const network& grads() const { return grads_; }
  [[nodiscard]] const std::vector<double>& losses() const { return losses_; }
  [[nodiscard]] bool holds_last_virtual_stage() const { return (last_virtual()) % stages_ == stage_; }
  [[nodiscard]] int peak_stash() const { return peak_stash_; }
  [[nodiscard]] std::size_t peak_stash_elements() const { return peak_stash_elements_; }
  [[nodiscard]] int layer_forwards() const { return layer_forwards_; }
  [[nodiscard]] bool stash_empty() const { return stash_.empty(); }

 private:
  [[nodiscard]] int virtual_stage(int chunk) const { return chunk * stages_ + stage_; }
  [[nodiscard]] int last_virtual() const { return stages_ * chunks_ - 1; }
  [[nodiscard]] const tensor& target(int micro_batch) const { return data_->targets[static_cast<std::size_t>(micro_batch)]; }

  std::vector<tensor> run_layers(int v, tensor x0) {
    std::vector<tensor> acts{std::move(x0)};
    for (int l = first_layer(v, stages_ * chunks_); l < first_layer(v + 1, stages_ * chunks_); ++l) {
      acts.push_back(layer_forward(params_[static_cast<std::size_t>(l)], acts.back()));
      ++layer_forwards_;
    }
    return acts;
  }

  const toy_batch* data_;
  int stage_, stages_, chunks_;
  Activations activations_;
  network params_, grads_;  // full-size; only the owned layers are used
  std::vector<double> losses_;
  std::map<std::pair<int, int>, std::vector<tensor>> stash_;
  int peak_stash_ = 0;
  std::size_t peak_stash_elements_ = 0;
  int layer_forwards_ = 0;
};
static_assert(pipeline_stage_model<toy_stage<store_activations>>);
static_assert(pipeline_stage_model<toy_stage<recompute_activations>>);

// fp32 boundary tensors, and what is not a stage model
struct float_stage {
  using value_type = float;
  [[nodiscard]] std::size_t activation_elements(int) const { return 1; }
  void forward(int, int, std::span<const float>, std::span<float>) {}
  void backward(int, int, std::span<const float>, std::span<float>) {}
};
static_assert(pipeline_stage_model<float_stage>);
struct no_backward_stage {
  using value_type = float;
  [[nodiscard]] std::size_t activation_elements(int) const { return 1; }
  void forward(int, int, std::span<const float>, std::span<float>) {}
};
static_assert(!pipeline_stage_model<no_backward_stage>);

bool close(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); }

bool close(const layer& a, const layer& b) {
  for (std::size_t i = 0; i < a.w.size(); ++i)
    if (!close(a.w[i], b.w[i])) return false;
  for (std::size_t i = 0; i < a.b.size(); ++i)
    if (!close(a.b[i], b.b[i])) return false;
  return true;
}

int communication_groups(const std::vector<pipeline_op>& ops) {
  int groups = 0;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (!is_compute(ops[i].kind) && (i == 0 || is_compute(ops[i - 1].kind))) ++groups;
  return groups;
}

std::vector<int> rotated(std::vector<int> rows, int by) {
  std::rotate(rows.begin(), rows.begin() + by % static_cast<int>(rows.size()), rows.end());
  return rows;
}

// Trains `steps` SGD steps pipelined (stage s on rank stage_ranks[s], or s) and unpipelined,
// checking loss, gradients, in-flight memory and the runner's stats after every step, and
// the weights at the end.
template <class Activations, pipeline_schedule_policy Schedule>
void train_and_compare(const Schedule& policy, int stages, int chunks, const std::vector<int>& rows, int steps,
                       std::vector<rank_index> stage_ranks = {}, rank_index world_ranks = 0) {
  CAPTURE(stages, chunks, rows, stage_ranks);
  const network initial = random_network(7u + static_cast<std::uint64_t>(stages));
  network reference = initial;
  std::vector<toy_stage<Activations>> models;
  for (int s = 0; s < stages; ++s) models.emplace_back(reference, nullptr, s, stages, chunks);
  const host_loopback_world world{.ranks = world_ranks > 0 ? world_ranks : stages, .timeout = 20000ms};
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const toy_batch data = random_batch(rotated(rows, step), 1000u + static_cast<std::uint64_t>(step));
    const pipeline_schedule schedule = policy.build(stages, data.tokens());
    CAPTURE(to_string(schedule.kind));
    for (auto& m : models) m.start_step(&data);
    std::vector<pipeline_stage_stats> stats(static_cast<std::size_t>(stages));
    world.run([&](host_loopback_comm& comm) {
      for (int s = 0; s < stages; ++s)
        if ((stage_ranks.empty() ? s : stage_ranks[static_cast<std::size_t>(s)]) == comm.rank())
          stats[static_cast<std::size_t>(s)] =
              run_pipeline_stage(schedule, s, models[static_cast<std::size_t>(s)], comm, std::span<const rank_index>(stage_ranks));
    });
    const step_result expected = reference_step(reference, data);

    double loss = 0.0;
    for (const auto& m : models)
      if (m.holds_last_virtual_stage())
        for (const double x : m.losses()) loss += x;
    CHECK(close(loss, expected.loss));
    for (int s = 0; s < stages; ++s) {
      CAPTURE(s);
      const auto& m = models[static_cast<std::size_t>(s)];
      const pipeline_stage_stats& st = stats[static_cast<std::size_t>(s)];
      for (const int l : m.owned_layers()) {
        CAPTURE(l);
        CHECK(close(m.grads()[static_cast<std::size_t>(l)], expected.grads[static_cast<std::size_t>(l)]));
      }
      const int bound = schedule.in_flight_bound[static_cast<std::size_t>(s)];
      CHECK(m.stash_empty());
      CHECK(m.peak_stash() == bound);
      CHECK(st.peak_in_flight == bound);
      CHECK(st.forwards == data.micro_batches() * chunks);
      CHECK(st.backwards == data.micro_batches() * chunks);
      CHECK(st.groups == communication_groups(schedule.ops[static_cast<std::size_t>(s)]));
      // recomputing runs every owned layer's forward twice per micro-batch
      const int owned_forwards = static_cast<int>(m.owned_layers().size()) * data.micro_batches();
      CHECK(m.layer_forwards() == (std::same_as<Activations, recompute_activations> ? 2 : 1) * owned_forwards);
      // every boundary tensor is one micro-batch's rows
      std::size_t sent = 0, received = 0;
      for (const pipeline_op& op : schedule.ops[static_cast<std::size_t>(s)])
        if (!is_compute(op.kind)) (is_send(op.kind) ? sent : received) += static_cast<std::size_t>(op.tokens * width);
      CHECK(st.elements_sent == sent);
      CHECK(st.elements_received == received);
    }
    for (auto& m : models) m.apply_sgd();
    sgd(reference, expected.grads, std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  }
  for (const auto& m : models)
    for (const int l : m.owned_layers()) {
      CAPTURE(l);
      CHECK(close(m.params()[static_cast<std::size_t>(l)], reference[static_cast<std::size_t>(l)]));
      // the steps moved the weights: the comparison is not of untouched copies
      CHECK_FALSE(close(m.params()[static_cast<std::size_t>(l)], initial[static_cast<std::size_t>(l)]));
    }
}

template <class Activations>
void train_every_schedule(int stages, const std::vector<int>& rows, int steps) {
  train_and_compare<Activations>(gpipe{}, stages, 1, rows, steps);
  train_and_compare<Activations>(one_f_one_b{}, stages, 1, rows, steps);
  train_and_compare<Activations>(interleaved_one_f_one_b{.virtual_stages = 2}, stages, 2, rows, steps);
}

// A communicator that only counts calls: proves a rejected call never communicated.
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

TEMPLATE_TEST_CASE("pipelined training equals the unpipelined reference for every schedule", "[exec][pipeline]",
                   store_activations, recompute_activations) {
  const std::vector<int> rows{3, 7, 1, 5, 2, 6, 4};  // M = 7: a multiple of no P here
  for (const int stages : {4, 3, 2}) {
    CAPTURE(stages);
    train_every_schedule<TestType>(stages, rows, 3);
  }
}

TEMPLATE_TEST_CASE("pipelined training with fewer micro-batches than stages, and on one stage", "[exec][pipeline]",
                   store_activations, recompute_activations) {
  train_every_schedule<TestType>(4, {5, 2}, 2);
  train_every_schedule<TestType>(3, {1}, 2);
  train_every_schedule<TestType>(1, {4, 1, 3}, 2);
}

TEST_CASE("stages run on the ranks stage_ranks names, other ranks idle", "[exec][pipeline]") {
  const std::vector<int> rows{2, 6, 3, 1, 4};
  train_and_compare<store_activations>(one_f_one_b{}, 3, 1, rows, 2, {4, 0, 2}, 5);
  train_and_compare<recompute_activations>(interleaved_one_f_one_b{.virtual_stages = 2}, 3, 2, rows, 2, {2, 1, 0}, 3);
}

TEST_CASE("recomputing holds fewer elements than storing, in the same in-flight window", "[exec][pipeline]") {
  const std::vector<int> rows{3, 7, 1, 5, 2, 6, 4};
  const toy_batch data = random_batch(rows, 5);
  const network net = random_network(11);
  const pipeline_schedule schedule = one_f_one_b{}.build(3, data.tokens());
  std::vector<toy_stage<store_activations>> stored;
  std::vector<toy_stage<recompute_activations>> recomputed;
  for (int s = 0; s < 3; ++s) {
    stored.emplace_back(net, &data, s, 3, 1);
    recomputed.emplace_back(net, &data, s, 3, 1);
    stored.back().start_step(&data);
    recomputed.back().start_step(&data);
  }
  const host_loopback_world world{.ranks = 3, .timeout = 20000ms};
  world.run([&](host_loopback_comm& comm) {
    const int s = comm.rank();
    (void)run_pipeline_stage(schedule, s, stored[static_cast<std::size_t>(s)], comm);
    (void)run_pipeline_stage(schedule, s, recomputed[static_cast<std::size_t>(s)], comm);
  });
  for (std::size_t s = 0; s < 3; ++s) {
    CAPTURE(s);
    CHECK(stored[s].peak_stash() == recomputed[s].peak_stash());
    CHECK(recomputed[s].peak_stash_elements() < stored[s].peak_stash_elements());
  }
}

TEST_CASE("run_pipeline_stage rejects bad input before any communication", "[exec][pipeline]") {
  const toy_batch data = random_batch({3, 1, 2, 5, 4}, 3);
  const network net = random_network(3);
  const pipeline_schedule good = one_f_one_b{}.build(4, data.tokens());
  toy_stage<store_activations> model(net, &data, 0, 4, 1);
  model.start_step(&data);
  call_counting_comm comm;

  SECTION("a schedule validate() rejects: a bound below what the stage holds") {
    pipeline_schedule bad = good;
    bad.in_flight_bound[2] = 1;
    CHECK_THROWS_AS(validate(bad), invalid_argument);
    const auto e = zeppelin_test::expect_invalid([&] { (void)run_pipeline_stage(bad, 0, model, comm); });
    CHECK(e.value("stage") == 2.0);
  }
  SECTION("a schedule validate() rejects: a forward before its input arrived") {
    pipeline_schedule bad = good;
    auto& ops = bad.ops[1];
    const auto receive = std::find_if(ops.begin(), ops.end(), [](const pipeline_op& op) { return op.kind == pipeline_op_kind::receive_activation; });
    REQUIRE(receive != ops.end());
    std::iter_swap(receive, receive + 1);  // the forward now runs before its receive group
    CHECK_THROWS_AS(validate(bad), invalid_argument);
    CHECK_THROWS_AS(run_pipeline_stage(bad, 0, model, comm), invalid_argument);
  }
  SECTION("a schedule validate() rejects: a missing backward") {
    pipeline_schedule bad = good;
    auto& ops = bad.ops[3];
    ops.erase(std::find_if(ops.begin(), ops.end(), [](const pipeline_op& op) { return op.kind == pipeline_op_kind::backward; }));
    CHECK_THROWS_AS(run_pipeline_stage(bad, 0, model, comm), invalid_argument);
  }
  SECTION("a stage out of range") {
    const auto e = zeppelin_test::expect_invalid([&] { (void)run_pipeline_stage(good, 4, model, comm); });
    CHECK(e.value("stage") == 4.0);
    CHECK(e.value("stages") == 4.0);
    CHECK_THROWS_AS(run_pipeline_stage(good, -1, model, comm), invalid_argument);
  }
  SECTION("bad stage ranks") {
    std::vector<rank_index> ranks{0, 1, 2};
    auto e = zeppelin_test::expect_invalid([&] { (void)run_pipeline_stage(good, 0, model, comm, ranks); });
    CHECK(e.value("stage_ranks") == 3.0);
    ranks = {0, 1, 2, 4};
    e = zeppelin_test::expect_invalid([&] { (void)run_pipeline_stage(good, 0, model, comm, ranks); });
    CHECK(e.value("rank") == 4.0);
    ranks = {0, 1, 1, 3};
    e = zeppelin_test::expect_invalid([&] { (void)run_pipeline_stage(good, 0, model, comm, ranks); });
    CHECK(e.value("rank") == 1.0);
    ranks = {1, 0, 2, 3};  // stage 0 belongs to rank 1, the communicator is rank 0
    e = zeppelin_test::expect_invalid([&] { (void)run_pipeline_stage(good, 0, model, comm, ranks); });
    CHECK(e.value("stage_rank") == 1.0);
    call_counting_comm small{.me = 0, .ranks = 3};
    e = zeppelin_test::expect_invalid([&] { (void)run_pipeline_stage(good, 0, model, small, {}); });
    CHECK(e.value("ranks") == 3.0);
    CHECK(small.calls == 0);
  }
  CHECK(comm.calls == 0);
}

TEST_CASE("a rejected schedule fails every rank of a loopback world with invalid_argument", "[exec][pipeline]") {
  const toy_batch data = random_batch({3, 1, 2}, 4);
  const network net = random_network(4);
  pipeline_schedule bad = gpipe{}.build(2, data.tokens());
  bad.in_flight_bound[0] = 2;  // gpipe holds all 3
  std::vector<toy_stage<store_activations>> models;
  for (int s = 0; s < 2; ++s) {
    models.emplace_back(net, &data, s, 2, 1);
    models.back().start_step(&data);
  }
  const host_loopback_world world{.ranks = 2, .timeout = 20000ms};
  try {
    world.run([&](host_loopback_comm& comm) { (void)run_pipeline_stage(bad, comm.rank(), models[static_cast<std::size_t>(comm.rank())], comm); });
    FAIL("no error");
  } catch (const rank_failed& e) {
    INFO(e.what());
    CHECK_THROWS_AS(std::rethrow_if_nested(e), invalid_argument);
  }
  for (const auto& m : models) CHECK(m.layer_forwards() == 0);
}
