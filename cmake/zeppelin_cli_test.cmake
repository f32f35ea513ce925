# zeppelin_add_cli_test(<name> EXIT_CODE <n> [STDOUT <regex>] [STDERR <regex>] COMMAND <exe> <arg>...)
# A CTest case that runs a command line and passes only when it exits with exactly EXIT_CODE
# AND its stdout / stderr match the given regexes. Why not PASS_REGULAR_EXPRESSION: it ignores
# the exit status; and WILL_FAIL accepts any non-zero exit, a usage error or a crash included.
# The check itself is cmake/zeppelin_run_check.cmake (run with cmake -P).
set(zeppelin_run_check_script "${CMAKE_CURRENT_LIST_DIR}/zeppelin_run_check.cmake")

function(zeppelin_add_cli_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "EXIT_CODE;STDOUT;STDERR" "COMMAND")
  if(NOT DEFINED arg_EXIT_CODE OR NOT arg_COMMAND)
    message(FATAL_ERROR "zeppelin_add_cli_test(${name}): EXIT_CODE and COMMAND are required")
  endif()
  # argv travels as ARG0..ARG<n-1>: a list in one -D would be split at its semicolons
  set(defs "-DEXIT_CODE=${arg_EXIT_CODE}" "-DSTDOUT_REGEX=${arg_STDOUT}" "-DSTDERR_REGEX=${arg_STDERR}")
  set(argc 0)
  foreach(word IN LISTS arg_COMMAND)
    list(APPEND defs "-DARG${argc}=${word}")
    math(EXPR argc "${argc} + 1")
  endforeach()
  add_test(NAME ${name} COMMAND "${CMAKE_COMMAND}" ${defs} "-DARGC=${argc}" -P "${zeppelin_run_check_script}")
endfunction()
