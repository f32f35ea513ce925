# ctest script: the simulator prices exactly the step the trainer ran.
# For one train_gpt configuration it runs
#   train_gpt ARGS --steps 1 --write-job job.json --record train.json   (trains: the step program on host ranks)
#   zeppelin pipeline --job job.json --record sim.json                  (simulates that job's step program)
# and fails unless both exit 0 and the two step records (step/record.hpp: every compute op,
# transfer and attention piece and launch of every rank) are byte for byte the same file.
# In: -DTRAIN_GPT=<train_gpt> -DTOOL=<zeppelin> -DARGS=<train_gpt arguments, separated by |>
#     -DWORK=<scratch dir>
foreach(var TRAIN_GPT TOOL ARGS WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "record_equality.cmake: -D${var}=... is required")
  endif()
endforeach()
file(MAKE_DIRECTORY "${WORK}")
file(REMOVE "${WORK}/job.json" "${WORK}/train.json" "${WORK}/sim.json")
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND "${TRAIN_GPT}" ${args} --steps 1 --write-job "${WORK}/job.json" --record "${WORK}/train.json"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train_gpt failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND "${TOOL}" pipeline --job "${WORK}/job.json" --record "${WORK}/sim.json"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "zeppelin pipeline --job failed (${rc}):\n${out}\n${err}")
endif()
file(SIZE "${WORK}/train.json" train_bytes)
if(train_bytes LESS 1000)
  file(READ "${WORK}/train.json" train)
  message(FATAL_ERROR "the trainer's record is nearly empty:\n${train}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/train.json" "${WORK}/sim.json" RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  execute_process(COMMAND diff "${WORK}/train.json" "${WORK}/sim.json" OUTPUT_VARIABLE delta)
  string(SUBSTRING "${delta}" 0 4000 delta)
  message(FATAL_ERROR "the simulator's record of the job differs from what train_gpt ran (${ARGS}):\n${delta}")
endif()
message(STATUS "records equal: ${ARGS}, ${train_bytes} bytes")
