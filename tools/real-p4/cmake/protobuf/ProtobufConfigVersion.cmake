# Version file for the stand-in Protobuf package config (see ProtobufConfig.cmake).
# p4c asks for Protobuf 25.3 in CONFIG mode; Debian 12 ships 3.21, which works
# for p4c once the generated headers are fixed up (pb_cstring_fix.py), so any
# requested version is accepted.  PACKAGE_VERSION reports the real protoc version.
set(_nfc_protoc "${Protobuf_PROTOC_EXECUTABLE}")
if(NOT _nfc_protoc)
  find_program(_nfc_protoc protoc)
endif()
execute_process(COMMAND "${_nfc_protoc}" --version OUTPUT_VARIABLE _nfc_pv ERROR_QUIET)
string(REGEX MATCH "[0-9]+(\\.[0-9]+)+" PACKAGE_VERSION "${_nfc_pv}")
if(NOT PACKAGE_VERSION)
  set(PACKAGE_VERSION "3.21.0")
endif()
set(PACKAGE_VERSION_COMPATIBLE TRUE)
set(PACKAGE_VERSION_EXACT FALSE)
unset(_nfc_protoc)
unset(_nfc_pv)
