// examples/train_gpt/no_device_world.cpp
// run_on_device in a build without CUDA (device_world.hpp): the GPU worlds are not there.
#include "device_world.hpp"

#include <zeppelin/core/error.hpp>

namespace train_gpt {

int run_on_device(const options& o) {
  ZEPPELIN_THROW(invalid_argument, "--world device and --world nccl need a build with CUDA (ZEPPELIN_ENABLE_CUDA); this one has none",
                 {{"world", double(static_cast<int>(o.world))}});
}

}  // namespace train_gpt
