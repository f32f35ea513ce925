# CTest cases for the `zeppelin` tool: the main job runs, the JSON outputs keep the schema
# the issues specify, and bad input exits with status 1 and a message that names the value.
# Every case checks the exit status AND the output (zeppelin_add_cli_test).
include("${PROJECT_SOURCE_DIR}/cmake/zeppelin_cli_test.cmake")
set(zeppelin_fixtures "${PROJECT_SOURCE_DIR}/tests/fixtures")
set(zeppelin_tool_cmd "$<TARGET_FILE:zeppelin_tool>")

zeppelin_add_cli_test(tool.main_job EXIT_CODE 0 STDOUT "te_cp.*zeppelin" COMMAND ${zeppelin_tool_cmd})
zeppelin_add_cli_test(tool.simulate_json EXIT_CODE 0
  STDOUT "\"format\": *\"zeppelin.simulate\".*\"methods\".*\"name\": *\"te_cp\".*\"step_time_s\".*\"tokens_per_s\".*\"lower_bound_s\".*\"attention_launches\": [0-9]+,"
  COMMAND ${zeppelin_tool_cmd} simulate --json)
zeppelin_add_cli_test(tool.options_go_to_main_job EXIT_CODE 0 STDOUT "\"methods\"" COMMAND ${zeppelin_tool_cmd} --nodes 2 --json)

foreach(method IN ITEMS hierarchical even_split allgather hybrid_dp per_document ulysses micro_batched)
  zeppelin_add_cli_test(tool.plan_json.${method} EXIT_CODE 0
    STDOUT "^\\{\"format\":\"zeppelin.plan\",\"version\":1,\"fingerprint\":\"[0-9a-f]+\",\"method\": *\"${method}\".*\"lengths\".*\"ranks\".*\"shards\".*\"groups\""
    COMMAND ${zeppelin_tool_cmd} plan --method ${method} --lengths ${zeppelin_fixtures}/lengths_small.txt
            --nodes 2 --gpus-per-node 4 --capacity 100000 --json)
endforeach()
# --explain: the cost-driven planner's candidates, its choice and the per-sequence layout
zeppelin_add_cli_test(tool.plan_explain EXIT_CODE 0
  STDOUT "zeppelin_paper +(simulated|pruned).*chosen: .*step .* ms, efficiency .*seq +length +micro +group +zone +collective +ranks"
  COMMAND ${zeppelin_tool_cmd} plan --explain --lengths ${zeppelin_fixtures}/lengths_small.txt --nodes 2 --gpus-per-node 4)
# a batch larger than the cluster (221,696 tokens, room 8 x 20,000): only the micro-batched
# candidate plans it
zeppelin_add_cli_test(tool.plan_explain_micro_batches EXIT_CODE 0
  STDOUT "zeppelin_paper +infeasible.*zeppelin_paper\\+micro_batches +simulated.*chosen: zeppelin_paper\\+micro_batches .*seq +length +micro"
  COMMAND ${zeppelin_tool_cmd} plan --explain --lengths ${zeppelin_fixtures}/lengths_small.txt --nodes 2 --gpus-per-node 4
          --capacity 20000)
zeppelin_add_cli_test(tool.plan_micro_batches_at_least EXIT_CODE 0 STDOUT "method micro_batched: .* 3 micro-batch\\(es\\)"
  COMMAND ${zeppelin_tool_cmd} plan --method micro_batched --micro-batches 3 --lengths ${zeppelin_fixtures}/lengths_small.txt
          --nodes 2 --gpus-per-node 4)
zeppelin_add_cli_test(tool.plan_explain_json EXIT_CODE 0
  STDOUT "\"groups\".*\"explain\":.*\"candidates\":.*\"outcome\".*\"chosen\":"
  COMMAND ${zeppelin_tool_cmd} plan --explain --lengths ${zeppelin_fixtures}/lengths_small.txt --nodes 2 --gpus-per-node 4
          --model 3b --json)
add_test(NAME tool.plan_json_round_trip
  COMMAND "${CMAKE_COMMAND}" "-DTOOL=${zeppelin_tool_cmd}" "-DLENGTHS=${zeppelin_fixtures}/lengths_small.txt"
          "-DWORK=${CMAKE_CURRENT_BINARY_DIR}/plan_round_trip" -P "${CMAKE_CURRENT_LIST_DIR}/plan_round_trip.cmake")
zeppelin_add_cli_test(tool.plan_read_refuses_other_formats EXIT_CODE 1 STDERR "\"format\" must be \"zeppelin.plan\""
  COMMAND ${zeppelin_tool_cmd} plan --read ${zeppelin_fixtures}/not_a_plan.json)
zeppelin_add_cli_test(tool.plan_rank_view EXIT_CODE 0
  STDOUT "rank 5 \\(node 1, GPU 1\\): [0-9]+ tokens.*seq +length +begin +end +group +micro.*group +zone +collective +position +previous +next"
  COMMAND ${zeppelin_tool_cmd} plan --method hierarchical --lengths ${zeppelin_fixtures}/lengths_small.txt --nodes 2
          --gpus-per-node 4 --rank 5)
zeppelin_add_cli_test(tool.plan_rank_view_refuses_missing_rank EXIT_CODE 1 STDERR "no such rank in the plan.*rank=8, ranks=8"
  COMMAND ${zeppelin_tool_cmd} plan --method hierarchical --lengths ${zeppelin_fixtures}/lengths_small.txt --nodes 2
          --gpus-per-node 4 --rank 8)
zeppelin_add_cli_test(tool.plan_needs_method_or_explain EXIT_CODE 106 STDERR "--method \\(or --explain\\) is required"
  COMMAND ${zeppelin_tool_cmd} plan --lengths ${zeppelin_fixtures}/lengths_small.txt)
