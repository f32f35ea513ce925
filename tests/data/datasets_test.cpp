// Tests of data/datasets.hpp: Zeppelin Table 2 as histograms, bin edges, lookup by name.
#include <catch2/catch.hpp>
#include <zeppelin/data/datasets.hpp>

#include <array>
#include <string>

using zeppelin::length_histogram;
using zeppelin::table2_columns;
using zeppelin::table2_edges;

namespace {

void check_row(const length_histogram& h, const std::array<double, 9>& printed, double printed_sum) {
  REQUIRE(h.size() == table2_columns);
  double sum = 0.0;
  for (std::size_t c = 0; c < table2_columns; ++c) {
    CHECK(h.bins()[c].lo == table2_edges[c]);
    CHECK(h.bins()[c].hi == table2_edges[c + 1]);
    CHECK(h.bins()[c].weight == printed[c]);
    CHECK(h.probability(c) == Approx(printed[c] / printed_sum).margin(1e-15));
    sum += h.probability(c);
  }
  CHECK(sum == Approx(1.0).margin(1e-12));
  CHECK(h.weight_sum() == Approx(printed_sum).margin(1e-12));
}

}  // namespace

TEST_CASE("Table 2 edges are powers of two in K = 1024 tokens, first bin starts at 1", "[data]") {
  CHECK(table2_edges == std::array<zeppelin::token_count, 10>{1, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
                                                             131072, 262144});
  CHECK(zeppelin::table2_labels.front() == "<1");
  CHECK(zeppelin::table2_labels.back() == "128-256");
  CHECK(zeppelin::table2_column(0) == table2_columns);
  CHECK(zeppelin::table2_column(1) == 0);
  CHECK(zeppelin::table2_column(1023) == 0);
  CHECK(zeppelin::table2_column(1024) == 1);
  CHECK(zeppelin::table2_column(4095) == 2);
  CHECK(zeppelin::table2_column(4096) == 3);
  CHECK(zeppelin::table2_column(65535) == 6);
  CHECK(zeppelin::table2_column(65536) == 7);
  CHECK(zeppelin::table2_column(262143) == 8);
  CHECK(zeppelin::table2_column(262144) == table2_columns);
}

TEST_CASE("Table 2 rows: printed shares as weights, normalised probabilities", "[data]") {
  check_row(zeppelin::datasets::arxiv(), {0.032, 0.03, 0.08, 0.219, 0.338, 0.224, 0.077, 0.0, 0.0}, 1.0);
  // GitHub's printed row sums to 0.945: each share is divided by 0.945.
  check_row(zeppelin::datasets::github(), {0.0, 0.34, 0.095, 0.104, 0.107, 0.102, 0.088, 0.064, 0.045}, 0.945);
  check_row(zeppelin::datasets::prolong64k(), {0.231, 0.042, 0.021, 0.012, 0.013, 0.008, 0.673, 0.0, 0.0}, 1.0);
  CHECK(zeppelin::datasets::github().probability(1) == Approx(0.34 / 0.945));
  // Drawable ranges follow the zero columns.
  CHECK(zeppelin::datasets::arxiv().max_length() == 65535);
  CHECK(zeppelin::datasets::github().min_length() == 1024);
  CHECK(zeppelin::datasets::github().max_length() == 262143);
  CHECK(zeppelin::datasets::prolong64k().min_length() == 1);
}

TEST_CASE("dataset_by_name: the three names, case-insensitive and others list the valid names", "[data]") {
  REQUIRE(zeppelin::dataset_names().size() == 3);
  CHECK(zeppelin::dataset_by_name("arxiv") == zeppelin::datasets::arxiv());
  CHECK(zeppelin::dataset_by_name("ArXiv") == zeppelin::datasets::arxiv());
  CHECK(zeppelin::dataset_by_name("GitHub") == zeppelin::datasets::github());
  CHECK(zeppelin::dataset_by_name("ProLong64k") == zeppelin::datasets::prolong64k());
  for (const auto name : zeppelin::dataset_names()) CHECK_NOTHROW(zeppelin::dataset_by_name(name));
  try {
    (void)zeppelin::dataset_by_name("wikipedia");
    FAIL("expected invalid_argument");
  } catch (const zeppelin::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("wikipedia") != std::string::npos);
    CHECK(what.find("arxiv github prolong64k") != std::string::npos);
  }
  CHECK_THROWS_AS(zeppelin::dataset_by_name(""), zeppelin::invalid_argument);
  CHECK_THROWS_AS(zeppelin::dataset_by_name("arxiv "), zeppelin::invalid_argument);
}
