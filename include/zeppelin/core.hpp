// zeppelin/core.hpp
// All of core/: vocabulary types. nvcc-safe.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/plan_bytes.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/rank_view.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/core/transfer.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/core/validate.hpp>