zeppelin_add_cli_test(tool.plan_explain_excludes_method EXIT_CODE 108 STDERR "--method excludes --explain"
  COMMAND ${zeppelin_tool_cmd} plan --explain --method hierarchical --lengths ${zeppelin_fixtures}/lengths_small.txt)

zeppelin_add_cli_test(tool.remap_physical_costs EXIT_CODE 0
  STDOUT "b_intra [0-9.]+e-08, b_inter [0-9.]+e-07; solver exact.*moved 4 tokens, 0 across nodes"
  COMMAND ${zeppelin_tool_cmd} remap --tokens 10,2,6,6 --gpus-per-node 2)
zeppelin_add_cli_test(tool.remap_needs_both_costs EXIT_CODE 1 STDERR "give both --intra-cost and --inter-cost, or neither"
  COMMAND ${zeppelin_tool_cmd} remap --tokens 10,2,6,6 --gpus-per-node 2 --intra-cost 1)
zeppelin_add_cli_test(tool.remap_json EXIT_CODE 0
  STDOUT "\"format\":\"zeppelin.remap\".*\"holds\":.10,2,6,6.*\"matrix\".*\"max_receive\".*\"max_send\".*\"moved_tokens\":[0-9]+.*\"objective\":[0-9].*\"target\":.*\"version\":1"
  COMMAND ${zeppelin_tool_cmd} remap --tokens 10,2,6,6 --gpus-per-node 2 --intra-cost 1 --inter-cost 4 --json)

# Bad input: status 1 (a library error, main.cpp) and a message naming the offending value.
zeppelin_add_cli_test(tool.rejects_capacity_too_small EXIT_CODE 1 STDERR "more tokens than .*capacity=1[,)]"
  COMMAND ${zeppelin_tool_cmd} plan --method hierarchical --lengths ${zeppelin_fixtures}/lengths_small.txt
          --nodes 1 --gpus-per-node 1 --capacity 1)
zeppelin_add_cli_test(tool.rejects_negative_tokens EXIT_CODE 1 STDERR "non-negative.*tokens=-1"
  COMMAND ${zeppelin_tool_cmd} remap --tokens 5,-1 --gpus-per-node 2 --intra-cost 1 --inter-cost 2)
zeppelin_add_cli_test(tool.rejects_indivisible_ranks EXIT_CODE 1 STDERR "multiple of the GPUs per node.*ranks=3"
  COMMAND ${zeppelin_tool_cmd} remap --tokens 5,1,3 --gpus-per-node 2 --intra-cost 1 --inter-cost 2)
zeppelin_add_cli_test(tool.rejects_nonpositive_cost EXIT_CODE 1 STDERR "intra-node cost must be positive.*intra_cost=0"
  COMMAND ${zeppelin_tool_cmd} remap --tokens 5,1 --gpus-per-node 2 --intra-cost 0 --inter-cost 2)
zeppelin_add_cli_test(tool.rejects_unknown_model EXIT_CODE 1 STDERR "unknown model 'nope' \\(valid: .*llama-7b"
  COMMAND ${zeppelin_tool_cmd} simulate --model nope)
# A partitioner outside the registry is a usage error (CLI11: status 105) listing the valid ones.
zeppelin_add_cli_test(tool.rejects_unknown_partitioner EXIT_CODE 105 STDERR "--method: nope not in .*hierarchical.*per_document"
  COMMAND ${zeppelin_tool_cmd} plan --method nope --lengths ${zeppelin_fixtures}/lengths_small.txt)
zeppelin_add_cli_test(tool.rejects_unknown_sim_method EXIT_CODE 1 STDERR "unknown method 'nope' \\(valid: te_cp, .*zeppelin\\)"
  COMMAND ${zeppelin_tool_cmd} simulate --method nope)

# The exact remap under floating costs terminates (nearly equal costs used to loop ~2^63
# times) and refuses an objective that overflows a double instead of printing null.
zeppelin_add_cli_test(tool.remap_nearly_equal_costs EXIT_CODE 0 STDOUT "\"objective\""
  COMMAND ${zeppelin_tool_cmd} remap --tokens 3000,0,0,0 --gpus-per-node 2 --intra-cost 1 --inter-cost 1.0000000000000002 --json)
zeppelin_add_cli_test(tool.remap_rejects_overflowing_objective EXIT_CODE 1 STDERR "objective overflows a double.*intra_cost=1e\\+306"
  COMMAND ${zeppelin_tool_cmd} remap --tokens 1000,0,0,0 --gpus-per-node 2 --intra-cost 1e306 --inter-cost 1e307 --json)
set_tests_properties(tool.remap_nearly_equal_costs tool.remap_rejects_overflowing_objective PROPERTIES TIMEOUT 20)
# A sequence longer than max_sequence_length is refused where the batch is made.
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/lengths_too_long.txt" "5\n90718909099\n28\n")
zeppelin_add_cli_test(tool.rejects_sequence_too_long EXIT_CODE 1 STDERR "max_sequence_length.*length=(90718909099|9\\.07189)"
  COMMAND ${zeppelin_tool_cmd} plan --method hierarchical --lengths "${CMAKE_CURRENT_BINARY_DIR}/lengths_too_long.txt"
          --nodes 3 --gpus-per-node 8 --capacity 6990718424049071899)
# Integers outside their type's range are refused (CLI11 alone would clamp them).
zeppelin_add_cli_test(tool.rejects_capacity_past_int64 EXIT_CODE 105
  STDERR "--capacity: '9223372036854775808' is not a token count such as .*at most 2\\^63 - 1"
  COMMAND ${zeppelin_tool_cmd} plan --method hierarchical --lengths ${zeppelin_fixtures}/lengths_small.txt
          --capacity 9223372036854775808)
