// zeppelin/zeppelin.hpp
// Umbrella header of the host library: every public host header. Host-only (it includes
// planning headers that use range-v3): include it from .cpp files, not from .cu files.
#pragma once

#include <zeppelin/checkpoint.hpp>
#include <zeppelin/comm.hpp>
#include <zeppelin/core.hpp>
#include <zeppelin/cost.hpp>
#include <zeppelin/data.hpp>
#include <zeppelin/exec.hpp>
#include <zeppelin/pack.hpp>
#include <zeppelin/partition.hpp>
#include <zeppelin/planner.hpp>
#include <zeppelin/program.hpp>
#include <zeppelin/remap.hpp>
#include <zeppelin/route.hpp>
#include <zeppelin/schedule.hpp>
#include <zeppelin/sim.hpp>
#include <zeppelin/step.hpp>
#include <zeppelin/strategy.hpp>
