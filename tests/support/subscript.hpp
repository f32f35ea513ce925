// tests/support/subscript.hpp
// at(i): a signed count or index (rank, group, token) as a std::size_t subscript.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zeppelin_test {

inline std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace zeppelin_test
