// zeppelin/pack.hpp
// All of pack/: the packing vocabulary and imbalance degrees, the document workload model,
// the packer concept, the packers (original, fixed_greedy, fixed_exact, wlb), any_packer and
// the stream driver pack_stream. Host-only.
#pragma once

#include <zeppelin/pack/any_packer.hpp>
#include <zeppelin/pack/chunk_grouping.hpp>
#include <zeppelin/pack/chunk_order.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/fixed_chunks.hpp>
#include <zeppelin/pack/fixed_exact.hpp>
#include <zeppelin/pack/fixed_greedy.hpp>
#include <zeppelin/pack/original.hpp>
#include <zeppelin/pack/packer.hpp>
#include <zeppelin/pack/packing.hpp>
#include <zeppelin/pack/sequence_processor.hpp>
#include <zeppelin/pack/stream.hpp>
#include <zeppelin/pack/wlb.hpp>
#include <zeppelin/pack/workload.hpp>
