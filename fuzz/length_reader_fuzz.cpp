// fuzz/length_reader_fuzz.cpp
// Fuzz target: the length-file and histogram-file readers (data/length_file.hpp) on any
// bytes. The whole input is the file's text; both readers read it.
// Properties:
//   - a reader either returns or throws zeppelin::error (a refused line); nothing else
//     escapes, nothing crashes, no sanitizer report;
//   - read_lengths: every length > 0; write_lengths reads back to the same vector; the
//     statistics (data/length_stats.hpp) of a non-empty result are ordered
//     (min <= median <= p90 <= p99 <= max) or refused with zeppelin::error (token overflow);
//   - read_histogram: write_histogram reads back to an equal histogram; the mean lies in
//     [min_length, max_length] (finite); draws land in a bin of positive weight inside
//     [min_length, max_length]; restricting to [min_length, max_length] never fails and
//     keeps every draw; restricting to one drawn length draws it.
#include "fuzz_input.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/data/length_stats.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace zeppelin;

void check_lengths(const std::string& text) {
  std::vector<token_count> lengths;
  try {
    std::istringstream in(text);
    lengths = read_lengths(in);
  } catch (const zeppelin::error&) {
    return;  // a refused line: the reader said why
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  for (const token_count l : lengths) ZEPPELIN_FUZZ_CHECK(l > 0);
  try {
    std::ostringstream out;
    write_lengths(out, lengths);
    std::istringstream back(out.str());
    ZEPPELIN_FUZZ_CHECK(read_lengths(back) == lengths);
  } catch (const zeppelin::error&) {
    ZEPPELIN_FUZZ_FAIL("the lengths the reader accepted do not write and read back");
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  if (lengths.empty()) return;
  try {
    const length_stats s = summarize(lengths);
    ZEPPELIN_FUZZ_CHECK(s.count == lengths.size());
    ZEPPELIN_FUZZ_CHECK(s.min_length <= s.median && s.median <= s.p90 && s.p90 <= s.p99 && s.p99 <= s.max_length);
    ZEPPELIN_FUZZ_CHECK(s.token_share_64k <= s.token_share_16k && s.token_share_16k <= s.token_share_4k &&
                        s.token_share_4k <= 1.0);
  } catch (const zeppelin::error&) {
    // the token total overflows 64 bits: refused
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
}

void check_histogram(const std::string& text) {
  std::optional<length_histogram> h;
  try {
    std::istringstream in(text);
    h.emplace(read_histogram(in));
  } catch (const zeppelin::error&) {
    return;
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  try {
    std::ostringstream out;
    write_histogram(out, *h);
    std::istringstream back(out.str());
    ZEPPELIN_FUZZ_CHECK(read_histogram(back) == *h);
  } catch (const zeppelin::error&) {
    ZEPPELIN_FUZZ_FAIL("the histogram the reader accepted does not write and read back");
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  const token_count lo = h->min_length(), hi = h->max_length();
  ZEPPELIN_FUZZ_CHECK(1 <= lo && lo <= hi);
  const double mean = h->mean();
  ZEPPELIN_FUZZ_CHECK(std::isfinite(mean));
  // the mean is a weighted average of bin midpoints: inside the drawable range up to rounding
  ZEPPELIN_FUZZ_CHECK(mean >= static_cast<double>(lo) * (1 - 1e-9) && mean <= static_cast<double>(hi) * (1 + 1e-9));
  random_generator rng(text.size());
  for (int draw = 0; draw < 8; ++draw) {
    const token_count l = h->sample(rng);
    ZEPPELIN_FUZZ_CHECK(lo <= l && l <= hi);
    const auto bin = h->bin_of(l);
    ZEPPELIN_FUZZ_CHECK(bin.has_value());
    ZEPPELIN_FUZZ_CHECK(h->bins()[*bin].weight > 0.0);
  }
  token_count drawn = lo;
  try {
    // [min_length, max_length] clips no bin of positive weight: its mass is the whole
    const length_histogram r = h->restricted(lo, hi);
    for (int draw = 0; draw < 4; ++draw) {
      drawn = r.sample(rng);
      ZEPPELIN_FUZZ_CHECK(lo <= drawn && drawn <= hi);
    }
  } catch (const zeppelin::error&) {
    ZEPPELIN_FUZZ_FAIL("restricting a histogram to its own drawable range was refused");
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  try {
    const length_histogram one = h->restricted(drawn, drawn);
    ZEPPELIN_FUZZ_CHECK(one.sample(rng) == drawn);
  } catch (const zeppelin::error&) {
    // the one-length slice of a bin of subnormal weight underflows to zero mass: refused
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;  // a few lines are enough; long inputs only slow the search
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_lengths(text);
  check_histogram(text);
  return 0;
}
