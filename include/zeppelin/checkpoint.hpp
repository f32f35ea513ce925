// zeppelin/checkpoint.hpp
// All of checkpoint/: the checkpoint_policy concept, none / full / selective recomputation,
// the run-time choice among them and InfiniPipe's stage-aware adaptive checkpointing (an
// exact solver and its plan as a policy). Host-only.
#pragma once

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/checkpoint/basic_policies.hpp>
#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/checkpoint/selective_recompute.hpp>
#include <zeppelin/checkpoint/stage_aware.hpp>
