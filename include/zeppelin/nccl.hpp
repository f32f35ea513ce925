// zeppelin/nccl.hpp
// Umbrella header of the NCCL layer: the communicator over one ncclComm_t (a
// device_communicator), unique-id bootstrap helpers and NCCL error handling. Link NCCL::NCCL
// (zeppelin::cuda does). nvcc-safe; host code.
#pragma once

#include <zeppelin/nccl/bootstrap.hpp>
#include <zeppelin/nccl/communicator.hpp>
#include <zeppelin/nccl/error.hpp>
