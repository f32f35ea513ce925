// tests/pack/packing_test.cpp
// The packing vocabulary: limits validation, the imbalance degrees (workload and attention),
// and the document workload model (default, from a profile, fitted to the stage time).
#include "support/expect_error.hpp"

#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/pack.hpp>

#include <vector>

using namespace zeppelin;
using zeppelin_test::expect_invalid;

TEST_CASE("packing_limits validation names the numbers", "[pack]") {
  validate(packing_limits{.micro_batches = 1, .max_tokens = 1});
  REQUIRE(expect_invalid([] { validate(packing_limits{.micro_batches = 0, .max_tokens = 10}); }).value("micro_batches") == 0);
  REQUIRE(expect_invalid([] { validate(packing_limits{.micro_batches = 2, .max_tokens = 0}); }).value("max_tokens") == 0);
  expect_invalid([] { validate(packing_limits{.micro_batches = 2, .max_tokens = max_sequence_length + 1}); });
  const auto e = expect_invalid([] { check_document({7, 11}, {.micro_batches = 1, .max_tokens = 10}); });
  REQUIRE(e.value("index") == 7);
  REQUIRE(e.value("length") == 11);
  REQUIRE(e.value("L") == 10);
}

TEST_CASE("imbalance degrees: max over mean", "[pack]") {
  const std::vector<double> v = {1, 3};
  REQUIRE(imbalance_degree(v) == Approx(1.5));
  REQUIRE(imbalance_degree(std::vector<double>{}) == 1);
  REQUIRE(imbalance_degree(std::vector<double>{0, 0}) == 1);
  packed_iteration it;
  it.micro_batches = {{{0, 1}, 30, 10.0}, {{2}, 20, 30.0}, {{}, 0, 0.0}};
  REQUIRE(workload_imbalance(it) == Approx(30.0 / (40.0 / 3)));
  const std::vector<token_count> lengths = {10, 20, 20};
  // attention: 100 + 400 = 500 and 400 and 0: max 500 / mean 300.
  REQUIRE(attention_imbalance(it, lengths) == Approx(500.0 / 300.0));
  const std::vector<token_count> short_lengths = {10};
  REQUIRE(expect_invalid([&] { (void)attention_imbalance(it, short_lengths); }).value("index") == 1);
  // The mean over iterations skips iterations without documents.
  packed_iteration empty;
  empty.micro_batches.resize(3);
  const std::vector<packed_iteration> its = {it, empty};
  REQUIRE(mean_workload_imbalance(its) == Approx(workload_imbalance(it)));
}

TEST_CASE("document workload: default, profile, fitted stage time", "[pack]") {
  const document_workload w{};
  // d (d + 1) / 2 pairs + 24576 d.
  REQUIRE(w(0) == 0);
  REQUIRE(w(1) == Approx(1 + 24576));
  REQUIRE(w(4096) == Approx(4096.0 * 4097 / 2 + 24576.0 * 4096));
  const document_workload p = document_workload::from_profile({.a = 2, .b = 3, .c = 100});
  REQUIRE(p == document_workload{.quadratic = 2, .linear = 3});
  expect_invalid([] { (void)document_workload::from_profile({.a = -1, .b = 3, .c = 0}); });
  expect_invalid([] { validate(document_workload{.quadratic = 0, .linear = 0}); });

  const document_workload fitted = document_workload::for_model(models::llama_7b(), gpus::h100_sxm());
  REQUIRE(fitted.quadratic > 0);
  REQUIRE(fitted.linear > 0);
  // W(0) = 0 and the fit is close to the stage time it was fitted to.
  const analytic_stage_time t = analytic_stage_time::for_gpu(models::llama_7b(), gpus::h100_sxm());
  for (token_count d = 1024; d <= 262144; d *= 2) {
    const double seconds = t.times(micro_batch{{d}, {}}, stage_slice{1, false, false}).forward;
    // Unweighted least squares: the long documents (large times) dominate the fit.
    REQUIRE(fitted(d) == Approx(seconds).epsilon(d >= 16384 ? 0.02 : 0.25));
  }
  // Attention dominates a 128K document: the quadratic part is most of W.
  REQUIRE(fitted.quadratic * 131072.0 > fitted.linear);
}
