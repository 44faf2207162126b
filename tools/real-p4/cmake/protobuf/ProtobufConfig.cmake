# Stand-in Protobuf CMake package config for a system protobuf without one
# (Debian 12's libprotobuf-dev 3.21 ships no ProtobufConfig.cmake).
# Used by tools/real-p4/build.sh as -DProtobuf_DIR=<this folder> together with
# -DP4C_USE_PREINSTALLED_PROTOBUF=ON.  It provides what p4c uses from the
# upstream config: the imported targets of CMake's FindProtobuf module
# (protobuf::libprotobuf, protobuf::protoc, ...), Protobuf_INCLUDE_DIRS, and a
# protobuf_generate() with upstream's interface that writes its outputs under
# PROTOC_OUT_DIR (in the build tree), named after each .proto's path relative
# to the import directory that contains it.

if(NOT TARGET protobuf::libprotobuf)
  # FindProtobuf (CMake's module) finds libprotobuf, protoc and the headers.
  # It must not see the version the outer find_package() asked for (p4c: 25.3).
  foreach(_v FIND_VERSION FIND_VERSION_MAJOR FIND_VERSION_MINOR FIND_VERSION_PATCH
             FIND_VERSION_TWEAK FIND_VERSION_COUNT FIND_VERSION_EXACT FIND_VERSION_RANGE)
    set(_nfc_saved_${_v} "${Protobuf_${_v}}")
    unset(Protobuf_${_v})
  endforeach()
  find_package(Protobuf MODULE REQUIRED)
  foreach(_v FIND_VERSION FIND_VERSION_MAJOR FIND_VERSION_MINOR FIND_VERSION_PATCH
             FIND_VERSION_TWEAK FIND_VERSION_COUNT FIND_VERSION_EXACT FIND_VERSION_RANGE)
    set(Protobuf_${_v} "${_nfc_saved_${_v}}")
    unset(_nfc_saved_${_v})
  endforeach()
endif()
set(Protobuf_FOUND TRUE)
if(NOT Protobuf_INCLUDE_DIRS)
  set(Protobuf_INCLUDE_DIRS ${Protobuf_INCLUDE_DIR})
endif()

