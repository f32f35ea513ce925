// zeppelin/data/length_file.hpp
// Text files of real sequence lengths and of length histograms: readers and writers.
// Length file: one positive integer (tokens) per line, e.g. the document lengths of a
//   tokenised dataset; `#` starts a comment (whole line or after the number); blank lines
//   and surrounding whitespace (including a CRLF '\r') are ignored.
//     # lengths of shard 0
//     4096
//     131072   # the longest document
// Histogram file: one bin per line, `lo hi weight`: lengths lo..hi-1 (half-open [lo, hi),
//   tokens) with a finite non-negative weight (any scale: weights are normalised); bins
//   sorted by lo and non-overlapping; same comment and blank-line rules.
//     # lo   hi     weight
//     1      1024   0.032
//     1024   2048   0.03
// Out: std::vector<token_count> / length_histogram. A bad line throws invalid_argument
// whose message names the line number and the offending text (value("line") holds the
// number) and nothing is returned. The writers produce files the readers read back to an
// equal value (weights are written in shortest round-trip form).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/output_file.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/data/length_distribution.hpp>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <istream>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

constexpr bool is_blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

//! The line without its `#` comment and surrounding whitespace.
constexpr std::string_view significant_text(std::string_view line) noexcept {
  if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  while (!line.empty() && is_blank(line.front())) line.remove_prefix(1);
  while (!line.empty() && is_blank(line.back())) line.remove_suffix(1);
  return line;
}

//! Whitespace-separated fields of an already trimmed text.
inline std::vector<std::string_view> split_fields(std::string_view text) {
  std::vector<std::string_view> fields;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_blank(text[i])) ++i;
    const std::size_t start = i;
    while (i < text.size() && !is_blank(text[i])) ++i;
    if (i > start) fields.push_back(text.substr(start, i - start));
  }
  return fields;
}

//! Where a line came from, for error messages: "line 7" or "lengths.txt line 7".
struct line_location {
  std::string_view source;  // empty for a stream
  std::size_t line = 0;
};

//! At most `limit` characters of `text` for an error message, non-printable bytes as \xNN,
//! "..." when cut: a malformed file may hold megabytes on one line, or control bytes that
//! would garble a terminal.
inline std::string excerpt(std::string_view text, std::size_t limit = 60) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

[[noreturn]] inline void throw_line_error(const line_location& where, std::string_view what,
                                          std::string_view text, const char* file, int source_line) {
  std::string message;
  if (!where.source.empty()) {
    message.append(where.source);
    message += ' ';
  }
  message += "line " + std::to_string(where.line) + ": ";
  message.append(what);
  message += " in '" + excerpt(text) + '\'';
  throw invalid_argument(message, {{"line", static_cast<double>(where.line)}}, file, source_line);
}

#define ZEPPELIN_DETAIL_LINE_ERROR(where, what, text) \
  ::zeppelin::detail::throw_line_error((where), (what), (text), __FILE__, __LINE__)

//! `field` as a positive token count; `name` says what it is ("length", "lo", "hi").
inline token_count parse_positive_field(std::string_view field, std::string_view name, std::string_view line_text,
                                        const line_location& where) {
  token_count value = 0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  const auto what = [&](const char* problem) {
    std::string s(name);
    s += problem;
    return s;
  };
  if (ec == std::errc::invalid_argument) ZEPPELIN_DETAIL_LINE_ERROR(where, what(" is not a number"), line_text);
  if (ec == std::errc::result_out_of_range)
    ZEPPELIN_DETAIL_LINE_ERROR(where, what(" overflows a 64-bit token count"), line_text);
  if (end != field.data() + field.size())
    ZEPPELIN_DETAIL_LINE_ERROR(where, what(" has unexpected text after the number"), line_text);
  if (value == 0) ZEPPELIN_DETAIL_LINE_ERROR(where, what(" must be positive, got zero"), line_text);
  if (value < 0) ZEPPELIN_DETAIL_LINE_ERROR(where, what(" must be positive, got a negative number"), line_text);
  return value;
}

inline double parse_weight_field(std::string_view field, std::string_view line_text, const line_location& where) {
  double value = 0.0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (ec == std::errc::invalid_argument) ZEPPELIN_DETAIL_LINE_ERROR(where, "weight is not a number", line_text);
  if (ec == std::errc::result_out_of_range) ZEPPELIN_DETAIL_LINE_ERROR(where, "weight is out of range", line_text);
  if (end != field.data() + field.size())
    ZEPPELIN_DETAIL_LINE_ERROR(where, "weight has unexpected text after the number", line_text);
  if (!std::isfinite(value)) ZEPPELIN_DETAIL_LINE_ERROR(where, "weight must be finite", line_text);
  if (value < 0.0) ZEPPELIN_DETAIL_LINE_ERROR(where, "weight must be >= 0", line_text);
  return value;
}

//! Calls on_line(significant_text, location) for every line that is not blank or a comment.
template <class OnLine>
void for_each_significant_line(std::istream& in, std::string_view source, OnLine&& on_line) {
  std::string line;
  line_location where{source, 0};
  while (std::getline(in, line)) {
    ++where.line;
    const std::string_view text = significant_text(line);
    if (!text.empty()) on_line(text, where);
  }
  if (in.bad()) {
    std::string message = "reading failed after line " + std::to_string(where.line);
    if (!source.empty()) message += std::string(" of ") + std::string(source);
    ZEPPELIN_THROW(error, message, {{"line", static_cast<double>(where.line)}});
  }
}

