// zeppelin/checkpoint.hpp
// All of checkpoint/: the checkpoint_policy concept, none / full / selective recomputation
// and the run-time choice among them. Host-only.
#pragma once

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/checkpoint/basic_policies.hpp>
#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/checkpoint/selective_recompute.hpp>
