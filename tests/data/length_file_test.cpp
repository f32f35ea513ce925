// Tests of data/length_file.hpp: the fixtures, every kind of bad line (with its line
// number and text), and write/read round trips through streams and files.
#include <catch2/catch.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/length_file.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

using zeppelin::length_histogram;
using zeppelin::token_count;

namespace {

const std::filesystem::path fixtures = ZEPPELIN_TEST_FIXTURES_DIR;

// Runs `read` on `text` and returns the invalid_argument it must throw.
template <class Read>
zeppelin::invalid_argument read_error(Read read, const std::string& text) {
  std::istringstream in(text);
  try {
    (void)read(in);
  } catch (const zeppelin::invalid_argument& e) {
    return e;
  }
  FAIL("expected invalid_argument for input:\n" << text);
  throw;  // unreachable
}

std::vector<token_count> lengths_of(const std::string& text) {
  std::istringstream in(text);
  return zeppelin::read_lengths(in);
}

auto read_lengths = [](std::istream& in) { return zeppelin::read_lengths(in); };
auto read_histogram = [](std::istream& in) { return zeppelin::read_histogram(in); };

// Checks that the error names `line` (as value and in the text), the offending text and the problem.
void check_line_error(const zeppelin::invalid_argument& e, int line, const std::string& text, const std::string& problem) {
  const std::string what = e.what();
  INFO(what);
  CHECK(e.value("line") == static_cast<double>(line));
  CHECK(what.find("line " + std::to_string(line) + ":") != std::string::npos);
  CHECK(what.find("'" + text + "'") != std::string::npos);
  CHECK(what.find(problem) != std::string::npos);
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("zeppelin_data_test_" + name);
}

}  // namespace

TEST_CASE("read_lengths_file reads the fixture: comments, blanks, whitespace", "[data]") {
  const auto lengths = zeppelin::read_lengths_file(fixtures / "lengths_small.txt");
  CHECK(lengths == std::vector<token_count>{1, 512, 1023, 1024, 4096, 16384, 65536, 131072, 2048});
}

TEST_CASE("read_lengths accepts CRLF, trailing comments and an empty input", "[data]") {
  CHECK(lengths_of("3\r\n4\r\n") == std::vector<token_count>{3, 4});
  CHECK(lengths_of("  7 # seven\n#8\n\n9") == std::vector<token_count>{7, 9});
  CHECK(lengths_of("9223372036854775807\n") == std::vector<token_count>{9223372036854775807});
  CHECK(lengths_of("").empty());
  CHECK(lengths_of("# nothing\n\n   \n").empty());
}

TEST_CASE("read_lengths rejects each kind of bad line, naming the line and the text", "[data]") {
  const std::string head = "# header\n100\n\n";  // the bad line is line 4
  check_line_error(read_error(read_lengths, head + "abc\n5\n"), 4, "abc", "is not a number");
  check_line_error(read_error(read_lengths, head + "+5\n"), 4, "+5", "is not a number");
  check_line_error(read_error(read_lengths, head + "0\n"), 4, "0", "must be positive, got zero");
  check_line_error(read_error(read_lengths, head + "-12\n"), 4, "-12", "got a negative number");
  check_line_error(read_error(read_lengths, head + "99999999999999999999\n"), 4, "99999999999999999999",
                   "overflows a 64-bit token count");
  check_line_error(read_error(read_lengths, head + "9223372036854775808\n"), 4, "9223372036854775808", "overflows");
  check_line_error(read_error(read_lengths, head + "12abc\n"), 4, "12abc", "unexpected text after the number");
  check_line_error(read_error(read_lengths, head + "12 34\n"), 4, "12 34", "unexpected text after the number");
  check_line_error(read_error(read_lengths, head + "1.5\n"), 4, "1.5", "unexpected text after the number");
  check_line_error(read_error(read_lengths, "1\n2\n3\n4\n5\n6\n7\n8\n9\nten\n"), 10, "ten", "is not a number");
}

TEST_CASE("read_lengths_file: missing files and file names in messages", "[data]") {
  CHECK_THROWS_AS(zeppelin::read_lengths_file(fixtures / "does_not_exist.txt"), zeppelin::invalid_argument);
  const auto path = temp_file("bad_lengths.txt");
  {
    std::ofstream out(path);
    out << "5\n6\nseven\n";
  }
  try {
    (void)zeppelin::read_lengths_file(path);
    FAIL("expected invalid_argument");
  } catch (const zeppelin::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find(path.string() + " line 3:") != std::string::npos);
    CHECK(e.value("line") == 3.0);
  }
  std::filesystem::remove(path);
}

TEST_CASE("read_histogram_file reads the fixture: gaps, zero weights, any scale", "[data]") {
  const auto h = zeppelin::read_histogram_file(fixtures / "histogram_small.txt");
  CHECK(h == length_histogram({{1, 1024, 2.0}, {1024, 4096, 1.0}, {8192, 16384, 1.0}, {16384, 32768, 0.0}}));
  CHECK(h.probability(0) == 0.5);
  CHECK(h.probability(3) == 0.0);
}

