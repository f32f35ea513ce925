// tests/support/random_int.hpp
// pick(rng, lo, hi): a seeded int in [lo, hi], for test inputs whose fields are ints.
#pragma once

#include <zeppelin/core/random.hpp>

namespace zeppelin_test {

inline int pick(zeppelin::random_generator& rng, int lo, int hi) { return static_cast<int>(rng.between(lo, hi)); }

}  // namespace zeppelin_test
