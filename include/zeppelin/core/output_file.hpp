// zeppelin/core/output_file.hpp
// Writing an output so that a failure is an error, never a silent success.
//   write_output_file(path, write, what)
//     in : a path, a function writing the content to a std::ostream, and what the file is
//          (for messages: "trace", "plan JSON")
//     out: the file, whole. A regular file is written beside its final name (path + ".partial")
//          and renamed over it once written and closed, so a reader never finds a partial file
//          under the final name; a device or pipe (/dev/full, /dev/stdout) is written in place.
//          Throws invalid_argument naming the path when it cannot be opened, a write or the
//          close fails (a full disk), or the rename does; the partial file is removed. An
//          exception from `write` passes through, after the partial file is removed; a file
//          already at `path` is replaced only by a whole new one.
//   finish_standard_output()
//     flushes std::cout and stdout; throws invalid_argument when a write or the flush failed
//     (`--json > /dev/full`, a closed pipe), so a tool exits non-zero instead of 0.
// Host only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

// Whether `path` names something that is not a regular file and cannot be renamed onto: a
// device, a pipe or a socket (a missing path or a regular file is written through a rename).
inline bool is_special_output(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  return !ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status);
}

}  // namespace detail

//! Writes `path` with `write(std::ostream&)` (see the file comment).
template <class Write>
void write_output_file(const std::filesystem::path& path, Write&& write, std::string_view what) {
  const bool in_place = detail::is_special_output(path);
  const std::filesystem::path target = in_place ? path : std::filesystem::path(path.string() + ".partial");
  const auto discard = [&] {
    std::error_code ec;
    if (!in_place) std::filesystem::remove(target, ec);
  };
  const auto fail = [&](std::string_view why) {
    discard();
    ZEPPELIN_THROW(invalid_argument, std::string(what) + " file '" + path.string() + "': " + std::string(why), {});
  };
  {
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    if (!out.is_open()) fail("cannot be opened for writing");
    try {
      write(static_cast<std::ostream&>(out));
    } catch (...) {  // the writer refused its input: nothing is left behind, any old file stays
      out.close();
      discard();
      throw;
    }
    out.flush();
    const bool written = out.good();
    out.close();
    if (!written || out.fail()) fail("writing failed (disk full, or the device refused it)");
  }
  if (in_place) return;
  std::error_code ec;
  std::filesystem::rename(target, path, ec);
  if (ec) fail("cannot be renamed into place: " + ec.message());
}

//! Flushes standard output (see the file comment).
inline void finish_standard_output() {
  std::cout.flush();
  const bool written = std::cout.good();
  const bool flushed = std::fflush(stdout) == 0;
  ZEPPELIN_EXPECTS(written && flushed && !std::ferror(stdout), "writing standard output failed (disk full, or a closed pipe)", {});
}

ZEPPELIN_NAMESPACE_END
