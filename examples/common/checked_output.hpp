// examples/common/checked_output.hpp
// Writing an output file so that a failure is an error, never a silent exit 0.
//   in : a path and a function that writes the content to a std::ostream
//   out: the file, whole; or zeppelin::invalid_argument naming the path when it cannot be
//        opened, a write fails (a full disk: /dev/full) or the close does, after removing
//        what was written of a regular file, so no partial file is left looking complete
// write_checked_stdout does the same for standard output (`--json > /dev/full`).
#pragma once

#include <zeppelin/core/error.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <ostream>
#include <string>
#include <system_error>

namespace example_cli {

//! Writes `path` with `write(std::ostream&)` (see the file comment).
template <class Write>
void write_checked_file(const std::string& path, Write&& write, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ZEPPELIN_EXPECTS(out.is_open(), std::string("cannot open the ") + what + " file for writing: " + path, {});
  write(static_cast<std::ostream&>(out));
  out.flush();
  const bool written = out.good();
  out.close();
  if (written && !out.fail()) return;
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) std::filesystem::remove(path, ec);
  ZEPPELIN_THROW(invalid_argument, std::string("writing the ") + what + " file failed (disk full or the device refused it): " + path, {});
}

//! Writes standard output with `write(std::ostream&)` and flushes it; a failed write or flush
//! is an error.
template <class Write>
void write_checked_stdout(Write&& write) {
  write(std::cout);
  std::cout.flush();
  ZEPPELIN_EXPECTS(std::cout.good() && std::fflush(stdout) == 0, "writing standard output failed (disk full or a closed pipe)", {});
}

}  // namespace example_cli
