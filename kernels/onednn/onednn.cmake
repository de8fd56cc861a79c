# kernels/onednn/: oneDNN as a candidate matmul for BF16/F32 weights on their GGUF rows (onednn.h).
# Built with oneDNN only where its library and headers are found, link and compile here;
# elsewhere onednn_none.c gives the same API, reporting "built without oneDNN". NM_HAVE_DNNL tells
# tests/ and the benchmarks which one was built. Included after kernels/kernels.cmake (nm_kernels).
option(NM_ONEDNN "Build the oneDNN matmul candidate when oneDNN is found" ON)
set(NM_ONEDNN_DIR ${CMAKE_CURRENT_LIST_DIR})
set(NM_HAVE_DNNL OFF)
set(NM_DNNL_LINK "")
set(NM_DNNL_WHY "")     # why oneDNN was left out, for the status line and CMakeLists.txt's summary
if(NM_ONEDNN)
  # An optional dependency must never break the configure, so oneDNN's own CMake package
  # (find_package(dnnl)) is not used: Debian's dnnl-config.cmake calls find_package(OpenCL
  # REQUIRED) for its OpenCL GPU runtime, which is fatal without ocl-icd-opencl-dev even under
  # QUIET. The library and header are looked for directly (also under $DNNLROOT, oneAPI's
  # variable, and CMAKE_PREFIX_PATH), and a program calling dnnl_version() must link.
  # A build directory configured before oneDNN was removed (or moved) looks again, rather than
  # link a library that is gone; the probes below rerun whenever what was found changes.
  foreach(_v NM_DNNL_LIBRARY NM_DNNL_INCLUDE NM_DNNL_HDR)
    if(${_v} AND NOT EXISTS "${${_v}}")
      unset(${_v} CACHE)
    endif()
  endforeach()
  find_library(NM_DNNL_LIBRARY dnnl HINTS $ENV{DNNLROOT} $ENV{DNNL_ROOT} PATH_SUFFIXES lib lib64)
  find_path(NM_DNNL_INCLUDE oneapi/dnnl/dnnl.h HINTS $ENV{DNNLROOT} $ENV{DNNL_ROOT} PATH_SUFFIXES include)
  if(NOT "${NM_DNNL_LIBRARY};${NM_DNNL_INCLUDE}" STREQUAL "${NM_DNNL_PROBED}")
    unset(NM_DNNL_LINKS CACHE)
    unset(NM_DNNL_COMPILES CACHE)
    set(NM_DNNL_PROBED "${NM_DNNL_LIBRARY};${NM_DNNL_INCLUDE}" CACHE INTERNAL "what the oneDNN probes ran on")
  endif()
  if(NM_DNNL_LIBRARY AND NM_DNNL_INCLUDE)
    set(_dnnl_probe ${CMAKE_BINARY_DIR}/onednn_probe.c)
    file(WRITE ${_dnnl_probe} "#include \"oneapi/dnnl/dnnl.h\"\n"
                              "int main(void) { return dnnl_version()->major > 0 ? 0 : 1; }\n")
    try_compile(NM_DNNL_LINKS ${CMAKE_BINARY_DIR}/onednn_probe SOURCES ${_dnnl_probe}
                CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${NM_DNNL_INCLUDE}"
                LINK_LIBRARIES ${NM_DNNL_LIBRARY} OUTPUT_VARIABLE _dnnl_probe_out)
    if(NM_DNNL_LINKS)
      set(NM_DNNL_LINK ${NM_DNNL_LIBRARY})
      set(NM_DNNL_INC ${NM_DNNL_INCLUDE})
    else()
      set(NM_DNNL_WHY "${NM_DNNL_LIBRARY} does not link (see CMakeFiles/CMakeError.log)")
    endif()
  elseif(NM_DNNL_LIBRARY OR NM_DNNL_INCLUDE)
    set(NM_DNNL_WHY "libdnnl or oneapi/dnnl/dnnl.h missing (library: ${NM_DNNL_LIBRARY}, header: ${NM_DNNL_INCLUDE}): launcher/setup.sh installs libdnnl-dev")
  else()
    set(NM_DNNL_WHY "not found: launcher/setup.sh installs libdnnl-dev")
  endif()
