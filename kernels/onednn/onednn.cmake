# kernels/onednn/: oneDNN as a candidate matmul for BF16/F32 weights on their GGUF rows (onednn.h).
# Built with oneDNN only where CMake finds it (its CMake package, else libdnnl + oneapi/dnnl/dnnl.h);
# elsewhere onednn_none.c gives the same API, reporting "built without oneDNN". NM_HAVE_DNNL tells
# tests/ and the benchmarks which one was built. Included after kernels/kernels.cmake (nm_kernels).
option(NM_ONEDNN "Build the oneDNN matmul candidate when oneDNN is found" ON)
set(NM_ONEDNN_DIR ${CMAKE_CURRENT_LIST_DIR})
set(NM_HAVE_DNNL OFF)
set(NM_DNNL_LINK "")
set(_dnnl_said OFF)
if(NM_ONEDNN)
  # The package's config (Debian: DNNL::dnnl) also looks for OpenCL where the library was built
  # with the OpenCL GPU runtime; when that fails, fall back to the library and header.
  find_package(dnnl CONFIG QUIET)
  if(TARGET DNNL::dnnl)
    set(NM_DNNL_LINK DNNL::dnnl)
    get_target_property(NM_DNNL_INC DNNL::dnnl INTERFACE_INCLUDE_DIRECTORIES)
  else()
    find_library(NM_DNNL_LIBRARY dnnl)
    find_path(NM_DNNL_INCLUDE oneapi/dnnl/dnnl.h)
    if(NM_DNNL_LIBRARY AND NM_DNNL_INCLUDE)
      set(NM_DNNL_LINK ${NM_DNNL_LIBRARY})
      set(NM_DNNL_INC ${NM_DNNL_INCLUDE})
    endif()
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
    message(STATUS "numallm: oneDNN ${NM_DNNL_VERSION} found, but kernels/onednn/onednn.c does not compile against it "
                   "(see CMakeFiles/CMakeError.log); oneDNN matmul candidate not built")
    set(NM_DNNL_LINK "")
    set(_dnnl_said ON)
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
  if(_dnnl_said)
    # the reason is above
  elseif(NM_ONEDNN)
    message(STATUS "numallm: oneDNN not found (launcher/setup.sh installs libdnnl-dev); oneDNN matmul candidate not built")
  else()
    message(STATUS "numallm: NM_ONEDNN=OFF; oneDNN matmul candidate not built")
  endif()
endif()
target_include_directories(nm_onednn PUBLIC ${NM_ONEDNN_DIR})
target_link_libraries(nm_onednn PUBLIC nm_kernels)
