# zeppelin_unity_build(<target>): the target's sources compile as ONE translation unit (CMake's
# UNITY_BUILD, no batch limit), included in file-name order.
# Used for the targets whose sources share most of their compile time: each test executable,
# the zeppelin tool, train_gpt and the C ABI library. Most of such a source's compile time is
# parsing the library headers and instantiating the planners and simulators its neighbours
# instantiate too, which one unit does once (bench/README.md "CI time": test_sim 324 -> 41 CPU
# s, all test executables about 1,150 -> 480). File-scope names, anonymous namespaces included,
# must therefore differ between a target's sources (a clash is a compile error naming both);
# test helpers that several sources need go to tests/support/.
function(zeppelin_unity_build target)
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
endfunction()
