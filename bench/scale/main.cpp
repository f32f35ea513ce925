// bench/scale/main.cpp
// How planning, program building and simulation scale to cluster-size inputs. Each case runs
// in a child process (fork), so its peak memory (getrusage maxrss of the child) is its own.
// Methods: those of `zeppelin simulate`, or a candidate of the cost-driven planner by name.
// Per case and method: wall seconds of partition(), make_program() and simulate() (which
// builds its own program: the figure is program + event simulation), peak RSS, and the
// simulated step, or the error when the library refuses the case (resource_limit: a program
// over program_options' limits).
//   bench_scale           the full cases (minutes; up to ~6 GB)
//   bench_scale --quick   the same shapes with 16x fewer tokens and 64x fewer GPUs (ctest smoke)
// Linux / POSIX (fork, pipes, getrusage).
#include <zeppelin/planner.hpp>
#include <zeppelin/sim.hpp>
#include <zeppelin/zeppelin.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace zeppelin;

struct scale_case {
  std::string batch_name;
  std::function<batch()> make_batch;
  int nodes;
  std::vector<std::string> methods;
};

struct outcome {
  double plan_s = -1, program_s = -1, simulate_s = -1, peak_mb = 0, step_ms = 0;
  char error[160] = {};
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs one method on one case in this (child) process.
outcome run_one(const scale_case& c, const std::string& name) {
  outcome o;
  try {
    const batch b = c.make_batch();
    const topology cluster = cluster_by_name("c", c.nodes, 0);
    const model_config model = model_by_name("7b");
    method_setup setup;
    setup.tokens_per_gpu = (b.total_tokens() + cluster.num_ranks() - 1) / cluster.num_ranks();
    const auto candidate = std::find_if(cost_driven_candidates.begin(), cost_driven_candidates.end(),
                                        [&](const method_spec& c) { return c.name == name; });
    const method_spec& spec = candidate != cost_driven_candidates.end() ? *candidate : method_by_name(name);
    auto t0 = std::chrono::steady_clock::now();
    // the cost-driven planner's plan time includes pricing its candidates with the simulator
    std::optional<cost_driven_choice> choice;
    if (spec.kind == method_kind::zeppelin) choice = plan_by_cost(b, cluster, model, setup);
    const plan p = choice ? choice->chosen.layout : partition_for(spec, b, cluster, method_capacity(setup), setup.metric, &model);
    o.plan_s = seconds_since(t0);
    const sim_options so = choice ? choice->options : options_for(spec, setup);
    t0 = std::chrono::steady_clock::now();
    {
      const execution_program prog = make_program(p, b, cluster, to_program_options(so, wire_format::for_model(model)));
      o.program_s = seconds_since(t0);
    }
    t0 = std::chrono::steady_clock::now();
    const sim_result r = simulate(p, b, cluster, model, so, sim_cost_model::for_topology(cluster));
    o.simulate_s = seconds_since(t0);
    o.step_ms = r.step_time_s * 1e3;
  } catch (const resource_limit& e) {
    // the numbers say why: sum G^2 (or shard pairs) against the limit
    std::string why = "refused:";
    for (const named_value& v : e.values()) why += " " + std::string(v.name) + "=" + std::to_string(static_cast<long long>(v.value));
    std::snprintf(o.error, sizeof o.error, "%s", why.c_str());
  } catch (const std::exception& e) {
    std::snprintf(o.error, sizeof o.error, "%s", e.what());
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  o.peak_mb = static_cast<double>(u.ru_maxrss) / 1024.0;
  return o;
}

// Runs one method on one case in a child process and reads its outcome back.
outcome run_isolated(const scale_case& c, const std::string& name) {
  int fd[2];
  if (pipe(fd) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    const outcome o = run_one(c, name);
    const ssize_t written = write(fd[1], &o, sizeof o);
    _exit(written == static_cast<ssize_t>(sizeof o) ? 0 : 1);
  }
  close(fd[1]);
  outcome o;
  const ssize_t got = read(fd[0], &o, sizeof o);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != static_cast<ssize_t>(sizeof o)) std::snprintf(o.error, sizeof o.error, "child died (status %d)", status);
  return o;
}

std::string cell(double s) {
  if (s < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.3f" : "%.1f", s);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int shrink = quick ? 16 : 1;       // tokens and sequences
  const int fewer_nodes = quick ? 64 : 1;  // the two GitHub clusters: 16 and 2 nodes
  const token_count million = 1 << 20;
  const std::vector<std::string> all = {"te_cp", "llama_cp", "hybrid_dp", "te_cp+routing", "te_cp+routing+engine", "zeppelin_paper"};
  std::vector<std::string> with_planner = all;  // and Ulysses, and the cost-driven planner that weighs them all
  with_planner.insert(with_planner.end(), {"ulysses", "zeppelin"});
  const std::vector<scale_case> cases = {
      {std::to_string(million / shrink) + " one-token sequences",
       [&] { return batch(std::vector<token_count>(static_cast<std::size_t>(million / shrink), 1)); }, 8, with_planner},
      {std::to_string(4 * million / 512 / shrink) + " documents of 512 tokens",
       [&] { return batch(std::vector<token_count>(static_cast<std::size_t>(4 * million / 512 / shrink), 512)); }, 4,
       {"te_cp", "zeppelin_paper"}},
      {"GitHub, " + std::to_string(million / shrink) + " tokens", [&] { return sample_batch(dataset_by_name("github"), million / shrink, 1); },
       std::max(1, 128 / fewer_nodes), {"ulysses", "hybrid_dp", "hybrid_dp+ulysses", "zeppelin_paper", "zeppelin"}},
      {"GitHub, " + std::to_string(million / shrink) + " tokens", [&] { return sample_batch(dataset_by_name("github"), million / shrink, 1); },
       1024 / fewer_nodes, {"te_cp", "ulysses", "hybrid_dp", "hybrid_dp+ulysses", "zeppelin_paper", "zeppelin"}},
  };
  std::printf("%-34s %6s %-22s %9s %10s %11s %8s %10s  %s\n", "batch", "GPUs", "method", "plan s", "program s", "simulate s",
              "peak MB", "step ms", "refused / error");
  bool failed = false;
  for (const scale_case& c : cases)
    for (const std::string& m : c.methods) {
      const outcome o = run_isolated(c, m);
      std::printf("%-34s %6d %-22s %9s %10s %11s %8.0f %10s  %s\n", c.batch_name.c_str(), c.nodes * 8, m.c_str(), cell(o.plan_s).c_str(),
                  cell(o.program_s).c_str(), cell(o.simulate_s).c_str(), o.peak_mb, o.step_ms > 0 ? cell(o.step_ms).c_str() : "-",
                  o.error);
      std::fflush(stdout);
      // a refusal is an answer; anything else (no plan at all, a crash) fails the smoke run
      failed = failed || (o.error[0] != 0 && std::strncmp(o.error, "refused:", 8) != 0);
    }
  return failed ? 1 : 0;
}
