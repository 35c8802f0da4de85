# The install the .deb is made of (packaging/CMakeLists.txt), checked: `cmake --install` of the build tree into a
# temporary DESTDIR under the prefix /usr, as CPack does, then every file the README names is there, the manual pages
# render without a warning where `man` is installed, and Debian's python3 imports memscope_torch from the installed
# dist-packages without torch (-S: no site-packages, where a torch could be). Run by CTest as `cmake -P` with
# BUILD_DIR, LIBDIR, MANDIR, PYTHONDIR (relative to the prefix) and WITH_APP; one process, no threads.
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR LIBDIR MANDIR PYTHONDIR WITH_APP)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "check_install.cmake: -D${var}=... is required")
    endif()
endforeach()

set(dest ${BUILD_DIR}/packaging/check-install)
file(REMOVE_RECURSE ${dest})
execute_process(COMMAND ${CMAKE_COMMAND} -E env DESTDIR=${dest} ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix /usr
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install ${BUILD_DIR} failed (${rc}): ${err}")
endif()
set(usr ${dest}/usr)

# What the README names, and what the desktop needs.
set(expected
    bin/memscope-cli
    ${LIBDIR}/libmemscope-agent.so
    ${LIBDIR}/libmemscope-preload.so
    include/memscope/agent.h
    include/memscope/observe.h
    ${MANDIR}/man1/memscope-cli.1.gz
    ${PYTHONDIR}/memscope_torch/__init__.py
    ${PYTHONDIR}/memscope_torch/__main__.py
    ${PYTHONDIR}/memscope_torch/memscope_observer.cpp
    ${PYTHONDIR}/memscope_torch/include/memscope/agent.h
    ${PYTHONDIR}/memscope_torch/include/memscope/observe.h
    ${PYTHONDIR}/memscope_torch/libmemscope-agent.so
    share/memscope/memscope_torch.py)
if(WITH_APP)
    list(APPEND expected bin/memscope ${MANDIR}/man1/memscope.1.gz share/applications/memscope.desktop
         share/icons/hicolor/scalable/apps/memscope.svg)
endif()
set(missing)
foreach(file ${expected})
    # EXISTS follows links: the agent's link in the package must reach the library.
    if(NOT EXISTS ${usr}/${file})
        list(APPEND missing /usr/${file})
    else()
        message(STATUS "installed: /usr/${file}")
    endif()
endforeach()
if(missing)
    list(JOIN missing "\n  " text)
    message(FATAL_ERROR "missing from the install (or a broken link):\n  ${text}")
endif()
if(NOT IS_SYMLINK ${usr}/${PYTHONDIR}/memscope_torch/libmemscope-agent.so)
    message(FATAL_ERROR "${PYTHONDIR}/memscope_torch/libmemscope-agent.so is not a link to the agent library")
endif()

# Debian Policy 12.1: manual pages compressed with gzip -9n (no name, no time stamp in the header).
foreach(page ${MANDIR}/man1/memscope-cli.1.gz ${MANDIR}/man1/memscope.1.gz)
    if(NOT EXISTS ${usr}/${page})
        continue()
    endif()
    file(READ ${usr}/${page} header LIMIT 10 HEX)
    # 1f8b 08: gzip, deflate; flags 00 (no name); mtime 00000000.
    if(NOT header MATCHES "^1f8b08000000000002")
        message(FATAL_ERROR "/usr/${page} is not compressed as gzip -9n: header ${header}")
    endif()
    find_program(MAN man)
    if(NOT MAN)
        message(STATUS "man is not installed: /usr/${page} not rendered")
        continue()
    endif()
    execute_process(COMMAND ${CMAKE_COMMAND} -E env LC_ALL=C.UTF-8 MANWIDTH=80 MANPAGER=cat PAGER=cat
                            ${MAN} --warnings -l ${usr}/${page}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE warnings)
    if(NOT rc EQUAL 0 OR NOT warnings STREQUAL "" OR NOT text MATCHES "NAME.*SYNOPSIS.*DESCRIPTION")
        message(FATAL_ERROR "man -l /usr/${page}: status ${rc}, warnings: ${warnings}\n${text}")
    endif()
    message(STATUS "man -l /usr/${page}: rendered, no warnings")
endforeach()

# Debian's python3 (else any python3), without site-packages, where a torch could hide.
find_program(PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT PYTHON3)
    find_program(PYTHON3 python3)
endif()
if(NOT PYTHON3)
    message(STATUS "python3 is not installed: memscope_torch not imported")
    return()
endif()
set(packages ${usr}/${PYTHONDIR})
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${packages} PYTHONDONTWRITEBYTECODE=1
                        ${PYTHON3} -S -c
                        "import sys, memscope_torch as m; assert 'torch' not in sys.modules; print(m.__file__); print(m.find_library())"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(STRIP "${out}" out)
string(REPLACE "\n" ";" lines "${out}")
list(LENGTH lines count)
if(NOT rc EQUAL 0 OR NOT count EQUAL 2)
    message(FATAL_ERROR "${PYTHON3} -S -c 'import memscope_torch' with PYTHONPATH=${packages}: status ${rc}\n${out}\n${err}")
endif()
list(GET lines 0 module)
list(GET lines 1 library)
file(REAL_PATH ${module} module)
file(REAL_PATH ${packages} packagesReal)
if(NOT module MATCHES "^${packagesReal}/memscope_torch/__init__.py$")
    message(FATAL_ERROR "memscope_torch was imported from ${module}, not from the install")
endif()
# use() and observe() find the agent beside the package.
if(NOT library MATCHES "/memscope_torch/libmemscope-agent.so$" OR NOT EXISTS ${library})
    message(FATAL_ERROR "memscope_torch.find_library() gives ${library}, not the installed agent")
endif()
message(STATUS "${PYTHON3} imports ${module} (no torch), agent ${library}")
# `python3 -m memscope_torch` without a script: its usage and status 2 (the package's __main__.py runs).
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${packages} PYTHONDONTWRITEBYTECODE=1
                        ${PYTHON3} -S -m memscope_torch
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "usage: python -m memscope_torch")
    message(FATAL_ERROR "python3 -m memscope_torch: status ${rc}, ${err}")
endif()
message(STATUS "python3 -m memscope_torch: usage, status 2")
file(REMOVE_RECURSE ${dest})
