// zeppelin/program.hpp
// Umbrella of the execution program: its data (program/program.hpp), the builder
// (program/build.hpp), the one driver (program/driver.hpp) and the execution record
// (program/record.hpp). nvcc-safe.
#pragma once

#include <zeppelin/program/build.hpp>
#include <zeppelin/program/driver.hpp>
#include <zeppelin/program/launch_waves.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/record.hpp>
#include <zeppelin/program/wire_format.hpp>
