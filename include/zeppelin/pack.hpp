// zeppelin/pack.hpp
// All of pack/: the packing vocabulary and imbalance degrees, the document workload model,
// the packer concept, the packers (original, fixed_greedy, fixed_exact, wlb), any_packer, the
// stream driver pack_stream, and the step plans each paper's packing becomes (WLB-LLM's packed
// stream, InfiniPipe's chunked sequences, FlexSP's assignment), priced by sim/simulate_step.hpp.
// Host-only.
#pragma once

#include <zeppelin/pack/any_packer.hpp>
#include <zeppelin/pack/chunk_grouping.hpp>
#include <zeppelin/pack/chunk_order.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/elastic_step_plan.hpp>
#include <zeppelin/pack/fixed_chunk_pipeline.hpp>
#include <zeppelin/pack/fixed_chunks.hpp>
#include <zeppelin/pack/fixed_exact.hpp>
#include <zeppelin/pack/fixed_greedy.hpp>
#include <zeppelin/pack/flexsp_assignment.hpp>
#include <zeppelin/pack/flexsp_step_plan.hpp>
#include <zeppelin/pack/infinipipe_methods.hpp>
#include <zeppelin/pack/original.hpp>
#include <zeppelin/pack/packer.hpp>
#include <zeppelin/pack/packed_stream.hpp>
#include <zeppelin/pack/packing.hpp>
#include <zeppelin/pack/packing_methods.hpp>
#include <zeppelin/pack/sequence_processor.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>
#include <zeppelin/pack/stream.hpp>
#include <zeppelin/pack/wlb.hpp>
#include <zeppelin/pack/workload.hpp>
