// zeppelin/nccl/bootstrap.hpp
// Getting the NCCL unique id from one process to all: the CALLER moves the 128 bytes (MPI_Bcast,
// torch.distributed's store, a shared file); these helpers make and carry them.
//   make_unique_id()                 ncclGetUniqueId on the root rank
//   to_bytes(id) / from_bytes(b)     the raw 128 bytes (for MPI_Bcast or any byte channel)
//   to_hex(id) / from_hex(text)      256 hex digits (environment variables, key-value stores)
//   write_unique_id(path, id)        writes the hex form to a file atomically (temp + rename)
//   read_unique_id(path, timeout)    polls until the file appears, then reads it; throws
//                                    nccl_error (ncclInvalidUsage) on timeout or bad content
// MPI example: examples/nccl_ring_attention/main.cpp. nvcc-safe; needs nccl.h.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/output_file.hpp>
#include <zeppelin/nccl/error.hpp>

#include <nccl.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <thread>

ZEPPELIN_NAMESPACE_BEGIN
namespace nccl {

inline constexpr std::size_t unique_id_bytes = sizeof(ncclUniqueId);
static_assert(unique_id_bytes == NCCL_UNIQUE_ID_BYTES);

//! A fresh unique id (call on one rank, then distribute it).
[[nodiscard]] inline ncclUniqueId make_unique_id() {
  ncclUniqueId id;
  ZEPPELIN_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

[[nodiscard]] inline std::array<std::byte, unique_id_bytes> to_bytes(const ncclUniqueId& id) noexcept {
  std::array<std::byte, unique_id_bytes> out;
  std::memcpy(out.data(), &id, unique_id_bytes);
  return out;
}

//! Throws invalid_argument unless exactly unique_id_bytes bytes are given.
[[nodiscard]] inline ncclUniqueId from_bytes(std::span<const std::byte> bytes) {
  ZEPPELIN_EXPECTS(bytes.size() == unique_id_bytes, "nccl: a unique id has exactly NCCL_UNIQUE_ID_BYTES bytes",
                   {{"bytes", double(bytes.size())}, {"expected", double(unique_id_bytes)}});
  ncclUniqueId id;
  std::memcpy(&id, bytes.data(), unique_id_bytes);
  return id;
}

[[nodiscard]] inline std::string to_hex(const ncclUniqueId& id) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * unique_id_bytes);
  for (const std::byte b : to_bytes(id)) {
    out.push_back(digits[std::to_integer<unsigned>(b) >> 4]);
    out.push_back(digits[std::to_integer<unsigned>(b) & 15u]);
  }
  return out;
}

//! Throws invalid_argument for a wrong length or a non-hex character.
[[nodiscard]] inline ncclUniqueId from_hex(std::string_view text) {
  ZEPPELIN_EXPECTS(text.size() == 2 * unique_id_bytes, "nccl: a hex unique id has 2 * NCCL_UNIQUE_ID_BYTES digits",
                   {{"digits", double(text.size())}, {"expected", double(2 * unique_id_bytes)}});
  const auto value = [](char c, std::size_t at) -> unsigned {
    if (c >= '0' && c <= '9') return static_cast<unsigned>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<unsigned>(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return static_cast<unsigned>(c - 'A' + 10);
    ZEPPELIN_THROW(invalid_argument, "nccl: a hex unique id holds a non-hex character", {{"position", double(at)}});
  };
  std::array<std::byte, unique_id_bytes> bytes;
  for (std::size_t i = 0; i < unique_id_bytes; ++i)
    bytes[i] = static_cast<std::byte>(value(text[2 * i], 2 * i) << 4 | value(text[2 * i + 1], 2 * i + 1));
  return from_bytes(bytes);
}

//! Writes the id's hex form to `path` so that readers never see a partial file (written
//! beside it and renamed, core/output_file.hpp). Throws invalid_argument naming the path
//! when it cannot be written.
inline void write_unique_id(const std::filesystem::path& path, const ncclUniqueId& id) {
  write_output_file(path, [&](std::ostream& out) { out << to_hex(id) << '\n'; }, "NCCL unique id");
}

//! Waits up to `timeout` for `path` (written by write_unique_id) and reads the id.
[[nodiscard]] inline ncclUniqueId read_unique_id(const std::filesystem::path& path,
                                                 std::chrono::milliseconds timeout = std::chrono::minutes(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::ifstream in(path);
    std::string text;
    if (in && (in >> text) && text.size() == 2 * unique_id_bytes) return from_hex(text);
    if (std::chrono::steady_clock::now() >= deadline)
      throw nccl_error(ncclInvalidUsage, "nccl: no unique id appeared in " + path.string() + " within " +
                                             std::to_string(timeout.count()) + " ms",
                       __FILE__, __LINE__);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace nccl
ZEPPELIN_NAMESPACE_END
