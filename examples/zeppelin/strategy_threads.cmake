# ctest script: `zeppelin strategy --json` prints the same plan whatever --threads is (the
# dispatch trials and the pipelines' packings run on threads; the winner is the least
# (makespan, trial) either way).
#   cmake -DTOOL=<zeppelin> -DLENGTHS=<file> -P strategy_threads.cmake
include("${CMAKE_CURRENT_LIST_DIR}/strategy_json.cmake")
strategy_json(one "${LENGTHS}" 64 --threads 1)
strategy_json(three "${LENGTHS}" 64 --threads 3)
if(NOT one STREQUAL three)
  message(FATAL_ERROR "--threads 1 and --threads 3 print different plans:\n${one}\n${three}")
endif()
message(STATUS "zeppelin strategy: the same plan on 1 and 3 threads")
