// zeppelin/partition.hpp
// Umbrella header of the sequence partitioners: the partitioner concept, load metrics, the
// five models (hierarchical, even_split, allgather, hybrid_dp, per_document) and plan
// statistics. Host-only.
#pragma once

#include <zeppelin/partition/allgather.hpp>
#include <zeppelin/partition/any_load_metric.hpp>
#include <zeppelin/partition/capacity.hpp>
#include <zeppelin/partition/even_split.hpp>
#include <zeppelin/partition/hierarchical.hpp>
#include <zeppelin/partition/hybrid_dp.hpp>
#include <zeppelin/partition/load_metric.hpp>
#include <zeppelin/partition/partitioner.hpp>
#include <zeppelin/partition/per_document.hpp>
#include <zeppelin/partition/plan_stats.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/partition/ulysses.hpp>