zeppelin_add_cli_test(tool.rejects_negative_seed EXIT_CODE 105 STDERR "--seed: '-1' is not an integer in \\[0, 18446744073709551615\\]"
  COMMAND ${zeppelin_tool_cmd} sample --dataset github --tokens 1000 --seed -1)
# Signs and choices are refused naming the text and what was wanted (CLI11's own checks print
# DBL_MAX in 309 digits, "0 not in range 0 to ...", or stop at the NUL of a uint8_t enum).
zeppelin_add_cli_test(tool.rejects_zero_nodes EXIT_CODE 105 STDERR "^--nodes: '0' is not positive \\(> 0\\)\n"
  COMMAND ${zeppelin_tool_cmd} simulate --nodes 0)
zeppelin_add_cli_test(tool.rejects_negative_slack EXIT_CODE 105 STDERR "^--slack: '-0.5' is not non-negative \\(>= 0\\)\n"
  COMMAND ${zeppelin_tool_cmd} simulate --slack -0.5)
zeppelin_add_cli_test(tool.rejects_nan_slack EXIT_CODE 105 STDERR "^--slack: 'nan' is not non-negative"
  COMMAND ${zeppelin_tool_cmd} simulate --slack nan)
zeppelin_add_cli_test(tool.rejects_zero_threads EXIT_CODE 105 STDERR "^--threads: '0' is not positive"
  COMMAND ${zeppelin_tool_cmd} plan --explain --lengths ${zeppelin_fixtures}/lengths_small.txt --threads 0)
zeppelin_add_cli_test(tool.rejects_unknown_launch EXIT_CODE 105 STDERR "^--launch: 'bogus' is not one of per_group\\|fused_round\n"
  COMMAND ${zeppelin_tool_cmd} simulate --launch bogus)
zeppelin_add_cli_test(tool.rejects_unknown_dtype EXIT_CODE 105 STDERR "^--dtype: 'int8' is not one of bf16\\|fp16\\|fp32\\|fp64\n"
  COMMAND ${zeppelin_tool_cmd} simulate --dtype int8)
zeppelin_add_cli_test(tool.help_is_text EXIT_CODE 0 STDOUT "--launch ENUM:per_group\\|fused_round"
  COMMAND ${zeppelin_tool_cmd} simulate --help)

# A method whose execution program is over the library's limits (TE CP's zigzag of 80
# sequences over 512 GPUs: 8.4e7 shard pairs) is priced from two smaller runs, here over the
# members of its one group (over documents: tests/sim/step_extrapolation_test.cpp), and says
# so; the others run as ever. With --record, which needs the whole
# program, it is an error that names the numbers.
zeppelin_add_cli_test(tool.simulate_extrapolates_over_members EXIT_CODE 0
  STDOUT "te_cp \\* .*hybrid_dp .*\\* te_cp: its one group of every rank is too large to build; priced on 32 and 64 ranks"
  COMMAND ${zeppelin_tool_cmd} simulate --lengths ${zeppelin_fixtures}/lengths_80x1024.txt --nodes 64 --methods te_cp,hybrid_dp)
zeppelin_add_cli_test(tool.simulate_json_names_the_extrapolation EXIT_CODE 0
  STDOUT "\"extrapolated\": \\{\n *\"from\": \\[\n *32,\n *64\n *\\],\n *\"over\": \"members\""
  COMMAND ${zeppelin_tool_cmd} simulate --lengths ${zeppelin_fixtures}/lengths_80x1024.txt --nodes 64 --method te_cp --json)
zeppelin_add_cli_test(tool.simulate_refuses_oversized_program EXIT_CODE 1
  STDERR "execution program too large.*max_shard_pairs=67108864"
  COMMAND ${zeppelin_tool_cmd} simulate --lengths ${zeppelin_fixtures}/lengths_80x1024.txt --nodes 64 --method te_cp
          --record ${CMAKE_CURRENT_BINARY_DIR}/simulate_refused_record.json)

# `zeppelin pipeline`: the JSON schema of the issue, a trace file, and bad input.
zeppelin_add_cli_test(tool.pipeline_json EXIT_CODE 0
  STDOUT "\"bubble_ratio\".*\"iteration_s\".*\"ops\":..\\{\"chunk\":0,\"mb\":0,\"op\":\"F\"\\}.*\"peak_memory_gib\":.[0-9].*\"schedule\":\"1f1b\",\"stage_reports\":.\\{\"bubble_s\":[0-9.e-]+,\"busy_s\":[0-9.e-]+,\"classes\":\\{\"compute\":\\{\"seconds\":[0-9.e-]+\\},\"cp\":\\{\"bytes\":[0-9.e+]+,\"seconds\":[0-9.e-]+\\},\"dp\":.*\"pp\":\\{\"bytes\":[1-9].*\"recompute\":.*\"tp\":\\{\"bytes\":[1-9].*\"stages\":4"
  COMMAND ${zeppelin_tool_cmd} pipeline --schedule 1f1b --stages 4 --tp 2 --micro-batch-tokens 4096,8192,2048+2048,16384 --model 7b
          --cluster c --json)
zeppelin_add_cli_test(tool.pipeline_interleaved EXIT_CODE 0 STDOUT "interleaved, 4 stages x 2 chunks, 7 micro-batches.*iteration"
  COMMAND ${zeppelin_tool_cmd} pipeline --schedule interleaved --virtual-stages 2 --stages 4 --checkpoint selective:2
          --micro-batch-tokens 4096,4096,4096,4096,4096,4096,4096)
