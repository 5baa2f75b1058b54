# Helpers that give every Precast target the same flags.

function(precast_set_warnings target)
  # -Wno-restrict: GCC 12 reports a false positive for `"literal" + std::string&&` (PR105329).
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter -Wno-restrict)
  if(PRECAST_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# precast_library(NAME SOURCES ... DEPS ...): a static library rooted at the source tree.
function(precast_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  precast_set_warnings(${name})
endfunction()

# precast_unit_test(NAME SOURCES ... DEPS ...): a GoogleTest executable registered with ctest.
function(precast_unit_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE PRECAST_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  precast_set_warnings(${name})
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST
                       PROPERTIES ENVIRONMENT "PRECAST_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# Adds each named subdirectory that exists and has a CMakeLists.txt. Lets each folder's owner
# create its folder without touching the parent's list.
function(precast_add_subdirectories)
  foreach(dir ${ARGN})
    if(EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${dir}/CMakeLists.txt")
      add_subdirectory(${dir})
    endif()
  endforeach()
endfunction()
