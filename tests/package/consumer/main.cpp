// tests/package/consumer/main.cpp
// A user's program on zeppelin::core: builds a batch, a plan for one node of cluster A by
// hand, and checks that validate() accepts it and rejects a broken copy.
// Exit status 0 when everything behaves; a message and 1 otherwise.
#include <zeppelin/core.hpp>

#include <exception>
#include <iostream>

namespace {

int fail(const char* what) {
  std::cerr << "zeppelin_consumer: " << what << '\n';
  return 1;
}

}  // namespace

int main() {
#ifdef ZEPPELIN_CONSUMER_PACKAGE_VERSION
  // The installed package's version file and the installed headers must agree.
  if (ZEPPELIN_CONSUMER_PACKAGE_VERSION !=
      ZEPPELIN_VERSION_MAJOR * 10000 + ZEPPELIN_VERSION_MINOR * 100 + ZEPPELIN_VERSION_PATCH)
    return fail("package version differs from ZEPPELIN_VERSION_* in the headers");
#endif
  const zeppelin::topology topo = zeppelin::clusters::cluster_a(1);  // 8 ranks on one node
  const zeppelin::batch batch({4096, 1024, 1024, 512});
  if (topo.num_ranks() != 8 || batch.total_tokens() != 6656) return fail("unexpected preset or batch");

  // Sequence 0 is cut into four 1024-token shards over a ring of ranks 0-3; sequences 1-3
  // live on ranks 4-6; rank 7 is idle.
  zeppelin::plan plan;
  plan.method = "by_hand";
  plan.nodes = topo.nodes();
  plan.gpus_per_node = topo.gpus_per_node();
  plan.capacity = 1024;
  plan.placements.resize(static_cast<std::size_t>(topo.num_ranks()));
  plan.groups.push_back({0, zeppelin::zone_kind::intra_node, {0, 1, 2, 3}});
  for (int r = 0; r < 4; ++r)
    plan.placements[static_cast<std::size_t>(r)].shards.push_back({0, {1024 * r, 1024 * (r + 1)}, 0, 0});
  for (int s = 1; s < 4; ++s)
    plan.placements[static_cast<std::size_t>(3 + s)].shards.push_back({s, {0, batch.length(s)}, zeppelin::no_group, 0});

  try {
    zeppelin::validate(plan, batch, topo);
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
    return fail("validate() rejected a valid plan");
  }

  zeppelin::plan broken = plan;
  broken.placements[2].shards.clear();  // tokens [2048, 3072) of sequence 0 are now missing
  try {
    zeppelin::validate(broken, batch, topo);
    return fail("validate() accepted a plan that drops tokens");
  } catch (const zeppelin::invalid_plan& e) {
    if (e.kind() != zeppelin::violation_kind::token_missing) return fail("validate() reported the wrong violation");
  }

  std::cout << "zeppelin_consumer: ok (" << topo.num_ranks() << " ranks, " << batch.total_tokens()
            << " tokens, fingerprint " << zeppelin::fingerprint(plan) << ")\n";
  return 0;
}