zeppelin_add_cli_test(tool.pipeline_trace EXIT_CODE 0 STDOUT "gpipe, 2 stages"
  COMMAND ${zeppelin_tool_cmd} pipeline --schedule gpipe --stages 2 --micro-batch-tokens 1024,2048
          --trace ${CMAKE_CURRENT_BINARY_DIR}/pipeline_trace.json)
zeppelin_add_cli_test(tool.pipeline_rejects_zero_stages EXIT_CODE 1 STDERR "at least 1 .*pp=0"
  COMMAND ${zeppelin_tool_cmd} pipeline --stages 0)
zeppelin_add_cli_test(tool.pipeline_rejects_more_stages_than_layers EXIT_CODE 1 STDERR "more stages than layers .*layers=32, parts=40"
  COMMAND ${zeppelin_tool_cmd} pipeline --stages 40 --model 7b)
zeppelin_add_cli_test(tool.pipeline_rejects_micro_batch_over_memory EXIT_CODE 1
  STDERR "stage 0 runs out of GPU memory at micro-batch 0.*GiB"
  COMMAND ${zeppelin_tool_cmd} pipeline --stages 4 --micro-batch-tokens 131072)
zeppelin_add_cli_test(tool.pipeline_rejects_unknown_schedule EXIT_CODE 1 STDERR "unknown pipeline schedule 'zb' \\(valid: gpipe, 1f1b, interleaved, chunk-1f1b\\)"
  COMMAND ${zeppelin_tool_cmd} pipeline --schedule zb)
zeppelin_add_cli_test(tool.pipeline_rejects_bad_checkpoint EXIT_CODE 1 STDERR "unknown checkpoint policy 'some'"
  COMMAND ${zeppelin_tool_cmd} pipeline --checkpoint some)
zeppelin_add_cli_test(tool.pipeline_rejects_bad_tokens EXIT_CODE 1 STDERR "--micro-batch-tokens must be positive integers.*micro_batch=1"
  COMMAND ${zeppelin_tool_cmd} pipeline --micro-batch-tokens 10,0)

# `zeppelin pack`: every method's JSON schema, conservation on a small stream, bad input.
foreach(method IN ITEMS original fixed_greedy fixed_exact wlb)
  zeppelin_add_cli_test(tool.pack_json.${method} EXIT_CODE 0
    STDOUT "^\\{\"format\":\"zeppelin.pack\",\"version\":1,\"iterations\":.\\{\"micro_batches\":.\\{\"docs\":.[0-9].*\"tokens\":[0-9]+\\}.*\"pending\":.*\"imbalance\":[0-9.]+\\}"
    COMMAND ${zeppelin_tool_cmd} pack --method ${method} --lengths ${zeppelin_fixtures}/lengths_wlb.txt
            --micro-batches 2 --max-tokens 1000 --json)
endforeach()
# wlb with one queue: the outliers 600 (doc 4) and 700 (doc 9) wait for each other and leave
# together; 900 and 800 (queue 0 too) are paired in iteration 1.
zeppelin_add_cli_test(tool.pack_wlb_queues EXIT_CODE 0 STDOUT "wlb: 12 documents, 2 micro-batches x 1000 tokens.*mean imbalance"
  COMMAND ${zeppelin_tool_cmd} pack --method wlb --queues 1 --lengths ${zeppelin_fixtures}/lengths_wlb.txt
          --micro-batches 2 --max-tokens 1000)
# --simulate: every iteration's step plan priced by the step simulator (CP 2, adaptive layouts).
zeppelin_add_cli_test(tool.pack_simulate EXIT_CODE 0
  STDOUT "iteration 0: imbalance [0-9.]+, step [0-9.]+ s.*simulated: [0-9.]+ s for the stream .model 7b on cluster wlb."
  COMMAND ${zeppelin_tool_cmd} pack --method wlb --lengths ${zeppelin_fixtures}/lengths_wlb.txt --micro-batches 2
          --max-tokens 1000 --simulate --cp 2 --stages 2 --layout adaptive)
zeppelin_add_cli_test(tool.pack_simulate_json EXIT_CODE 0 STDOUT "\"step_s\":[0-9.e-]+.*\"seconds\":[0-9.e-]+\\}"
  COMMAND ${zeppelin_tool_cmd} pack --method original --lengths ${zeppelin_fixtures}/lengths_wlb.txt --micro-batches 2
          --max-tokens 1000 --simulate --json)
zeppelin_add_cli_test(tool.pack_keep_pending EXIT_CODE 0 STDOUT "\"pending\":.[0-9]"
  COMMAND ${zeppelin_tool_cmd} pack --method wlb --queues 3 --lengths ${zeppelin_fixtures}/lengths_wlb.txt
          --micro-batches 4 --max-tokens 1000 --keep-pending --json)
zeppelin_add_cli_test(tool.pack_rejects_document_over_L EXIT_CODE 1
  STDERR "longer than the micro-batch token limit L.*index=0, length=900, L=850"
  COMMAND ${zeppelin_tool_cmd} pack --method wlb --lengths ${zeppelin_fixtures}/lengths_wlb.txt
          --micro-batches 2 --max-tokens 850)
zeppelin_add_cli_test(tool.pack_rejects_zero_micro_batches EXIT_CODE 1 STDERR "a packing needs 1 .. 1048576 micro-batches per iteration .micro_batches=0"
  COMMAND ${zeppelin_tool_cmd} pack --method original --lengths ${zeppelin_fixtures}/lengths_wlb.txt
          --micro-batches 0 --max-tokens 1000)
zeppelin_add_cli_test(tool.pack_rejects_zero_max_tokens EXIT_CODE 1 STDERR "token limit must lie in.*max_tokens=0"
  COMMAND ${zeppelin_tool_cmd} pack --method fixed_greedy --lengths ${zeppelin_fixtures}/lengths_wlb.txt
          --micro-batches 2 --max-tokens 0)
