# Man pages: help2man (Debian package help2man) turns each app's --help into a man page, built
# with the apps and installed to share/man/man1. The help text is llama.cpp-shaped ("usage:",
# "----- Group -----", "examples:"); a small wrapper renames those to the headings help2man
# knows (Usage:, "Group:", Examples:) so they become SYNOPSIS, subsections and EXAMPLES.
find_program(STRATA_HELP2MAN help2man)
if(NOT STRATA_HELP2MAN)
  message(STATUS "help2man not found: no man pages (tools/install-deps.sh installs it)")
  return()
endif()
include(GNUInstallDirs)

function(strata_man_page app description)
  if(NOT TARGET ${app})
    return()
  endif()
  set(wrapper ${PROJECT_BINARY_DIR}/man/bin/${app})
  file(GENERATE OUTPUT ${wrapper}
       CONTENT "#!/usr/bin/env bash\nset -o pipefail\n\"$<TARGET_FILE:${app}>\" \"$@\" | sed -e 's/^usage:/Usage:/' -e 's/^----- \\(.*\\) -----$/\\1:/' -e 's/^examples:$/Examples:/'\n"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  set(page ${PROJECT_BINARY_DIR}/man/${app}.1)
  add_custom_command(OUTPUT ${page}
    COMMAND ${STRATA_HELP2MAN} --no-info --name=${description} --output=${page} ${wrapper}
    DEPENDS ${app} VERBATIM
    COMMENT "Man page ${app}.1 (help2man)")
  add_custom_target(${app}-man ALL DEPENDS ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endfunction()

strata_man_page(strata-run "run and inspect GGUF models: generate, chat, logits, tokenize")
strata_man_page(strata-serve "OpenAI- and Anthropic-compatible HTTP server for a GGUF model")
strata_man_page(strata-quantize "quantize GGUF models, byte-identical to llama-quantize")
strata_man_page(strata-mkmodel "write GGUF models with real shapes and random weights")
strata_man_page(strata-quantcheck "measure TurboQuant distortion against theory")
strata_man_page(strata-bench "prompt and generation throughput of GGUF models (llama-bench style)")
