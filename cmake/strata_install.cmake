# Install and export: headers, strata_runtime, a CMake package (find_package(strata CONFIG) ->
# strata::strata, strata::runtime) and pkg-config files (strata, strata-runtime). Apps install
# themselves (apps/CMakeLists.txt); man pages come from apps/man (help2man, when present).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY include/strata DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The bundled demo model: strata-run/strata-serve load it when no -m is given
# (include/strata/runtime/default_model.hpp looks in <prefix>/share/strata/models).
install(FILES models/strata-demo.gguf DESTINATION share/strata/models)
install(TARGETS strata strata_runtime EXPORT strataTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(STRATA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${STRATA_CMAKE_DIR})
configure_package_config_file(cmake/strataConfig.cmake.in ${PROJECT_BINARY_DIR}/strataConfig.cmake
                              INSTALL_DESTINATION ${STRATA_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/strataConfig.cmake ${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
        DESTINATION ${STRATA_CMAKE_DIR})

# pkg-config: the static runtime needs its private dependencies on the consumer's link line.
# glslang is a set of static archives on Debian 12 whose glslang.pc leaves some out (see
# runtime/meson.build), so they are named here, grouped because they depend on each other.
set(STRATA_PC_RUNTIME_LIBS "-lstrata_runtime -lboost_json -luring")
set(STRATA_PC_RUNTIME_CFLAGS "")
if(STRATA_VULKAN)
  set(STRATA_PC_RUNTIME_CFLAGS "-DSTRATA_HAS_VULKAN")
  string(APPEND STRATA_PC_RUNTIME_LIBS " -Wl,--start-group -lglslang -lSPIRV -lglslang-default-resource-limits"
         " -lMachineIndependent -lGenericCodeGen -lOSDependent -lOGLCompiler -lSPIRV-Tools-opt -lSPIRV-Tools"
         " -Wl,--end-group -ldl")
endif()
# Relocatable: the prefix is found from the .pc file's own place (cmake --install --prefix).
file(RELATIVE_PATH STRATA_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/strata.pc.in ${PROJECT_BINARY_DIR}/strata.pc @ONLY)
configure_file(cmake/strata-runtime.pc.in ${PROJECT_BINARY_DIR}/strata-runtime.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/strata.pc ${PROJECT_BINARY_DIR}/strata-runtime.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
