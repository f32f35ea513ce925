// zeppelin/comm/sub_communicator.hpp
// A communicator over a subset of another's ranks, as NCCL's ncclCommSplit gives, without
// creating anything: a view that renumbers.
//   in : a parent communicator (comm/communicator.hpp) and `members`, the parent ranks of the
//        view's ranks 0 .. members.size() - 1 (the calling rank among them, each once)
//   out: a communicator whose rank() is the caller's index in `members`, whose peers are
//        view ranks (send / recv to view rank p go to parent rank members[p]), and whose
//        node_of(p) is the parent's node of members[p]
// Groups are the parent's: group_start / group_end pass through, so a group may mix
// operations of several views of one parent (a pipeline stage's activation exchange and its
// context-parallel group's rings post on one communicator). Matching stays the parent's
// (per ordered pair of parent ranks, in posting order); views whose rank sets are disjoint
// never share a pair. Use: the context-parallel group of one pipeline stage, the data-parallel
// replicas of one stage. Errors: invalid_argument when the caller is not a member, a member
// is outside the parent or listed twice, or a peer is outside the view. nvcc-safe.
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/comm/world_id.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <communicator Parent>
class sub_communicator {
 public:
  sub_communicator(Parent& parent, std::vector<rank_index> members) : parent_(&parent), members_(std::move(members)) {
    const rank_index n = parent.size();
    std::vector<bool> seen(static_cast<std::size_t>(n), false);
    for (const rank_index m : members_) {
      ZEPPELIN_EXPECTS(m >= 0 && m < n, "sub_communicator: a member is outside the parent communicator",
                       {{"member", double(m)}, {"parent_ranks", double(n)}});
      ZEPPELIN_EXPECTS(!seen[static_cast<std::size_t>(m)], "sub_communicator: a member is listed twice", {{"member", double(m)}});
      seen[static_cast<std::size_t>(m)] = true;
    }
    const auto at = std::find(members_.begin(), members_.end(), parent.rank());
    ZEPPELIN_EXPECTS(at != members_.end(), "sub_communicator: the calling rank is not a member",
                     {{"rank", double(parent.rank())}, {"members", double(members_.size())}});
    rank_ = static_cast<rank_index>(at - members_.begin());
    fnv1a_hasher h;  // the view's world, fixed for its life: the engines ask on every pass
    h.add(static_cast<std::int64_t>(world_of(parent)));
    for (const rank_index m : members_) h.add(static_cast<std::int64_t>(m));
    world_id_ = h.value() | 1;  // never 0, which no world is
  }

  [[nodiscard]] rank_index rank() const noexcept { return rank_; }
  [[nodiscard]] rank_index size() const noexcept { return static_cast<rank_index>(members_.size()); }
  [[nodiscard]] int node_of(rank_index peer) const { return parent_->node_of(parent_rank(peer)); }
  //! The parent rank of view rank `peer`.
  [[nodiscard]] rank_index parent_rank(rank_index peer) const {
    ZEPPELIN_EXPECTS(peer >= 0 && peer < size(), "sub_communicator: peer outside the view",
                     {{"peer", double(peer)}, {"ranks", double(size())}});
    return members_[static_cast<std::size_t>(peer)];
  }
  [[nodiscard]] std::span<const rank_index> members() const noexcept { return members_; }
  //! The parent's world (comm/world_id.hpp) mixed with the members: another subset of the
  //! same parent, or the same subset of another world, is another world.
  [[nodiscard]] std::uint64_t world_id() const noexcept { return world_id_; }

  void group_start() { parent_->group_start(); }
  void send(std::span<const std::byte> bytes, rank_index peer) { parent_->send(bytes, parent_rank(peer)); }
  void recv(std::span<std::byte> bytes, rank_index peer) { parent_->recv(bytes, parent_rank(peer)); }
  void group_end(std::string_view step) { parent_->group_end(step); }

 private:
  Parent* parent_;
  std::vector<rank_index> members_;
  rank_index rank_ = 0;
  std::uint64_t world_id_ = 0;
};

ZEPPELIN_NAMESPACE_END
