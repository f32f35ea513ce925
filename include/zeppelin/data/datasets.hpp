// zeppelin/data/datasets.hpp
// The sequence-length distributions of Zeppelin's Table 2 (share of sequences per length
// bin) as length_histograms, and lookup by name for tools.
// In:  a dataset name ("arxiv", "github", "prolong64k"; ASCII case-insensitive).
// Out: a length_histogram with the nine Table 2 columns as bins, in tokens.
// Reading of the table:
// - the columns are in thousands of tokens, read as K = 1024 (context windows are powers
//   of two: "64K" is 65536), so the bins are [1, 1024), [1K, 2K), [2K, 4K), ..., [128K, 256K);
//   the first column "<1" is [1, 1024) since a sequence has at least one token;
// - bins are half-open: a sequence of exactly 4096 tokens is in the 4-8 column;
// - GitHub's row sums to 0.945 in the paper; the histogram keeps the printed numbers as
//   weights and normalises them (each share divided by 0.945), i.e. the missing 5.5% is
//   spread proportionally over the printed columns rather than assigned to any one bin;
// - zero columns stay as zero-weight bins so bin i is Table 2's column i for every dataset.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/data/length_distribution.hpp>

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Bin edges of Table 2 in tokens: column c is [table2_edges[c], table2_edges[c + 1]).
inline constexpr std::array<token_count, 10> table2_edges = {1,         1 << 10,   2 << 10,   4 << 10,   8 << 10,
                                                             16 << 10,  32 << 10,  64 << 10,  128 << 10, 256 << 10};
//! Number of Table 2 columns.
inline constexpr std::size_t table2_columns = table2_edges.size() - 1;
//! Column labels as printed in the paper (thousands of tokens).
inline constexpr std::array<std::string_view, table2_columns> table2_labels = {
    "<1", "1-2", "2-4", "4-8", "8-16", "16-32", "32-64", "64-128", "128-256"};

//! The Table 2 column that holds `length` (0..8), or table2_columns for a length >= 256K
//! (beyond the table); lengths < 1 also map to table2_columns.
[[nodiscard]] constexpr std::size_t table2_column(token_count length) noexcept {
  if (length < table2_edges.front()) return table2_columns;
  for (std::size_t c = 0; c < table2_columns; ++c)
    if (length < table2_edges[c + 1]) return c;
  return table2_columns;
}

namespace detail {
inline length_histogram table2_row(const std::array<double, table2_columns>& shares) {
  std::vector<length_bin> bins;
  bins.reserve(table2_columns);
  for (std::size_t c = 0; c < table2_columns; ++c) bins.push_back({table2_edges[c], table2_edges[c + 1], shares[c]});
  return length_histogram(std::move(bins));
}

constexpr bool iequals_ascii(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char ch) { return ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}
}  // namespace detail

namespace datasets {

//! ArXiv (Table 2): shares sum to 1.000.
[[nodiscard]] inline length_histogram arxiv() {
  return detail::table2_row({0.032, 0.03, 0.08, 0.219, 0.338, 0.224, 0.077, 0.0, 0.0});
}

//! GitHub (Table 2): printed shares sum to 0.945 and are normalised (see file comment).
[[nodiscard]] inline length_histogram github() {
  return detail::table2_row({0.0, 0.34, 0.095, 0.104, 0.107, 0.102, 0.088, 0.064, 0.045});
}

//! ProLong64k (Table 2): shares sum to 1.000; two thirds of the sequences are 32K-64K.
[[nodiscard]] inline length_histogram prolong64k() {
  return detail::table2_row({0.231, 0.042, 0.021, 0.012, 0.013, 0.008, 0.673, 0.0, 0.0});
}

}  // namespace datasets

//! Names accepted by dataset_by_name, in Table 2's order.
[[nodiscard]] inline std::span<const std::string_view> dataset_names() noexcept {
  static constexpr std::array<std::string_view, 3> names = {"arxiv", "github", "prolong64k"};
  return names;
}

//! The Table 2 dataset called `name` (ASCII case-insensitive: "ArXiv" works). Throws
//! invalid_argument naming the valid choices for anything else.
[[nodiscard]] inline length_histogram dataset_by_name(std::string_view name) {
  if (detail::iequals_ascii(name, "arxiv")) return datasets::arxiv();
  if (detail::iequals_ascii(name, "github")) return datasets::github();
  if (detail::iequals_ascii(name, "prolong64k")) return datasets::prolong64k();
  std::string message = "unknown dataset '";
  message.append(name);
  message += "'; valid names:";
  for (const auto n : dataset_names()) {
    message += ' ';
    message.append(n);
  }
  ZEPPELIN_THROW(invalid_argument, message, {});
}

ZEPPELIN_NAMESPACE_END
