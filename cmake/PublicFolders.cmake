# memscope_public_folders(target NAME=FOLDER ...): the include folder a library gives its users, and the only one.
# Each library gets a folder of its own in the build tree, build/include/<target>/, holding one link per NAME to a
# source FOLDER, and that folder is its PUBLIC (INTERFACE, for an interface library) include directory: its users
# write "NAME/header.h", and a header of a library they do not link is not found. So the layer table of the README's
# architecture section is enforced by the compiler: the agent's core, which links memscope-wire alone, cannot
# include "model/..."; memscope-common cannot include "client/..." or "viewer/..."; only what links
# memscope-agent-internal sees the agent's own headers, as "agent/...". A library's own sources include their
# folder's headers the same way, or by bare name from beside them.
function(memscope_public_folders target)
    set(root ${CMAKE_BINARY_DIR}/include/${target})
    file(MAKE_DIRECTORY ${root})
    foreach(pair ${ARGN})
        string(REPLACE "=" ";" parts ${pair})
        list(GET parts 0 name)
        list(GET parts 1 folder)
        file(CREATE_LINK ${folder} ${root}/${name} SYMBOLIC)
    endforeach()
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY")
        target_include_directories(${target} INTERFACE ${root})
    else()
        target_include_directories(${target} PUBLIC ${root})
    endif()
endfunction()
