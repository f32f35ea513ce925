// zeppelin/comm.hpp
// All of comm/: the communicator concept, its errors, the collectives built on it and the
// host loopback world. nvcc-safe (no range-v3): device communicators model the same concept.
#pragma once

#include <zeppelin/comm/collectives.hpp>
#include <zeppelin/comm/comm_error.hpp>
#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/comm/host_loopback.hpp>
#include <zeppelin/comm/sub_communicator.hpp>
