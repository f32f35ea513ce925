// zeppelin/comm/collectives.hpp
// The collectives the executors need, written once over the communicator concept as grouped
// point-to-point operations (how NCCL itself builds alltoallv), so every communicator model
// gets them:
//   all_to_all_v : every rank sends send_counts[p] elements at send_displs[p] to each peer p
//                  and receives recv_counts[p] elements at recv_displs[p] from each peer p
//                  (MPI_Alltoallv argument order; counts and displacements in elements)
//   all_gather_v : over a SUBSET of ranks (a ring group, in ring order): position i
//                  contributes counts[i] elements; every member receives the concatenation
//                  in group order
// Peers with a zero count post nothing (both sides know the counts). The rank's own part is
// copied locally. Each call is one group labelled `step`. nvcc-safe (no range-v3).
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

ZEPPELIN_NAMESPACE_BEGIN

//! Alltoallv over all c.size() ranks. Throws invalid_argument when a count array does not
//! have one entry per rank, a count or displacement is negative, or a range leaves its buffer.
template <communicator C, class T>
  requires std::is_trivially_copyable_v<T>
void all_to_all_v(C& c, std::span<const T> send, std::span<const token_count> send_counts,
                  std::span<const token_count> send_displs, std::span<T> recv, std::span<const token_count> recv_counts,
                  std::span<const token_count> recv_displs, std::string_view step) {
  const auto n = static_cast<std::size_t>(c.size());
  ZEPPELIN_EXPECTS(send_counts.size() == n && send_displs.size() == n && recv_counts.size() == n && recv_displs.size() == n,
                   "all_to_all_v: counts and displacements need one entry per rank",
                   {{"ranks", static_cast<double>(n)}, {"send_counts", static_cast<double>(send_counts.size())},
                    {"recv_counts", static_cast<double>(recv_counts.size())}});
  const auto check = [](token_count count, token_count displ, std::size_t size, std::size_t peer, const char* what) {
    ZEPPELIN_EXPECTS(count >= 0 && displ >= 0 && static_cast<std::size_t>(displ + count) <= size,
                     std::string("all_to_all_v: a ") + what + " range leaves its buffer",
                     {{"peer", static_cast<double>(peer)}, {"count", static_cast<double>(count)},
                      {"displ", static_cast<double>(displ)}, {"buffer", static_cast<double>(size)}});
  };
  for (std::size_t p = 0; p < n; ++p) {
    check(send_counts[p], send_displs[p], send.size(), p, "send");
    check(recv_counts[p], recv_displs[p], recv.size(), p, "receive");
  }
  const auto me = static_cast<std::size_t>(c.rank());
  ZEPPELIN_EXPECTS(send_counts[me] == recv_counts[me], "all_to_all_v: the rank's own send and receive counts differ",
                   {{"rank", static_cast<double>(me)}, {"send", static_cast<double>(send_counts[me])},
                    {"recv", static_cast<double>(recv_counts[me])}});
  std::copy_n(send.begin() + send_displs[me], send_counts[me], recv.begin() + recv_displs[me]);
  c.group_start();
  for (std::size_t p = 0; p < n; ++p) {
    if (p == me) continue;
    if (send_counts[p] > 0)
      send_elements(c, send.subspan(static_cast<std::size_t>(send_displs[p]), static_cast<std::size_t>(send_counts[p])),
                    static_cast<rank_index>(p));
    if (recv_counts[p] > 0)
      recv_elements(c, recv.subspan(static_cast<std::size_t>(recv_displs[p]), static_cast<std::size_t>(recv_counts[p])),
                    static_cast<rank_index>(p));
  }
  c.group_end(step);
}

//! All-gather with per-member sizes over the ranks `group` (ring order; the caller must be a
//! member): `mine` (counts[my position] elements) goes to every member, and `gathered`
//! (sum counts elements) receives every member's part in group order. Throws
//! invalid_argument when the caller is not in the group or the sizes disagree.
template <communicator C, class T>
  requires std::is_trivially_copyable_v<T>
void all_gather_v(C& c, std::span<const rank_index> group, std::span<const T> mine, std::span<T> gathered,
                  std::span<const token_count> counts, std::string_view step) {
  ZEPPELIN_EXPECTS(counts.size() == group.size(), "all_gather_v: one count per group member is required",
                   {{"members", static_cast<double>(group.size())}, {"counts", static_cast<double>(counts.size())}});
  const auto it = std::find(group.begin(), group.end(), c.rank());
  ZEPPELIN_EXPECTS(it != group.end(), "all_gather_v: the calling rank is not a member of the group",
                   {{"rank", static_cast<double>(c.rank())}});
  const auto me = static_cast<std::size_t>(it - group.begin());
  token_count total = 0;
  for (const token_count x : counts) {
    ZEPPELIN_EXPECTS(x >= 0, "all_gather_v: counts must be non-negative", {{"count", static_cast<double>(x)}});
    total += x;
  }
  ZEPPELIN_EXPECTS(static_cast<token_count>(mine.size()) == counts[me] && static_cast<token_count>(gathered.size()) == total,
                   "all_gather_v: buffer sizes do not match the counts",
                   {{"mine", static_cast<double>(mine.size())}, {"count", static_cast<double>(counts[me])},
                    {"gathered", static_cast<double>(gathered.size())}, {"total", static_cast<double>(total)}});
  c.group_start();
  token_count offset = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    const auto part = gathered.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(counts[i]));
    if (i == me) {
      std::copy(mine.begin(), mine.end(), part.begin());
    } else if (counts[i] > 0) {
      recv_elements(c, part, group[i]);
    }
    if (i != me && counts[me] > 0) send_elements(c, mine, group[i]);
    offset += counts[i];
  }
  c.group_end(step);
}

ZEPPELIN_NAMESPACE_END
