# ctest script: `zeppelin strategy --exchanges per_port` (the default) and `per_flow` print the
# same plan (the pricing of the switching changes the simulation only), and simulated
# iterations within 5 % of each other on the mixed file over 64 GPUs, where the switching
# crosses the NICs.
#   cmake -DTOOL=<zeppelin> -DLENGTHS=<file> -P strategy_exchanges.cmake
include("${CMAKE_CURRENT_LIST_DIR}/strategy_json.cmake")
strategy_json(by_port "${LENGTHS}" 64)
strategy_json(by_flow "${LENGTHS}" 64 --exchanges per_flow)
string(REGEX REPLACE ",\"simulated_iteration_s\":.*" "" plan_by_port "${by_port}")
string(REGEX REPLACE ",\"simulated_iteration_s\":.*" "" plan_by_flow "${by_flow}")
if(NOT plan_by_port STREQUAL plan_by_flow)
  message(FATAL_ERROR "--exchanges per_port and per_flow print different plans:\n${by_port}\n${by_flow}")
endif()
string(JSON port_s GET "${by_port}" simulated_iteration_s)
string(JSON flow_s GET "${by_flow}" simulated_iteration_s)
# CMake's math() is integer: compare in microseconds
foreach(var IN ITEMS port_s flow_s)
  if(NOT ${var} MATCHES "^[0-9]+(\\.[0-9]+)?(e[-+]?[0-9]+)?$" OR ${var} MATCHES "e")
    message(FATAL_ERROR "simulated_iteration_s is not a plain positive number: ${${var}}")
  endif()
  string(REGEX MATCH "^[0-9]+" whole "${${var}}")
  string(REGEX MATCH "\\.[0-9]+" fraction "${${var}}")
  string(SUBSTRING "${fraction}000000" 1 6 micro)
  math(EXPR ${var}_us "${whole} * 1000000 + 1${micro} - 1000000")
endforeach()
math(EXPR difference "${port_s_us} - ${flow_s_us}")
if(difference LESS 0)
  math(EXPR difference "-${difference}")
endif()
math(EXPR allowed "${flow_s_us} / 20")
if(flow_s_us LESS_EQUAL 0 OR difference GREATER allowed)
  message(FATAL_ERROR "per_port ${port_s} s and per_flow ${flow_s} s differ by more than 5 %")
endif()
message(STATUS "zeppelin strategy: the same plan; simulated ${port_s} s per port, ${flow_s} s per flow")