zeppelin_add_cli_test(tool.pack_rejects_unknown_method EXIT_CODE 1
  STDERR "unknown packing method 'lpt' .valid: original, fixed_greedy, fixed_exact, wlb."
  COMMAND ${zeppelin_tool_cmd} pack --method lpt --lengths ${zeppelin_fixtures}/lengths_wlb.txt
          --micro-batches 2 --max-tokens 1000)
# Every class of traffic in one step: TP 2 x CP 2 inside each of 2 stages, 2 replicas.
zeppelin_add_cli_test(tool.pipeline_four_classes EXIT_CODE 0
  STDOUT "TP 2, CP 2, DP 2 .*layouts per_sequence.*\n +0 +0 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0.0*[1-9][0-9]* +0.0*[1-9][0-9]* +0.0*[1-9][0-9]* +0.0*[1-9][0-9]* .*iteration"
  COMMAND ${zeppelin_tool_cmd} pipeline --stages 2 --tp 2 --cp 2 --dp 2 --partitioner per_sequence --sync all_reduce
          --micro-batch-tokens 256+256+256+256,8192,512+512,4096)
zeppelin_add_cli_test(tool.pipeline_record EXIT_CODE 0 STDOUT "iteration"
  COMMAND ${zeppelin_tool_cmd} pipeline --stages 2 --tp 2 --cp 2 --schedule gpipe --micro-batch-tokens 300,500+100
          --model 7b --record ${CMAKE_CURRENT_BINARY_DIR}/pipeline_record.json)
zeppelin_add_cli_test(tool.pipeline_record_per_shape_refused EXIT_CODE 1 STDERR "--record needs --pricing every_op"
  COMMAND ${zeppelin_tool_cmd} pipeline --pricing per_shape --record ${CMAKE_CURRENT_BINARY_DIR}/pipeline_record_refused.json)
# A failed write is an error with exit status 1, never a silent exit 0 (a full disk: /dev/full).
zeppelin_add_cli_test(tool.pipeline_record_to_full_disk EXIT_CODE 1 STDERR "--record file '/dev/full': writing failed"
  COMMAND ${zeppelin_tool_cmd} pipeline --stages 2 --micro-batch-tokens 300,500 --record /dev/full)
zeppelin_add_cli_test(tool.pipeline_trace_to_full_disk EXIT_CODE 1 STDERR "--trace file '/dev/full': writing failed"
  COMMAND ${zeppelin_tool_cmd} pipeline --stages 2 --micro-batch-tokens 300,500 --trace /dev/full)
zeppelin_add_cli_test(tool.simulate_trace_to_full_disk EXIT_CODE 1 STDERR "--trace file '/dev/full': writing failed"
  COMMAND ${zeppelin_tool_cmd} simulate --methods te_cp --trace-method te_cp --trace /dev/full)
zeppelin_add_cli_test(tool.simulate_record_to_full_disk EXIT_CODE 1 STDERR "--record file '/dev/full': writing failed"
  COMMAND ${zeppelin_tool_cmd} simulate --method te_cp --record /dev/full)
zeppelin_add_cli_test(tool.plan_json_to_full_disk EXIT_CODE 1 STDERR "zeppelin: writing standard output failed"
  COMMAND sh -c "'$<TARGET_FILE:zeppelin_tool>' plan --method hierarchical --lengths '${zeppelin_fixtures}/lengths_small.txt' --json > /dev/full")
zeppelin_add_cli_test(tool.record_into_missing_directory EXIT_CODE 1 STDERR "--record file '.*/no_such_dir/r.json': cannot be opened"
  COMMAND ${zeppelin_tool_cmd} simulate --method te_cp --record ${CMAKE_CURRENT_BINARY_DIR}/no_such_dir/r.json)
zeppelin_add_cli_test(tool.pipeline_per_shape EXIT_CODE 0 STDOUT "per_shape pricing.*iteration"
  COMMAND ${zeppelin_tool_cmd} pipeline --stages 4 --tp 2 --cp 2 --pricing per_shape --schedule interleaved --virtual-stages 2)
zeppelin_add_cli_test(tool.pipeline_rejects_unknown_partitioner EXIT_CODE 1
  STDERR "unknown partitioner 'ring' \\(valid: hierarchical, even_split, allgather, hybrid_dp, per_document, ulysses, micro_batched, per_sequence\\)"
  COMMAND ${zeppelin_tool_cmd} pipeline --partitioner ring)
zeppelin_add_cli_test(tool.pipeline_rejects_unknown_sync EXIT_CODE 1
  STDERR "unknown gradient sync 'ring' \\(valid: all_reduce, sharded_optimizer, fully_sharded, switching\\)"
  COMMAND ${zeppelin_tool_cmd} pipeline --sync ring)

# `zeppelin strategy`: the JSON schema, the text summary, and bad input.
zeppelin_add_cli_test(tool.strategy_json EXIT_CODE 0
  STDOUT "^\\{\"format\":\"zeppelin.strategy\",\"version\":1,\"strategy\":.\\{\"tp\":[0-9]+,\"pp\":[0-9]+,\"cp\":[0-9]+,\"count\":[0-9]+\\}.*\"pipelines\":.\\{\"tp\":[0-9]+,\"pp\":[0-9]+,\"cp\":[0-9]+,\"max_len\":[0-9]+,\"micro_batches\":..[0-9].*\"iteration_s\":[0-9.e-]+,\"simulated_iteration_s\":[0-9.e-]+\\}"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_hydraulis.txt --gpus 16 --model 7b --json)
