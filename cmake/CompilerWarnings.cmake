# memscope_set_warnings(target): the warning set every memscope target compiles with. Warnings stay warnings unless
# MEMSCOPE_WARNINGS_AS_ERRORS is ON. Applied to the target's own sources only (PRIVATE); include at configure time.
option(MEMSCOPE_WARNINGS_AS_ERRORS "Turn compiler warnings into errors" OFF)

function(memscope_set_warnings target)
    if(MSVC)
        target_compile_options(${target} PRIVATE /W4 /permissive-)
        if(MEMSCOPE_WARNINGS_AS_ERRORS)
            target_compile_options(${target} PRIVATE /WX)
        endif()
        return()
    endif()
    target_compile_options(${target} PRIVATE
        -Wall
        -Wextra
        -Wpedantic
        -Wshadow
        -Wnon-virtual-dtor
        -Woverloaded-virtual
        -Wcast-align
        -Wformat=2
        -Wimplicit-fallthrough
        -Wmissing-declarations
        -Wundef)
    if(MEMSCOPE_WARNINGS_AS_ERRORS)
        target_compile_options(${target} PRIVATE -Werror)
    endif()
endfunction()
