// examples/train_gpt/device_world.hpp
// The GPU worlds' entry point (options.hpp world_kind device and nccl). device_main.cpp defines
// it in a build with CUDA; without CUDA, no_device_world.cpp does, and it refuses.
//   in : the parsed options (o.world is device or nccl)
//   out: the process's exit status: 0 when the run's losses match the one-rank reference within
//        the bf16 bound, 1 when not; throws invalid_argument (main prints it, exit status 2)
//        for options the device worlds do not run, and what CUDA and NCCL throw
#pragma once

#include "options.hpp"

namespace train_gpt {

int run_on_device(const options& o);

}  // namespace train_gpt
