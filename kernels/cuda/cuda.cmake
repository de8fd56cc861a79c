# kernels/cuda/: the GPU rank's device layer (nm_cuda). With nvcc (and cuBLAS) the CUDA kernels
# build for CMAKE_CUDA_ARCHITECTURES (CMakeLists.txt: sm_90 for H100/H200, SASS + PTX); without, none.c provides the same
# API with no devices, so the rest of the tree links the same way in both builds.
set(NM_CUDA_DIR ${CMAKE_CURRENT_LIST_DIR})
set(NM_HAVE_CUDA OFF)
if(CMAKE_CUDA_COMPILER)
  find_package(CUDAToolkit)
  if(TARGET CUDA::cudart AND TARGET CUDA::cublas)
    set(NM_HAVE_CUDA ON)
  else()
    message(STATUS "numallm: nvcc found but not the CUDA runtime/cuBLAS libraries; GPU rank not built")
  endif()
endif()

if(NM_HAVE_CUDA)
  add_library(nm_cuda STATIC ${NM_CUDA_DIR}/runtime.cu ${NM_CUDA_DIR}/matmul.cu ${NM_CUDA_DIR}/ops.cu)
  set_target_properties(nm_cuda PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
  # The directory's warning flags (-Wall -Wextra -Werror) are gcc's; nvcc gets its own, with the
  # host compiler's warnings passed through and made errors under NM_WERROR.
  set_property(TARGET nm_cuda PROPERTY COMPILE_OPTIONS "")
  target_compile_options(nm_cuda PRIVATE -O3 -lineinfo -Xcompiler=-Wall,-Wno-unused-parameter)
  if(NM_WERROR)
    target_compile_options(nm_cuda PRIVATE -Werror=all-warnings)
  endif()
  target_link_libraries(nm_cuda PUBLIC nm_kernels CUDA::cudart CUDA::cublas)
  message(STATUS "numallm: GPU rank built with CUDA ${CUDAToolkit_VERSION} for sm_${CMAKE_CUDA_ARCHITECTURES}")
else()
  add_library(nm_cuda STATIC ${NM_CUDA_DIR}/none.c)
  target_link_libraries(nm_cuda PUBLIC nm_kernels)
endif()
target_include_directories(nm_cuda PUBLIC ${NM_CUDA_DIR})
# The GPU stage (rank/engine/gpu_stage.c) calls this layer.
target_link_libraries(nm_rank PUBLIC nm_cuda)
