# ctest script: the simulator prices exactly what the host engine executes.
# For one method and one seeded random batch it samples the lengths, runs
#   host_ring_attention --method M ... --record host.json   (executes the layer for real)
#   zeppelin simulate  --method M ... --record sim.json     (prices it)
# on the same cluster, shape (fp64) and slack, and fails unless both exit 0 and the two
# execution records (every transfer and launch, program/record.hpp) are identical.
# In: -DTOOL=<zeppelin> -DHOST=<host_ring_attention> -DMETHOD=<name> -DSEED=<n>
#     -DCLUSTER=<preset> -DKV_HEADS=<n> -DHEAD_DIM=<n> -DHISTOGRAM=<file> -DWORK=<scratch dir>
foreach(var TOOL HOST METHOD SEED CLUSTER KV_HEADS HEAD_DIM HISTOGRAM WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "record_equality.cmake: -D${var}=... is required")
  endif()
endforeach()
file(MAKE_DIRECTORY "${WORK}")
set(lengths "${WORK}/lengths.txt")
execute_process(COMMAND "${TOOL}" sample --histogram "${HISTOGRAM}" --tokens 3000 --seed "${SEED}"
                OUTPUT_FILE "${lengths}" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "zeppelin sample failed (${rc}): ${err}")
endif()
set(shape --lengths "${lengths}" --cluster "${CLUSTER}" --nodes 2 --gpus-per-node 4 --heads 4 --kv-heads "${KV_HEADS}"
          --head-dim "${HEAD_DIM}")
execute_process(COMMAND "${HOST}" --method "${METHOD}" ${shape} --seed "${SEED}" --record "${WORK}/host.json"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "host_ring_attention failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND "${TOOL}" simulate --method "${METHOD}" ${shape} --dtype fp64 --tp 1 --record "${WORK}/sim.json"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "zeppelin simulate failed (${rc}):\n${out}\n${err}")
endif()
file(READ "${WORK}/host.json" host)
file(READ "${WORK}/sim.json" sim)
string(LENGTH "${host}" host_bytes)
if(host_bytes LESS 200)
  message(FATAL_ERROR "the host record is nearly empty:\n${host}")
endif()
if(NOT host STREQUAL sim)
  execute_process(COMMAND diff "${WORK}/host.json" "${WORK}/sim.json" OUTPUT_VARIABLE delta)
  message(FATAL_ERROR "the simulator's record differs from what the host engine executed (${METHOD}, seed ${SEED}):\n${delta}")
endif()
message(STATUS "records equal: ${METHOD}, seed ${SEED}, ${host_bytes} bytes")