function(protobuf_generate)
  set(_options APPEND_PATH)
  set(_single LANGUAGE OUT_VAR EXPORT_MACRO PROTOC_OUT_DIR PLUGIN PLUGIN_OPTIONS
              DEPENDENCIES_TARGET TARGET PROTOC_EXE)
  set(_multi PROTOS IMPORT_DIRS GENERATE_EXTENSIONS PROTOC_OPTIONS DEPENDENCIES)
  cmake_parse_arguments(pg "${_options}" "${_single}" "${_multi}" ${ARGN})

  if(NOT pg_PROTOS AND pg_TARGET)
    get_target_property(_srcs ${pg_TARGET} SOURCES)
    foreach(_s IN LISTS _srcs)
      if(_s MATCHES "\\.proto$")
        list(APPEND pg_PROTOS ${_s})
      endif()
    endforeach()
  endif()
  if(NOT pg_PROTOS)
    message(SEND_ERROR "protobuf_generate: no .proto files")
    return()
  endif()
  if(NOT pg_LANGUAGE)
    set(pg_LANGUAGE cpp)
  endif()
  string(TOLOWER "${pg_LANGUAGE}" pg_LANGUAGE)
  if(NOT pg_PROTOC_OUT_DIR)
    set(pg_PROTOC_OUT_DIR ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  if(NOT pg_GENERATE_EXTENSIONS)
    if(pg_LANGUAGE STREQUAL cpp)
      set(pg_GENERATE_EXTENSIONS .pb.h .pb.cc)
    elseif(pg_LANGUAGE STREQUAL python)
      set(pg_GENERATE_EXTENSIONS _pb2.py)
    else()
      message(SEND_ERROR "protobuf_generate: give GENERATE_EXTENSIONS for ${pg_LANGUAGE}")
      return()
    endif()
  endif()
  set(_protoc ${Protobuf_PROTOC_EXECUTABLE})
  if(pg_PROTOC_EXE)
    set(_protoc ${pg_PROTOC_EXE})
  endif()
  set(_out_opt "${pg_PROTOC_OUT_DIR}")
  if(pg_PLUGIN_OPTIONS)
    set(_out_opt "${pg_PLUGIN_OPTIONS}:${pg_PROTOC_OUT_DIR}")
  endif()
  if(pg_EXPORT_MACRO AND pg_LANGUAGE STREQUAL cpp)
    set(_out_opt "dllexport_decl=${pg_EXPORT_MACRO}:${pg_PROTOC_OUT_DIR}")
  endif()

  set(_import_dirs)
  foreach(_d IN LISTS pg_IMPORT_DIRS)
    get_filename_component(_abs ${_d} ABSOLUTE)
    list(APPEND _import_dirs ${_abs})
  endforeach()
  if(NOT _import_dirs)
    set(_import_dirs ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
  list(REMOVE_DUPLICATES _import_dirs)
  set(_include_args)
  foreach(_d IN LISTS _import_dirs)
    list(APPEND _include_args -I ${_d})
  endforeach()

  # A dependency on the very target the command is attached to would be a cycle.
  set(_deps ${pg_DEPENDENCIES})
  if(pg_TARGET AND _deps)
    list(REMOVE_ITEM _deps ${pg_TARGET})
  endif()

  set(_all_generated)
  foreach(_proto IN LISTS pg_PROTOS)
    get_filename_component(_abs_file ${_proto} ABSOLUTE)
    get_filename_component(_abs_dir ${_abs_file} DIRECTORY)
    get_filename_component(_basename ${_proto} NAME_WE)
    # The .proto's path relative to the first import dir that contains it.
    set(_rel_dir "")
    set(_found FALSE)
    foreach(_d IN LISTS _import_dirs)
      file(RELATIVE_PATH _rel ${_d} ${_abs_dir})
      if(NOT _rel MATCHES "^\\.\\." AND NOT IS_ABSOLUTE "${_rel}")
        set(_rel_dir "${_rel}")
        set(_found TRUE)
        break()
      endif()
    endforeach()
    if(NOT _found)
      # Not below any import dir: add its own dir, output flat.
      list(APPEND _include_args -I ${_abs_dir})
    endif()
    if(_rel_dir STREQUAL "")
      set(_prefix "${pg_PROTOC_OUT_DIR}/")
    else()
      set(_prefix "${pg_PROTOC_OUT_DIR}/${_rel_dir}/")
    endif()
    set(_generated)
    foreach(_ext IN LISTS pg_GENERATE_EXTENSIONS)
      list(APPEND _generated "${_prefix}${_basename}${_ext}")
    endforeach()
    list(APPEND _all_generated ${_generated})
    set(_plugin)
    if(pg_PLUGIN)
      set(_plugin "--plugin=${pg_PLUGIN}")
    endif()
    add_custom_command(
      OUTPUT ${_generated}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${pg_PROTOC_OUT_DIR}
      COMMAND ${_protoc} ${pg_PROTOC_OPTIONS} --${pg_LANGUAGE}_out ${_out_opt} ${_plugin}
              ${_include_args} ${_abs_file}
      DEPENDS ${_abs_file} ${_deps}
      COMMENT "Running ${pg_LANGUAGE} protocol buffer compiler on ${_proto}"
      VERBATIM)
  endforeach()

  set_source_files_properties(${_all_generated} PROPERTIES GENERATED TRUE)
  if(pg_OUT_VAR)
    set(${pg_OUT_VAR} ${_all_generated} PARENT_SCOPE)
  endif()
  if(pg_TARGET)
    target_sources(${pg_TARGET} PRIVATE ${_all_generated})
  endif()
endfunction()