# The chosen plan on the one step simulator (switching sync), on a cluster of 4-GPU nodes.
zeppelin_add_cli_test(tool.strategy_simulated_iteration EXIT_CODE 0
  STDOUT "iteration [0-9.]+ s .predicted.\nsimulated iteration [0-9]+\\.[0-9]+ s .step simulator"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_hydraulis.txt --gpus 32 --model 13b --gpus-per-node 4)
zeppelin_add_cli_test(tool.strategy_summary EXIT_CODE 0
  STDOUT "llama-13b on 32 GPUs .8 per node.: 64 sequences.*strategy: .*pipeline 0 <TP [0-9]+, PP [0-9]+, CP 1>: MaxLen.*iteration [0-9.]+ s"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_hydraulis.txt --gpus 32 --model 13b)
# At 8,192 GPUs the plan comes out in well under a second and, priced per port, the step
# program holds each GPU's switching traffic, so it is simulated (a few seconds). Flow by flow
# it would list every transfer and pass max_switching_transfers (1,000 TP-8 pipelines: about
# 1e9 transfers), so the simulation is reported refused with the numbers, and the command
# still succeeds.
zeppelin_add_cli_test(tool.strategy_at_cluster_scale_simulates_per_port EXIT_CODE 0
  STDOUT "on 8192 GPUs .*iteration [0-9.]+ s .predicted.\nsimulated iteration [0-9]+\\.[0-9]+ s .step simulator"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_mixed_1000.txt --gpus 8192)
zeppelin_add_cli_test(tool.strategy_at_cluster_scale_names_the_refused_simulation EXIT_CODE 0
  STDOUT "on 8192 GPUs .*iteration [0-9.]+ s .predicted.\nsimulated iteration: refused: the parameter switching moves more slices.*switching_transfers=[0-9.e+]+, max_switching_transfers=4194304"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_mixed_1000.txt --gpus 8192 --exchanges per_flow)
zeppelin_add_cli_test(tool.strategy_json_names_the_refused_simulation EXIT_CODE 0
  STDOUT "\"simulated_iteration_s\":null,\"simulation_refused\":\"the parameter switching"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_mixed_1000.txt --gpus 8192 --exchanges per_flow --json)
add_test(NAME tool.strategy_same_plan_on_any_threads
  COMMAND "${CMAKE_COMMAND}" "-DTOOL=${zeppelin_tool_cmd}" "-DLENGTHS=${zeppelin_fixtures}/lengths_mixed_1000.txt"
          -P "${CMAKE_CURRENT_LIST_DIR}/strategy_threads.cmake")
add_test(NAME tool.strategy_exchanges_per_port_and_per_flow
  COMMAND "${CMAKE_COMMAND}" "-DTOOL=${zeppelin_tool_cmd}" "-DLENGTHS=${zeppelin_fixtures}/lengths_mixed_1000.txt"
          -P "${CMAKE_CURRENT_LIST_DIR}/strategy_exchanges.cmake")
zeppelin_add_cli_test(tool.strategy_rejects_unknown_exchanges EXIT_CODE 105 STDERR "^--exchanges: 'fair' is not one of per_port\\|per_flow\n"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_hydraulis.txt --exchanges fair)
zeppelin_add_cli_test(tool.strategy_rejects_zero_threads EXIT_CODE 105 STDERR "^--threads: '0' is not positive"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_hydraulis.txt --threads 0)
add_test(NAME tool.strategy_placement_budget_caps_trials
  COMMAND "${CMAKE_COMMAND}" "-DTOOL=${zeppelin_tool_cmd}" "-DLENGTHS=${zeppelin_fixtures}/lengths_hydraulis.txt"
          -P "${CMAKE_CURRENT_LIST_DIR}/strategy_budget.cmake")
zeppelin_add_cli_test(tool.strategy_rejects_zero_placement_budget EXIT_CODE 105 STDERR "^--placement-budget: '0' is not positive"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_hydraulis.txt --placement-budget 0)
zeppelin_add_cli_test(tool.strategy_rejects_unholdable_sequence EXIT_CODE 1
  STDERR "no parallel scheme holds the longest sequence .longest=5000000, largest_max_len=[0-9]+"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_too_long.txt --gpus 8 --model 7b)
zeppelin_add_cli_test(tool.strategy_rejects_model_that_fits_nowhere EXIT_CODE 1
  STDERR "the model fits no parallel scheme.*gpus=8"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_hydraulis.txt --gpus 8 --model 32b --gpu-memory-gib 16)
zeppelin_add_cli_test(tool.strategy_rejects_zero_gpus EXIT_CODE 1 STDERR "a strategy is planned for 1 .. 131072 GPUs .gpus=0"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_hydraulis.txt --gpus 0)

# `zeppelin chunk`: the JSON schema, the text summary, and bad input.
zeppelin_add_cli_test(tool.chunk_json EXIT_CODE 0
  STDOUT "^\\{\"format\":\"zeppelin.chunk\",\"version\":1,\"mesh\":.[0-9]+.*\"chunks\":.\\{\"context\":[0-9]+,\"slices\":.\\{\"seq\":[0-9]+,\"begin\":[0-9]+,\"end\":[0-9]+\\}.*\"order\":.[0-9]+.*\"checkpoint\":..[0-9]+.*\"pipelines\":.[0-9]+.*\"iteration_s\":[0-9.e-]+\\}"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --sp 8 --pp 4 --model 13b --json)
zeppelin_add_cli_test(tool.chunk_summary EXIT_CODE 0
  STDOUT "gpt-30b on 32 GPUs .SP 8 x PP 4.: 96 sequences, longest 117851 tokens.*mesh: [0-9]+ slices.*pipeline 0: [0-9]+ chunks.*iteration [0-9.]+ s"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --model 30b --gpu-memory-gib 40 --max-slices 4)
