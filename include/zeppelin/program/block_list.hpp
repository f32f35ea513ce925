// zeppelin/program/block_list.hpp
// The blocks of one attention launch, shareable between launches (program/shared_list.hpp).
// Why shared: the lanes of an all-to-all (Ulysses) subgroup compute the same blocks, each on
// its own share of the heads. A subgroup of u lanes holding whole sequences lists one block
// per sequence; for a million one-token sequences on 64 GPUs that is a block list of half a
// million entries per lane and round, which u lanes held apart would store u times over. The
// program stores it once, and the builder and the simulator do their per-list work (launch
// waves, pricing) once per list (is_shared, identity).
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/program/shared_list.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

ZEPPELIN_NAMESPACE_BEGIN

using block_list = shared_list<attention_block>;

ZEPPELIN_NAMESPACE_END
