# CTest cases for the `zeppelin` tool: the main job runs, the JSON outputs keep the schema
# the issues specify, and bad input exits non-zero with a message on stderr.
set(zeppelin_fixtures "${PROJECT_SOURCE_DIR}/tests/fixtures")
set(zeppelin_tool_cmd "$<TARGET_FILE:zeppelin_tool>")

add_test(NAME tool.main_job COMMAND ${zeppelin_tool_cmd})
set_tests_properties(tool.main_job PROPERTIES PASS_REGULAR_EXPRESSION "te_cp.*zeppelin")

add_test(NAME tool.simulate_json COMMAND ${zeppelin_tool_cmd} simulate --json)
set_tests_properties(tool.simulate_json PROPERTIES
  PASS_REGULAR_EXPRESSION "\"methods\".*\"name\": *\"te_cp\".*\"step_time_s\".*\"tokens_per_s\".*\"lower_bound_s\"")

add_test(NAME tool.options_go_to_main_job COMMAND ${zeppelin_tool_cmd} --nodes 2 --json)
set_tests_properties(tool.options_go_to_main_job PROPERTIES PASS_REGULAR_EXPRESSION "\"methods\"")

foreach(method IN ITEMS hierarchical even_split allgather hybrid_dp per_document)
  add_test(NAME tool.plan_json.${method}
           COMMAND ${zeppelin_tool_cmd} plan --method ${method} --lengths ${zeppelin_fixtures}/lengths_small.txt
                   --nodes 2 --gpus-per-node 4 --capacity 100000 --json)
  set_tests_properties(tool.plan_json.${method} PROPERTIES
    PASS_REGULAR_EXPRESSION "\"method\": *\"${method}\".*\"ranks\".*\"shards\".*\"groups\"")
endforeach()

add_test(NAME tool.remap_json COMMAND ${zeppelin_tool_cmd} remap --tokens 10,2,6,6 --gpus-per-node 2
                                       --intra-cost 1 --inter-cost 4 --json)
set_tests_properties(tool.remap_json PROPERTIES PASS_REGULAR_EXPRESSION "\"matrix\".*\"objective\"")

# Bad input: non-zero exit (WILL_FAIL inverts the status).
add_test(NAME tool.rejects_capacity_too_small
         COMMAND ${zeppelin_tool_cmd} plan --method hierarchical --lengths ${zeppelin_fixtures}/lengths_small.txt
                 --nodes 1 --gpus-per-node 1 --capacity 1)
add_test(NAME tool.rejects_negative_tokens
         COMMAND ${zeppelin_tool_cmd} remap --tokens 5,-1 --gpus-per-node 2 --intra-cost 1 --inter-cost 2)
add_test(NAME tool.rejects_indivisible_ranks
         COMMAND ${zeppelin_tool_cmd} remap --tokens 5,1,3 --gpus-per-node 2 --intra-cost 1 --inter-cost 2)
add_test(NAME tool.rejects_nonpositive_cost
         COMMAND ${zeppelin_tool_cmd} remap --tokens 5,1 --gpus-per-node 2 --intra-cost 0 --inter-cost 2)
add_test(NAME tool.rejects_unknown_model COMMAND ${zeppelin_tool_cmd} simulate --model nope)
set_tests_properties(tool.rejects_capacity_too_small tool.rejects_negative_tokens tool.rejects_indivisible_ranks
                     tool.rejects_nonpositive_cost tool.rejects_unknown_model PROPERTIES WILL_FAIL TRUE)
