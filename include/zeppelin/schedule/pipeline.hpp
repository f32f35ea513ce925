// zeppelin/schedule/pipeline.hpp
// All of schedule/pipeline/: the schedule data, its policies (GPipe, 1F1B, interleaved 1F1B)
// and validate(). nvcc-safe (host-only data and functions).
#pragma once

#include <zeppelin/schedule/pipeline/any_schedule.hpp>
#include <zeppelin/schedule/pipeline/chunk_one_f_one_b.hpp>
#include <zeppelin/schedule/pipeline/gpipe.hpp>
#include <zeppelin/schedule/pipeline/interleaved.hpp>
#include <zeppelin/schedule/pipeline/makespan.hpp>
#include <zeppelin/schedule/pipeline/one_f_one_b.hpp>
#include <zeppelin/schedule/pipeline/pipeline_schedule.hpp>
#include <zeppelin/schedule/pipeline/schedule_policy.hpp>
#include <zeppelin/schedule/pipeline/validate.hpp>
