// zeppelin/cuda/executor/executors.hpp
// Umbrella header of the CUDA executors (templated on a device_communicator: the NCCL
// communicator or the device loopback world): the attention engine and the device backend
// of the execution program, the remap / dispatch executor, the device staging of routed
// pieces, the launches' CSR arrays and the element-wise row operations. Host code; link
// zeppelin::kernels.
#pragma once

#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/device_loopback.hpp>
#include <zeppelin/cuda/executor/attention_engine.hpp>
#include <zeppelin/cuda/executor/device_backend.hpp>
#include <zeppelin/cuda/executor/device_staging.hpp>
#include <zeppelin/cuda/executor/launch_csr.hpp>
#include <zeppelin/cuda/executor/remap.hpp>
#include <zeppelin/cuda/executor/row_ops.hpp>
#include <zeppelin/cuda/stream_set.hpp>