endif()

if(NM_DNNL_LINK)
  # Version and CPU threading runtime from the headers, for the status line and the thread count.
  find_path(NM_DNNL_HDR oneapi/dnnl/dnnl_version.h HINTS ${NM_DNNL_INC})
  file(STRINGS ${NM_DNNL_HDR}/oneapi/dnnl/dnnl_version.h _dnnl_ver REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" NM_DNNL_VERSION "${_dnnl_ver}")
  file(STRINGS ${NM_DNNL_HDR}/oneapi/dnnl/dnnl_config.h _dnnl_rt REGEX "#define DNNL_CPU_THREADING_RUNTIME ")
  string(REGEX REPLACE ".*DNNL_RUNTIME_([A-Z_]+).*" "\\1" NM_DNNL_RUNTIME "${_dnnl_rt}")
  # onednn.c was developed against 2.6 (Debian bookworm); its 3.x branch (the C API changed) has
  # not been built here. Compile it once at configure time, so that a oneDNN it does not fit
  # gives a status line and the no-oneDNN build instead of a broken build.
  set(_dnnl_try_type ${CMAKE_TRY_COMPILE_TARGET_TYPE})
  set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
  try_compile(NM_DNNL_COMPILES ${CMAKE_BINARY_DIR}/onednn_try SOURCES ${NM_ONEDNN_DIR}/onednn.c
              CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${NM_DNNL_HDR};${NM_ONEDNN_DIR};${NM_ONEDNN_DIR}/.."
              COMPILE_DEFINITIONS -DNM_HAVE_DNNL OUTPUT_VARIABLE _dnnl_try_out)
  set(CMAKE_TRY_COMPILE_TARGET_TYPE ${_dnnl_try_type})
  if(NOT NM_DNNL_COMPILES)
    set(NM_DNNL_WHY "${NM_DNNL_VERSION} found, but kernels/onednn/onednn.c does not compile against it (see CMakeFiles/CMakeError.log)")
    set(NM_DNNL_LINK "")
  endif()
endif()

if(NM_DNNL_LINK)
  set(NM_HAVE_DNNL ON)
  add_library(nm_onednn STATIC ${NM_ONEDNN_DIR}/onednn.c ${NM_ONEDNN_DIR}/onednn_status.c)
  target_compile_definitions(nm_onednn PRIVATE NM_HAVE_DNNL)
  target_include_directories(nm_onednn PRIVATE ${NM_DNNL_HDR})
  target_link_libraries(nm_onednn PRIVATE ${NM_DNNL_LINK})
  set(_dnnl_threads "the library's default threads")
  if(NM_DNNL_RUNTIME STREQUAL "OMP")
    # omp_set_num_threads sets the thread count; the library already links libgomp.
    find_package(OpenMP COMPONENTS C QUIET)
    if(OpenMP_C_FOUND)
      target_compile_definitions(nm_onednn PRIVATE NM_DNNL_OMP)
      target_link_libraries(nm_onednn PRIVATE OpenMP::OpenMP_C)
      set(_dnnl_threads "thread count set per call")
    else()
      set(_dnnl_threads "no OpenMP for C here: threads from OMP_NUM_THREADS")
    endif()
  endif()
  message(STATUS "numallm: oneDNN ${NM_DNNL_VERSION} found (${NM_DNNL_LINK}; CPU runtime ${NM_DNNL_RUNTIME}, ${_dnnl_threads}): "
                 "oneDNN matmul candidate built (kernels/onednn)")
else()
  add_library(nm_onednn STATIC ${NM_ONEDNN_DIR}/onednn_none.c ${NM_ONEDNN_DIR}/onednn_status.c)
  if(NOT NM_ONEDNN)
    set(NM_DNNL_WHY "NM_ONEDNN=OFF")
  endif()
  message(STATUS "numallm: oneDNN ${NM_DNNL_WHY}; oneDNN matmul candidate not built")
endif()
target_include_directories(nm_onednn PUBLIC ${NM_ONEDNN_DIR})
target_link_libraries(nm_onednn PUBLIC nm_kernels)
