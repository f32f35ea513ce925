// zeppelin/comm/comm_error.hpp
// Errors of communicators (comm/communicator.hpp) and of the worlds that run ranks: what a
// mismatched schedule, a failing or stuck rank, or ranks running different plans turn into
// instead of a hang or a silent wrong answer.
//   comm_error     base (a zeppelin::error); step() is the caller's label of the group
//   ├─ comm_timeout   a rank waited too long, or could provably never be served (every
//   │                 running rank waits, or the peer has finished); rank(), peer() name who
//   │                 waited for whom. Also a rank that is stuck outside the communicator (a
//   │                 loopback world's watchdog): rank() is the stuck rank, peer() is -1
//   ├─ comm_mismatch  a matched send and receive disagree in size, or messages were never
//   │                 received when the run ended
//   ├─ comm_aborted   thrown in the other ranks after one failed (the run reports the cause)
//   ├─ rank_failed    a rank's function threw: rank(), step() (the last step it passed to the
//   │                 communicator) and the original exception, nested (std::nested_exception)
//   └─ plan_mismatch  the ranks' engines were built from different plans or programs: rank()
//                     and peer() disagree, fingerprint() and peer_fingerprint() say how
// nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

class comm_error : public error {
 public:
  comm_error(std::string_view message, std::vector<named_value> values, std::string step, const char* file, int line)
      : error(message, std::move(values), file, line), step_(std::move(step)) {}
  //! The label the caller gave the group (or collective) that failed.
  [[nodiscard]] const std::string& step() const noexcept { return step_; }

 private:
  std::string step_;
};

//! A receive that was not (or can never be) matched: `rank` waited for `peer` at `step`; or
//! `rank` is stuck outside the communicator since `step` (a loopback watchdog; peer -1).
class comm_timeout : public comm_error {
 public:
  comm_timeout(std::string_view message, rank_index rank, rank_index peer, std::string step, const char* file, int line)
      : comm_error(message, {{"rank", static_cast<double>(rank)}, {"peer", static_cast<double>(peer)}}, std::move(step), file,
                   line),
        rank_(rank),
        peer_(peer) {}
  [[nodiscard]] rank_index rank() const noexcept { return rank_; }
  [[nodiscard]] rank_index peer() const noexcept { return peer_; }

 private:
  rank_index rank_;
  rank_index peer_;
};

//! A send and the receive it matched have different sizes, or sends were never received.
class comm_mismatch : public comm_error {
  using comm_error::comm_error;
};

//! Another rank failed first; this rank stopped waiting.
class comm_aborted : public comm_error {
  using comm_error::comm_error;
};

//! A rank's function threw something other than the world's own errors. rank() is the rank,
//! step() the last step it passed to the communicator ("" when it had passed none); the
//! original exception stays reachable and typed as the nested exception
//! (std::rethrow_if_nested(e), e.nested_ptr()). Construct it inside the handler of the
//! original: std::nested_exception captures the exception being handled.
class rank_failed : public comm_error, public std::nested_exception {
 public:
  rank_failed(std::string_view message, rank_index rank, std::string step, const char* file, int line)
      : comm_error(message, {{"rank", static_cast<double>(rank)}}, std::move(step), file, line), rank_(rank) {}
  [[nodiscard]] rank_index rank() const noexcept { return rank_; }

 private:
  rank_index rank_;
};

//! The ranks' engines disagree on what to run: rank() and peer() hold different
//! fingerprints of their plan (or execution program); fingerprint() is rank()'s,
//! peer_fingerprint() peer()'s (exact 64-bit values; the named values hold only the ranks).
class plan_mismatch : public comm_error {
 public:
  plan_mismatch(std::string_view message, rank_index rank, rank_index peer, std::uint64_t fingerprint,
                std::uint64_t peer_fingerprint, std::string step, const char* file, int line)
      : comm_error(message, {{"rank", static_cast<double>(rank)}, {"peer", static_cast<double>(peer)}}, std::move(step), file,
                   line),
        rank_(rank),
        peer_(peer),
        fingerprint_(fingerprint),
        peer_fingerprint_(peer_fingerprint) {}
  [[nodiscard]] rank_index rank() const noexcept { return rank_; }
  [[nodiscard]] rank_index peer() const noexcept { return peer_; }
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return fingerprint_; }
  [[nodiscard]] std::uint64_t peer_fingerprint() const noexcept { return peer_fingerprint_; }

 private:
  rank_index rank_;
  rank_index peer_;
  std::uint64_t fingerprint_;
  std::uint64_t peer_fingerprint_;
};

ZEPPELIN_NAMESPACE_END
