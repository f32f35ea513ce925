// write_output_file: a whole file or an error, never a partial file under the final name.
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/output_file.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

std::filesystem::path temp_path(const std::string& name) { return std::filesystem::temp_directory_path() / ("zeppelin_output_" + name); }

std::string contents(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string error_of(const auto& call) {
  try {
    call();
  } catch (const zeppelin::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("write_output_file writes the whole file, replacing an old one, and leaves no partial file", "[core]") {
  const auto path = temp_path("whole.txt");
  zeppelin::write_output_file(path, [](std::ostream& out) { out << "old\n"; }, "test");
  zeppelin::write_output_file(path, [](std::ostream& out) { out << std::string(100000, 'x'); }, "test");
  CHECK(contents(path) == std::string(100000, 'x'));
  CHECK_FALSE(std::filesystem::exists(path.string() + ".partial"));
  std::filesystem::remove(path);
}

TEST_CASE("write_output_file: a writer that throws leaves the old file as it was", "[core]") {
  const auto path = temp_path("refused.txt");
  zeppelin::write_output_file(path, [](std::ostream& out) { out << "old\n"; }, "test");
  CHECK_THROWS_AS(zeppelin::write_output_file(
                      path,
                      [](std::ostream& out) {
                        out << "half";
                        throw std::runtime_error("refused");
                      },
                      "test"),
                  std::runtime_error);
  CHECK(contents(path) == "old\n");
  CHECK_FALSE(std::filesystem::exists(path.string() + ".partial"));
  std::filesystem::remove(path);
}

TEST_CASE("write_output_file names the path and the failure", "[core]") {
  const auto missing = temp_path("no_such_dir") / "f.json";
  const std::string open_error = error_of([&] { zeppelin::write_output_file(missing, [](std::ostream& out) { out << 1; }, "--record"); });
  CHECK(open_error.find("--record file '" + missing.string() + "': cannot be opened for writing") != std::string::npos);
}

TEST_CASE("write_output_file: a full disk is an error, and a device is written in place", "[core]") {
  REQUIRE(std::filesystem::exists("/dev/full"));  // Linux: every write to it fails with ENOSPC
  const std::string full_error = error_of([] {
    zeppelin::write_output_file("/dev/full", [](std::ostream& out) { out << std::string(1 << 16, 'x'); }, "--trace");
  });
  CHECK(full_error.find("--trace file '/dev/full': writing failed") != std::string::npos);
  CHECK(std::filesystem::exists("/dev/full"));  // written in place, never renamed over
}