zeppelin_add_cli_test(tool.chunk_rejects_batch_that_fits_nowhere EXIT_CODE 1
  STDERR "fits in memory, even with full recomputation .longest=117851"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --gpu-memory-gib 12)
zeppelin_add_cli_test(tool.chunk_rejects_zero_sp EXIT_CODE 1 STDERR "SP and PP degrees must be at least 1 .sp=0"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --sp 0)
zeppelin_add_cli_test(tool.chunk_rejects_huge_sp EXIT_CODE 1 STDERR "--sp x --pp GPUs must be at most 1048576 .sp=2147483647, pp=4, gpus=8589934588"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --sp 2147483647)
zeppelin_add_cli_test(tool.chunk_rejects_zero_max_slices EXIT_CODE 105 STDERR "--max-slices: Value 0 not in range 1 to 256"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --max-slices 0)
zeppelin_add_cli_test(tool.chunk_rejects_negative_max_slices EXIT_CODE 105 STDERR "--max-slices: Value -1 not in range 1 to 256"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --max-slices -1)
# (through sh: a CMake list drops an empty argument)
zeppelin_add_cli_test(tool.empty_value_refused EXIT_CODE 105 STDERR "--slack: an empty value is not a value"
  COMMAND sh -c "'$<TARGET_FILE:zeppelin_tool>' simulate --slack \"\"")
# --compare: the plan and the four baselines as step plans on the step simulator, text and JSON
# (one node, SP 4 x PP 2: every method's step plans priced op by op in a few seconds)
zeppelin_add_cli_test(tool.chunk_compare EXIT_CODE 0
  STDOUT "simulated iteration .step simulator, ZeRO-3 traffic included.:.*infinipipe +[0-9.]+ s.*seq1f1b_like +[0-9.]+ s  .InfiniPipe [0-9.]+x faster.*megatron_like +[0-9.]+ s.*deepspeed_like +[0-9.]+ s.*flexsp_like +[0-9.]+ s"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --model 7b --sp 4 --pp 2 --max-slices 4 --compare --context 96K)
zeppelin_add_cli_test(tool.chunk_compare_json EXIT_CODE 0
  STDOUT "\"iteration_s\":[0-9.e-]+,\"simulated\":\{\"infinipipe\":[0-9.e-]+,\"seq1f1b_like\":[0-9.e-]+,\"megatron_like\":[0-9.e-]+,\"deepspeed_like\":[0-9.e-]+,\"flexsp_like\":[0-9.e-]+\}\}"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --model 7b --sp 4 --pp 2 --max-slices 4 --compare --json)
zeppelin_add_cli_test(tool.chunk_rejects_bad_fixed_chunk EXIT_CODE 1 STDERR "fixed chunk >= 1 token .*fixed_chunk_tokens=0"
  COMMAND ${zeppelin_tool_cmd} chunk --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --max-slices 2 --compare --fixed-chunk-tokens 0)

# one size parser, file arguments checked, defaults in --help, --version (the first hour)
zeppelin_add_cli_test(tool.version EXIT_CODE 0 STDOUT "^zeppelin [0-9]+\\.[0-9]+\\.[0-9]+" COMMAND ${zeppelin_tool_cmd} --version)
# Threads change how long a simulation takes, not what it prints.
zeppelin_add_cli_test(tool.simulate_threads EXIT_CODE 0 STDOUT "hybrid_dp +[0-9]+\\.[0-9] +[0-9]+ "
  COMMAND ${zeppelin_tool_cmd} simulate --tokens 64K --nodes 4 --methods hybrid_dp --threads 2)
zeppelin_add_cli_test(tool.simulate_rejects_zero_threads EXIT_CODE 105 STDERR "--threads"
  COMMAND ${zeppelin_tool_cmd} simulate --threads 0)
zeppelin_add_cli_test(tool.simulate_accepts_sizes EXIT_CODE 0 STDOUT "32768 tokens"
  COMMAND ${zeppelin_tool_cmd} simulate --tokens 32K --nodes 1 --methods te_cp)
zeppelin_add_cli_test(tool.rejects_bad_size EXIT_CODE 105 STDERR "--tokens: '12Q' is not a token count such as 4096, 64K, 1M or 2G"
  COMMAND ${zeppelin_tool_cmd} sample --dataset github --tokens 12Q)
zeppelin_add_cli_test(tool.plan_checks_lengths_file EXIT_CODE 105 STDERR "--lengths: File does not exist: .*no_such_file"
  COMMAND ${zeppelin_tool_cmd} plan --method hierarchical --lengths ${zeppelin_fixtures}/no_such_file.txt)
# lengths_small.txt holds 221696 tokens: 27712 per GPU on 8 GPUs, plus 1/8
zeppelin_add_cli_test(tool.plan_derives_capacity EXIT_CODE 0 STDOUT "on 2 x 4 GPUs, capacity 31176,"
  COMMAND ${zeppelin_tool_cmd} plan --method hierarchical --lengths ${zeppelin_fixtures}/lengths_small.txt --nodes 2 --gpus-per-node 4)
zeppelin_add_cli_test(tool.plan_help_shows_defaults EXIT_CODE 0 STDOUT "--nodes INT:POSITIVE=1.*--gpus-per-node INT:POSITIVE=8"
  COMMAND ${zeppelin_tool_cmd} plan --help)