inline std::vector<token_count> read_lengths(std::istream& in, std::string_view source) {
  std::vector<token_count> lengths;
  for_each_significant_line(in, source, [&](std::string_view text, const line_location& where) {
    const auto fields = split_fields(text);
    if (fields.size() > 1) ZEPPELIN_DETAIL_LINE_ERROR(where, "length has unexpected text after the number", text);
    lengths.push_back(parse_positive_field(fields.front(), "length", text, where));
  });
  return lengths;
}

inline length_histogram read_histogram(std::istream& in, std::string_view source) {
  std::vector<length_bin> bins;
  for_each_significant_line(in, source, [&](std::string_view text, const line_location& where) {
    const auto fields = split_fields(text);
    if (fields.size() != 3)
      ZEPPELIN_DETAIL_LINE_ERROR(where, "expected three fields 'lo hi weight', got " + std::to_string(fields.size()),
                                 text);
    const length_bin bin{parse_positive_field(fields[0], "lo", text, where),
                         parse_positive_field(fields[1], "hi", text, where), parse_weight_field(fields[2], text, where)};
    if (bin.hi <= bin.lo) ZEPPELIN_DETAIL_LINE_ERROR(where, "bin is empty (hi must exceed lo)", text);
    if (!bins.empty() && bins.back().hi > bin.lo)
      ZEPPELIN_DETAIL_LINE_ERROR(where,
                                 "bin overlaps or precedes the previous bin [" + std::to_string(bins.back().lo) + ", " +
                                     std::to_string(bins.back().hi) + ")",
                                 text);
    bins.push_back(bin);
  });
  std::string origin = source.empty() ? std::string("the histogram") : std::string(source);
  ZEPPELIN_EXPECTS(!bins.empty(), origin + " has no bins (only blank or comment lines)", {});
  double sum = 0.0;
  for (const auto& b : bins) sum += b.weight;
  ZEPPELIN_EXPECTS(sum > 0.0 && std::isfinite(sum), origin + ": the weights must have a positive, finite sum",
                   {{"sum", sum}});
  return length_histogram(std::move(bins));
}

inline std::ifstream open_for_reading(const std::filesystem::path& path) {
  std::ifstream in(path);
  ZEPPELIN_EXPECTS(in.is_open(), "cannot open '" + path.string() + "' for reading", {});
  return in;
}

}  // namespace detail

//! Lengths from a length file (format in the file comment), in file order. A stream with
//! only blank or comment lines gives an empty vector. Throws invalid_argument naming the
//! line for a non-numeric, zero, negative or overflowing length, or text after it.
[[nodiscard]] inline std::vector<token_count> read_lengths(std::istream& in) { return detail::read_lengths(in, {}); }

//! read_lengths on the file at `path`; messages start with the path. Throws
//! invalid_argument if the file cannot be opened.
[[nodiscard]] inline std::vector<token_count> read_lengths_file(const std::filesystem::path& path) {
  auto in = detail::open_for_reading(path);
  const std::string name = path.string();
  return detail::read_lengths(in, name);
}

//! A histogram from `lo hi weight` lines (format in the file comment). Throws
//! invalid_argument naming the line for a wrong field count, a bad lo/hi (as for lengths),
//! a weight that is not a finite number >= 0, hi <= lo, or a bin that overlaps or precedes
//! the previous one; and, without a line, for no bins or an all-zero weight sum.
[[nodiscard]] inline length_histogram read_histogram(std::istream& in) { return detail::read_histogram(in, {}); }

//! read_histogram on the file at `path`.
[[nodiscard]] inline length_histogram read_histogram_file(const std::filesystem::path& path) {
  auto in = detail::open_for_reading(path);
  const std::string name = path.string();
  return detail::read_histogram(in, name);
}

//! Writes one length per line. Throws invalid_argument (writing nothing) if a length is
//! not positive, since the reader would reject it.
inline void write_lengths(std::ostream& out, std::span<const token_count> lengths) {
  for (std::size_t i = 0; i < lengths.size(); ++i)
    ZEPPELIN_EXPECTS(lengths[i] > 0, "lengths must be positive to be written",
                     {{"index", static_cast<double>(i)}, {"length", static_cast<double>(lengths[i])}});
  std::string text;
  for (const token_count l : lengths) (text += std::to_string(l)) += '\n';
  out << text;
}

//! write_lengths to the file at `path` (created or replaced whole, core/output_file.hpp).
//! Throws invalid_argument for a length write_lengths refuses (leaving any old file as it
//! was) and when the file cannot be opened, written or closed.
inline void write_lengths_file(const std::filesystem::path& path, std::span<const token_count> lengths) {
  write_output_file(path, [&](std::ostream& out) { write_lengths(out, lengths); }, "length");
}

//! Writes a `# lo hi weight` header and one `lo hi weight` line per bin, weights as given
//! (not normalised) in shortest round-trip form, so read_histogram gives an equal histogram.
inline void write_histogram(std::ostream& out, const length_histogram& histogram) {
  std::string text = "# lo hi weight  (lengths lo..hi-1 in tokens; weights are normalised on reading)\n";
  for (const auto& b : histogram.bins()) {
    char weight[64];
    const auto result = std::to_chars(weight, weight + sizeof weight, b.weight);
    text += std::to_string(b.lo) + ' ' + std::to_string(b.hi) + ' ';
    text.append(weight, result.ptr);
    text += '\n';
  }
  out << text;
}

//! write_histogram to the file at `path` (created or truncated).
inline void write_histogram_file(const std::filesystem::path& path, const length_histogram& histogram) {
  write_output_file(path, [&](std::ostream& out) { write_histogram(out, histogram); }, "histogram");
}

ZEPPELIN_NAMESPACE_END

#undef ZEPPELIN_DETAIL_LINE_ERROR