TEST_CASE("read_histogram rejects each kind of bad line, naming the line and the text", "[data]") {
  const std::string head = "# lo hi weight\n1 10 1\n";  // the bad line is line 3
  check_line_error(read_error(read_histogram, head + "10 20\n"), 3, "10 20", "expected three fields");
  check_line_error(read_error(read_histogram, head + "10 20 1 4\n"), 3, "10 20 1 4", "got 4");
  check_line_error(read_error(read_histogram, head + "x 20 1\n"), 3, "x 20 1", "lo is not a number");
  check_line_error(read_error(read_histogram, head + "10 0 1\n"), 3, "10 0 1", "hi must be positive, got zero");
  check_line_error(read_error(read_histogram, head + "10 -20 1\n"), 3, "10 -20 1", "hi must be positive");
  check_line_error(read_error(read_histogram, head + "10 99999999999999999999 1\n"), 3, "10 99999999999999999999 1",
                   "hi overflows");
  check_line_error(read_error(read_histogram, head + "10 20 abc\n"), 3, "10 20 abc", "weight is not a number");
  check_line_error(read_error(read_histogram, head + "10 20 0.5x\n"), 3, "10 20 0.5x", "weight has unexpected text");
  check_line_error(read_error(read_histogram, head + "10 20 -0.5\n"), 3, "10 20 -0.5", "weight must be >= 0");
  check_line_error(read_error(read_histogram, head + "10 20 nan\n"), 3, "10 20 nan", "weight must be finite");
  check_line_error(read_error(read_histogram, head + "10 20 inf\n"), 3, "10 20 inf", "weight must be finite");
  check_line_error(read_error(read_histogram, head + "10 20 1e999\n"), 3, "10 20 1e999", "weight is out of range");
  check_line_error(read_error(read_histogram, head + "20 20 1\n"), 3, "20 20 1", "hi must exceed lo");
  check_line_error(read_error(read_histogram, head + "5 20 1\n"), 3, "5 20 1", "overlaps or precedes");
  // Whole-file problems carry no line number.
  CHECK_FALSE(read_error(read_histogram, "# only a comment\n").value("line").has_value());
  CHECK_FALSE(read_error(read_histogram, "1 10 0\n10 20 0\n").value("line").has_value());
}

TEST_CASE("lengths round-trip through write_lengths / read_lengths", "[data]") {
  zeppelin::random_generator rng(17);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<token_count> lengths(rng.below(50));
    for (auto& l : lengths) l = rng.between(1, trial % 2 ? 4096 : std::numeric_limits<token_count>::max());
    std::ostringstream out;
    zeppelin::write_lengths(out, lengths);
    CHECK(lengths_of(out.str()) == lengths);
  }
  const std::vector<token_count> lengths = {3, 1, 65536};
  const auto path = temp_file("lengths_round_trip.txt");
  zeppelin::write_lengths_file(path, lengths);
  CHECK(zeppelin::read_lengths_file(path) == lengths);
  std::filesystem::remove(path);
  // A length the reader would reject is not written, and nothing is written.
  std::ostringstream out;
  CHECK_THROWS_AS(zeppelin::write_lengths(out, std::vector<token_count>{5, 0}), zeppelin::invalid_argument);
  CHECK(out.str().empty());
}

TEST_CASE("histograms round-trip through write_histogram / read_histogram bit for bit", "[data]") {
  for (const auto& h : {zeppelin::datasets::arxiv(), zeppelin::datasets::github(), zeppelin::datasets::prolong64k()}) {
    std::stringstream io;
    zeppelin::write_histogram(io, h);
    CHECK(zeppelin::read_histogram(io) == h);
  }
  // Weights that need all 17 significant digits, tiny and huge ones.
  zeppelin::random_generator rng(99);
  std::vector<zeppelin::length_bin> bins;
  token_count lo = 1;
  for (int i = 0; i < 30; ++i) {
    const token_count width = rng.between(1, 5000);
    const double weight = i % 7 == 0 ? 0.0 : rng.uniform() * std::pow(10.0, static_cast<double>(rng.between(-300, 300)));
    bins.push_back({lo, lo + width, weight});
    lo += width + rng.between(0, 3);
  }
  const length_histogram h(bins);
  const auto path = temp_file("histogram_round_trip.txt");
  zeppelin::write_histogram_file(path, h);
  const auto back = zeppelin::read_histogram_file(path);
  std::filesystem::remove(path);
  REQUIRE(back == h);
  for (std::size_t i = 0; i < h.size(); ++i) CHECK(back.probability(i) == h.probability(i));
}

TEST_CASE("an error quotes a short, escaped excerpt of a huge or binary line", "[data]") {
  std::string line(1 << 20, '7');
  line[3] = '\x01';  // not a number, with a control byte
  line[4] = '\x1b';
  const auto e = read_error(read_lengths, "5\n" + line + "\n");
  const std::string what = e.what();
  CHECK(what.size() < 400);
  CHECK(what.find("line 2") != std::string::npos);
  CHECK(what.find("777\\x01\\x1b777") != std::string::npos);
  CHECK(what.find("...'") != std::string::npos);
  CHECK(what.find('\x1b') == std::string::npos);
}