# Size parameters beyond what a run can hold are refused at once, naming the value and the bound
# (they ran out of memory, or drew for minutes, before).
zeppelin_add_cli_test(tool.pack_rejects_huge_micro_batches EXIT_CODE 1
  STDERR "a packing needs 1 .. 1048576 micro-batches per iteration .micro_batches=2147483647"
  COMMAND ${zeppelin_tool_cmd} pack --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --micro-batches 2147483647)
zeppelin_add_cli_test(tool.strategy_rejects_huge_cluster EXIT_CODE 1
  STDERR "a strategy is planned for 1 .. 131072 GPUs .gpus=2147483647"
  COMMAND ${zeppelin_tool_cmd} strategy --lengths ${zeppelin_fixtures}/lengths_infinipipe.txt --gpus 2147483647)
zeppelin_add_cli_test(tool.sample_rejects_huge_budget EXIT_CODE 1
  STDERR "the token budget needs more sequences than one sample draws .*max_sampled_sequences=67108864"
  COMMAND ${zeppelin_tool_cmd} sample --dataset github --tokens 9223372036854775807)
# a balanced input reads 1: eight equal micro-batches on four stages
zeppelin_add_cli_test(tool.pipeline_balanced_reads_one EXIT_CODE 0 STDOUT "imbalance: attention 1.000, latency 1.000"
  COMMAND ${zeppelin_tool_cmd} pipeline --stages 4 --micro-batch-tokens 1000,1000,1000,1000,1000,1000,1000,1000)

# `zeppelin step`: the step planner's choice, its JSON, --explain, --candidates, bad input.
zeppelin_add_cli_test(tool.step_text EXIT_CODE 0
  STDOUT "chosen: [a-z+]+, predicted [0-9.]+ s \\(lower bound [0-9.]+ s, efficiency [0-9.]+\\).*candidates:.*megatron.*te.*ulysses.*wlb.*zeppelin.*hydraulis.*infinipipe.*hydraulis\\+zeppelin.*wlb\\+zeppelin.*infinipipe\\+zeppelin"
  COMMAND ${zeppelin_tool_cmd} step --lengths ${zeppelin_fixtures}/lengths_wlb.txt --nodes 1 --gpus-per-node 4 --model 7b --threads 1)
zeppelin_add_cli_test(tool.step_json EXIT_CODE 0
  STDOUT "^\\{\"format\":\"zeppelin.step\",\"version\":1,\"chosen\":\"[a-z+]+\",\"predicted_s\":[0-9.e-]+,\"lower_bound_s\":[0-9.e-]+,\"efficiency\":[0-9.e-]+,\"candidates\":.\\{\"name\":\"hydraulis\",\"seconds\":[0-9.e-]+,\"refusal\":null,\"stopped_after_s\":null\\},\\{\"name\":\"te\".*\"parts\":.\\{\"sequences\":.[0-9,]+.,\"plan\":\\{\"format\":\"zeppelin.step_plan\""
  COMMAND ${zeppelin_tool_cmd} step --lengths ${zeppelin_fixtures}/lengths_wlb.txt --nodes 2 --gpus-per-node 4 --candidates hydraulis,te --complete --json)
zeppelin_add_cli_test(tool.step_stops_the_beaten EXIT_CODE 0
  STDOUT "infinipipe +> [0-9.]+ s +\\(stopped once past the best\\)"
  COMMAND ${zeppelin_tool_cmd} step --lengths ${zeppelin_fixtures}/lengths_hydraulis.txt --nodes 2 --gpus-per-node 8 --candidates hydraulis,infinipipe)
zeppelin_add_cli_test(tool.step_explain EXIT_CODE 0
  STDOUT "infinipipe +[0-9.]+ s.*InfiniPipe's chunks.*part 0 \\([a-z_]+ sync\\):.*replica 0 <TP [0-9]+, CP [0-9]+, PP [0-9]+> on GPUs 0\\.\\.[0-9]+, [a-z0-9_-]+: .[0-9]"
  COMMAND ${zeppelin_tool_cmd} step --lengths ${zeppelin_fixtures}/lengths_wlb.txt --nodes 1 --gpus-per-node 4 --candidates infinipipe --explain)
zeppelin_add_cli_test(tool.step_exchanges_per_flow EXIT_CODE 0 STDOUT "chosen: hydraulis, predicted [0-9.]+ s"
  COMMAND ${zeppelin_tool_cmd} step --lengths ${zeppelin_fixtures}/lengths_wlb.txt --nodes 2 --gpus-per-node 4 --candidates hydraulis --exchanges per_flow)
zeppelin_add_cli_test(tool.step_exchanges_unknown EXIT_CODE 105 STDERR "--exchanges: .nope. is not one of per_port\\|per_flow"
  COMMAND ${zeppelin_tool_cmd} step --lengths ${zeppelin_fixtures}/lengths_wlb.txt --exchanges nope)
zeppelin_add_cli_test(tool.step_unknown_candidate EXIT_CODE 1 STDERR "--candidates: unknown candidate 'nope' \\(valid: megatron, te,.*infinipipe\\+zeppelin\\)"
  COMMAND ${zeppelin_tool_cmd} step --lengths ${zeppelin_fixtures}/lengths_wlb.txt --candidates te,nope)
zeppelin_add_cli_test(tool.step_nothing_plans EXIT_CODE 1 STDERR "no candidate composition plans this step"
  COMMAND ${zeppelin_tool_cmd} step --lengths ${zeppelin_fixtures}/lengths_too_long.txt --nodes 1 --gpus-per-node 2 --candidates megatron,hydraulis)
zeppelin_add_cli_test(tool.step_bad_nodes EXIT_CODE 1 STDERR "--nodes and --gpus-per-node must be >= 1.*nodes=0"
  COMMAND ${zeppelin_tool_cmd} step --lengths ${zeppelin_fixtures}/lengths_wlb.txt --nodes 0)
