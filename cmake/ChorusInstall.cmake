# Installs headers, libchorus.so, a CMake package (find_package(chorus) ->
# chorus::chorus) and chorus.pc. Both package descriptions are relocatable:
# `cmake --install build --prefix ANYWHERE` works.

include(CMakePackageConfigHelpers)

set(CHORUS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)

install(TARGETS chorus EXPORT chorusTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(CHORUS_MPI_HEADERS mpi.hpp chorus_mpi.h)
if(CHORUS_WITH_MPI)
  set(CHORUS_HEADER_EXCLUDES)
else()
  set(CHORUS_HEADER_EXCLUDES PATTERN mpi.hpp EXCLUDE PATTERN chorus_mpi.h EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/chorus
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h" ${CHORUS_HEADER_EXCLUDES})
install(FILES ${PROJECT_BINARY_DIR}/include/chorus/version.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/chorus)

install(EXPORT chorusTargets NAMESPACE chorus:: DESTINATION ${CHORUS_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/chorusConfig.cmake.in
  ${PROJECT_BINARY_DIR}/chorusConfig.cmake
  INSTALL_DESTINATION ${CHORUS_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/chorusConfig.cmake
  ${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake
  DESTINATION ${CHORUS_CMAKE_DIR})

file(RELATIVE_PATH CHORUS_PC_TO_PREFIX
  "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(${PROJECT_SOURCE_DIR}/cmake/chorus.pc.in
  ${PROJECT_BINARY_DIR}/chorus.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/chorus.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# With MPI: libchorus_mpi (chorus::mpi, in an export set of its own so that
# find_package(chorus) needs MPI only for it), chorus_mpi.pc, and
# libchorus_pmpi.so for LD_PRELOAD.
if(CHORUS_WITH_MPI)
  install(TARGETS chorus_mpi EXPORT chorusMpiTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT chorusMpiTargets NAMESPACE chorus:: DESTINATION ${CHORUS_CMAKE_DIR})
  install(TARGETS chorus_pmpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/chorus_mpi.pc.in
    ${PROJECT_BINARY_DIR}/chorus_mpi.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/chorus_mpi.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
