// zeppelin/schedule.hpp
// All of schedule/: zigzag chunks, block masks, group layouts, ring-group rounds, engine queue order, and
// pipeline schedules (schedule/pipeline.hpp).
// nvcc-safe (no range-v3): executors on the GPU consume these headers.
#pragma once

#include <zeppelin/schedule/block_mask.hpp>
#include <zeppelin/schedule/engine_queue.hpp>
#include <zeppelin/schedule/group_layout.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>
#include <zeppelin/schedule/zigzag.hpp>
