// zeppelin/exec.hpp
// All of exec/: attention kernel concept and host kernel, LSE merge, the phase executor, the
// host backend of the execution program, the attention engine, dispatch and remap
// executors, the overlap figures of timed spans, the K/V context of sliced documents. Host code; device code includes the
// nvcc-safe headers one by one.
#pragma once

#include <zeppelin/exec/attention_engine.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/host_attention.hpp>
#include <zeppelin/exec/host_backend.hpp>
#include <zeppelin/exec/linear_layout.hpp>
#include <zeppelin/exec/lse_merge.hpp>
#include <zeppelin/exec/overlap.hpp>
#include <zeppelin/exec/step_runner.hpp>
#include <zeppelin/exec/plan_agreement.hpp>
#include <zeppelin/exec/relayout.hpp>
#include <zeppelin/exec/slice_context.hpp>
#include <zeppelin/exec/transport.hpp>
