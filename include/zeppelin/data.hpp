// zeppelin/data.hpp
// All of data/: length distributions (Zeppelin Table 2), the budget-filling batch sampler,
// length and histogram files, summary statistics. Host-only.
#pragma once

#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/length_distribution.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/data/length_stats.hpp>
#include <zeppelin/data/power_law.hpp>
#include <zeppelin/data/sampler.hpp>
