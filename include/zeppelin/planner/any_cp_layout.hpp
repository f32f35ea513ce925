// zeppelin/planner/any_cp_layout.hpp
// The CP layout policies as one value, chosen at run time: a partitioner of the registry
// (partition/registry.hpp), or the cheapest of several per micro-batch
// (planner/cheapest_layout.hpp, WLB-LLM's adaptive sharding).
//   in : a batch (a micro-batch's pieces) and the CP group's topology
//   out: the plan of the policy it holds; itself a layout policy of step/make_plan.hpp
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/planner/cheapest_layout.hpp>

#include <variant>

ZEPPELIN_NAMESPACE_BEGIN

struct any_cp_layout {
  std::variant<any_partitioner, cheapest_layout> policy;

  [[nodiscard]] plan partition(const batch& b, const topology& t) const {
    return std::visit(
        [&](const auto& p) -> plan {
          if constexpr (requires { p.partition(b, t); })
            return p.partition(b, t);
          else
            return zeppelin::partition(p, b, t);
        },
        policy);
  }
  friend bool operator==(const any_cp_layout&, const any_cp_layout&) = default;
};

ZEPPELIN_NAMESPACE_END
