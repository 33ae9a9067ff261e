# Components of the geomopt package.
#
# Each component (ptree, and later manifolds, optimizers, io, ceres) exports its targets into its own file,
# geomopt_<name>Targets.cmake. geomoptConfig.cmake loads a component's file, after the external packages it needs,
# only when that component or one requiring it is asked for, so a consumer of ptree never needs Ceres or HDF5.

set(GEOMOPT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/geomopt")

# geomopt_add_component(<name> TARGETS <target>... [REQUIRES <component>...] [PACKAGES "<args>"...])
#
#   REQUIRES  geomopt components whose targets appear in this one's link interface; they must have been added first,
#             which makes the order of addition an order in which the package can load them.
#   PACKAGES  external packages a consumer must find, one find_dependency() argument string each ("Ceres 2.1").
#             Eigen is found for every component and need not be listed. A private dependency of a shared library
#             (io's HDF5) is not listed; a private dependency of a static library is, since its link line names it.
function(geomopt_add_component name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "TARGETS;REQUIRES;PACKAGES")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_TARGETS)
    message(FATAL_ERROR "geomopt_add_component(${name} TARGETS <target>... [REQUIRES ...] [PACKAGES ...])")
  endif()
  get_property(added GLOBAL PROPERTY GEOMOPT_COMPONENTS)
  if(name IN_LIST added)
    message(FATAL_ERROR "geomopt_add_component: component '${name}' is added twice")
  endif()
  foreach(required IN LISTS arg_REQUIRES)
    if(NOT required IN_LIST added)
      message(FATAL_ERROR "geomopt_add_component(${name}): requires '${required}', which must be added before it")
    endif()
  endforeach()

  set_property(GLOBAL APPEND PROPERTY GEOMOPT_COMPONENTS "${name}")
  set_property(GLOBAL PROPERTY GEOMOPT_COMPONENT_${name}_REQUIRES "${arg_REQUIRES}")
  set_property(GLOBAL PROPERTY GEOMOPT_COMPONENT_${name}_PACKAGES "${arg_PACKAGES}")

  if(GEOMOPT_INSTALL)
    install(TARGETS ${arg_TARGETS}
      EXPORT geomopt_${name}Targets
      ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
      LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
      RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
    install(EXPORT geomopt_${name}Targets
      NAMESPACE geomopt::
      FILE geomopt_${name}Targets.cmake
      DESTINATION "${GEOMOPT_INSTALL_CMAKEDIR}")
  endif()
endfunction()

# Sets <out_var> to CMake code describing every added component, for geomoptConfig.cmake.in.
function(geomopt_component_table out_var)
  get_property(components GLOBAL PROPERTY GEOMOPT_COMPONENTS)
  set(table "set(_geomopt_components ${components})\n")
  foreach(component IN LISTS components)
    get_property(requires GLOBAL PROPERTY GEOMOPT_COMPONENT_${component}_REQUIRES)
    get_property(packages GLOBAL PROPERTY GEOMOPT_COMPONENT_${component}_PACKAGES)
    set(quoted "")
    foreach(package IN LISTS packages)
      string(APPEND quoted " \"${package}\"")
    endforeach()
    string(APPEND table "set(_geomopt_${component}_requires ${requires})\n")
    string(APPEND table "set(_geomopt_${component}_packages${quoted})\n")
  endforeach()
  set(${out_var} "${table}" PARENT_SCOPE)
endfunction()

# geomopt_add_shared_library(<name> <source>...): the shared library geomopt_<name> (alias geomopt::<name>, file
# libgeomopt_<name>.so.<major>.<minor>) over <name>/include, C++20, warnings as the build asks; its links and
# definitions are the caller's. Call it from <name>/CMakeLists.txt, then geomopt_add_component.
# Installed, it finds the geomopt libraries it needs beside itself ($ORIGIN) and its other dependencies where it was
# linked against them (outside the system's directories, such as Open MPI's), whatever prefix it is installed to: a
# program's own run path does not reach the dependencies of its dependencies.
function(geomopt_add_shared_library name)
  add_library(geomopt_${name} SHARED ${ARGN})
  add_library(geomopt::${name} ALIAS geomopt_${name})
  set_target_properties(geomopt_${name} PROPERTIES
    EXPORT_NAME ${name}
    OUTPUT_NAME geomopt_${name}
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
    INSTALL_RPATH "$ORIGIN"
    INSTALL_RPATH_USE_LINK_PATH ON)
  target_include_directories(geomopt_${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(geomopt_${name} PRIVATE $<BUILD_INTERFACE:geomopt_warnings>)
  target_compile_features(geomopt_${name} PUBLIC cxx_std_20)
endfunction()

# geomopt_add_header_only_component(<name> [REQUIRES <component>...] [PACKAGES "<args>"...] [LINKS <target>...]):
# the INTERFACE target geomopt_<name> (alias geomopt::<name>) over <name>/include, linking Eigen, the required
# components and LINKS (imported targets of PACKAGES), its headers installed, and the component added as above.
# Call it from <name>/CMakeLists.txt.
function(geomopt_add_header_only_component name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "REQUIRES;PACKAGES;LINKS")
  add_library(geomopt_${name} INTERFACE)
  add_library(geomopt::${name} ALIAS geomopt_${name})
  set_target_properties(geomopt_${name} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(geomopt_${name} INTERFACE
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  set(links Eigen3::Eigen)
  foreach(required IN LISTS arg_REQUIRES)
    list(APPEND links geomopt::${required})
  endforeach()
  target_link_libraries(geomopt_${name} INTERFACE ${links} ${arg_LINKS})
  target_compile_features(geomopt_${name} INTERFACE cxx_std_20)
  geomopt_add_component(${name} TARGETS geomopt_${name} REQUIRES ${arg_REQUIRES} PACKAGES ${arg_PACKAGES})
  if(GEOMOPT_INSTALL)
    install(DIRECTORY include/ DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
  endif()
endfunction()
