# Compiler flags shared by every target of the build, driven by the STRATA_* options.
add_library(strata_flags INTERFACE)
target_compile_options(strata_flags INTERFACE -Wall -Wextra -Wpedantic)
if(STRATA_NATIVE)
  target_compile_options(strata_flags INTERFACE -march=native)
endif()
if(STRATA_SANITIZE)
  target_compile_options(strata_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                -fno-sanitize-recover=undefined)
  target_link_options(strata_flags INTERFACE -fsanitize=address,undefined)
endif()
