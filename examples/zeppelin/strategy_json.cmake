# Included by the strategy ctest scripts, which take -DTOOL=<zeppelin> -DLENGTHS=<file> (both
# checked here): strategy_json(<out> <lengths> <gpus> <args...>) runs
# `${TOOL} strategy --lengths <lengths> --gpus <gpus> --model 7b <args> --json`, fails the test
# unless it exits 0 with strategy JSON that lists micro-batches, and stores the JSON in <out>.
foreach(var IN ITEMS TOOL LENGTHS)
  if(NOT ${var})
    message(FATAL_ERROR "${CMAKE_CURRENT_LIST_FILE}: ${var} is not set (run with -D${var}=...)")
  endif()
endforeach()
function(strategy_json out lengths gpus)
  execute_process(COMMAND "${TOOL}" strategy --lengths "${lengths}" --gpus ${gpus} --model 7b ${ARGN} --json
                  OUTPUT_VARIABLE json RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "zeppelin strategy ${ARGN} failed: ${status}")
  endif()
  if(NOT json MATCHES "^\\{\"format\":\"zeppelin.strategy\".*\"micro_batches\":\\[\\[[0-9]")
    message(FATAL_ERROR "unexpected strategy JSON with ${ARGN}: ${json}")
  endif()
  set(${out} "${json}" PARENT_SCOPE)
endfunction()
