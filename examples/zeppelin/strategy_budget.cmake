# ctest script: `zeppelin strategy --placement-budget B` caps the dispatch trials at
# B / sequences (at least one): on LENGTHS (64 sequences) on 8 GPUs, a budget of 127
# placements prints the plan of --trials 1, which differs there from the default 100 trials.
#   cmake -DTOOL=<zeppelin> -DLENGTHS=<file> -P strategy_budget.cmake
include("${CMAKE_CURRENT_LIST_DIR}/strategy_json.cmake")
strategy_json(one_trial "${LENGTHS}" 8 --trials 1)
strategy_json(budget "${LENGTHS}" 8 --placement-budget 127)
strategy_json(hundred "${LENGTHS}" 8 --trials 100)
if(NOT one_trial STREQUAL budget)
  message(FATAL_ERROR "--placement-budget 127 on 64 sequences does not print the plan of --trials 1:\n${one_trial}\n${budget}")
endif()
if(one_trial STREQUAL hundred)
  message(FATAL_ERROR "--trials 1 and --trials 100 print the same plan: this check would not see a budget ignored")
endif()
message(STATUS "zeppelin strategy: --placement-budget 127 runs the one trial of --trials 1")
