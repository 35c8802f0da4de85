# Helpers that make test, benchmark and fuzzer executables the same way everywhere under tests/. Each lands in
# ${CMAKE_BINARY_DIR}/bin with the house warnings; used at configure time only.
#
#   memscope_add_qtest(NAME unit SOURCES tst_unit.cpp ... [LIBS lib ...] [LABELS label ...])
#       QtTest executable tst_<unit>, registered with CTest as tst_<unit>. Runs with QT_QPA_PLATFORM=offscreen and
#       with MEMSCOPE_SHARED_DIR (snapshots/, reference/) and MEMSCOPE_SOURCE_DIR in its environment.
#   memscope_add_benchmark(NAME unit SOURCES bench_unit.cpp ... [LIBS lib ...])
#       Google Benchmark executable bench_<unit> (`make bench` runs every bench_*); not a CTest test.
#   memscope_add_fuzzer(NAME unit SOURCES fuzz_unit.cpp ... [LIBS lib ...])
#       libFuzzer executable fuzz_<unit>; only with MEMSCOPE_FUZZ (clang), which instruments every target.

function(memscope_add_qtest)
    cmake_parse_arguments(PARSE_ARGV 0 ARG "" "NAME" "SOURCES;LIBS;LABELS")
    if(NOT ARG_NAME OR NOT ARG_SOURCES)
        message(FATAL_ERROR "memscope_add_qtest: NAME and SOURCES are required")
    endif()
    set(target tst_${ARG_NAME})
    add_executable(${target} ${ARG_SOURCES})
    target_link_libraries(${target} PRIVATE Qt6::Test ${ARG_LIBS})
    set_target_properties(${target} PROPERTIES AUTOMOC ON RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
    # Helpers every test folder shares (tests/support: header-only).
    target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/tests/support)
    memscope_set_warnings(${target})
    memscope_qt_hygiene(${target})
    add_test(NAME ${target} COMMAND ${target})
    set(environment
        QT_QPA_PLATFORM=offscreen
        MEMSCOPE_SHARED_DIR=${MEMSCOPE_SHARED_DIR}
        MEMSCOPE_SOURCE_DIR=${CMAKE_SOURCE_DIR})
    set_tests_properties(${target} PROPERTIES ENVIRONMENT "${environment}" LABELS "${ARG_LABELS}")
endfunction()

function(memscope_add_benchmark)
    cmake_parse_arguments(PARSE_ARGV 0 ARG "" "NAME" "SOURCES;LIBS")
    find_package(benchmark REQUIRED)
    set(target bench_${ARG_NAME})
    add_executable(${target} ${ARG_SOURCES})
    target_link_libraries(${target} PRIVATE benchmark::benchmark_main ${ARG_LIBS})
    set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
    memscope_set_warnings(${target})
endfunction()

function(memscope_add_fuzzer)
    cmake_parse_arguments(PARSE_ARGV 0 ARG "" "NAME" "SOURCES;LIBS")
    set(target fuzz_${ARG_NAME})
    add_executable(${target} ${ARG_SOURCES})
    target_link_libraries(${target} PRIVATE ${ARG_LIBS})
    # The libFuzzer main; the top-level MEMSCOPE_FUZZ block already adds the sanitizers and coverage to everything.
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
    set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
    memscope_set_warnings(${target})
endfunction()
