// zeppelin/cost.hpp
// All of cost/: causal pair counts, attention and linear FLOPs, achieved-throughput tables,
// attention / GEMM time models, transfer sizes, the link model and the busiest port, CP shares, layer splits,
// profile fits, pipeline stage time and memory. nvcc-safe.
#pragma once

#include <zeppelin/cost/adaptive_cp_sharding.hpp>
#include <zeppelin/cost/attention_flops.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/cost/busiest_port.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/chunk_cost.hpp>
#include <zeppelin/cost/cp_shares.hpp>
#include <zeppelin/cost/cp_sharding.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/cost/quadratic_fit.hpp>
#include <zeppelin/cost/stage_time.hpp>
#include <zeppelin/cost/step_work.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/cost/linear_time_model.hpp>
#include <zeppelin/cost/throughput_table.hpp>
#include <zeppelin/cost/transfer_bytes.hpp>
#include <zeppelin/cost/varlen_attention_time.hpp>
