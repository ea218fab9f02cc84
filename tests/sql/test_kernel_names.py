"""A kernel's own name, short name and name rule (docs/method.md section 2) on real-world demangled names: the
analyses' SQL (sql/int_kernel_names.sql) and the readers' Python (taxbreak.read.kernel_names) give the same names."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from taxbreak.engine.plan import sql_files
from taxbreak.engine.rules import RunConfig, settings_arrow
from taxbreak.read import kernel_names

GEMVX = ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, false, true, true, "
         "false, 7, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
         "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >"
         "(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float "
         "const>, cublasGemvTensorStridedBatched<float>, float>)")

# (full name as a trace writes it, own name, short name, (name_i_lib, name_rule)); names from the public traces
# under tests/data/public and ../shared/traces/public unless noted
NAMES: list[tuple[str, str, str, tuple[int | None, str | None]]] = [
    # cuBLAS GEMV behind a templated return type (METHOD.md section 2's example): was `std::enable_if`, I_lib 0
    (GEMVX, "internal::gemvx::kernel", "internal::gemvx::kernel<…>", (1, "cublas_family")),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, cublasGemvParams<"
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)",
     "gemv2T_kernel_val", "gemv2T_kernel_val<…>", (1, "cublas_family")),
    # cuBLASLt epilogue: the library shows only in a parameter type
    ("void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cublasLtEpilogue_t, "
     "int, float*, long, void*, long, long, long, float*, long, int*)",
     "epilogue::impl::globalKernel", "epilogue::impl::globalKernel<…>", (1, "library_api_type")),
    # older cuDNN without its namespace (synthetic: the public traces' one has cudnn::ops::): a template-argument type
    ("void nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>(nchw2nhwc_params_t<float>, "
     "float const*, float*)", "nchwToNhwcKernel", "nchwToNhwcKernel<…>", (1, "library_api_type")),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>("
     "cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
     "cudnn::ops::nchwToNhwcKernel", "cudnn::ops::nchwToNhwcKernel<…>", (1, "cudnn_name")),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*, "
     "cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, "
     "float)", "cudnn::bn_fw_tr_1C11_kernel_NCHW", "cudnn::bn_fw_tr_1C11_kernel_NCHW<…>", (1, "cudnn_name")),
    # older cuDNN convolution engines and library-internal set-up kernels: named in the rule list
    ("void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, float const*, int, float*, float "
     "const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)",
     "wgrad_alg0_engine", "wgrad_alg0_engine<…>", (1, "library_internal_name")),
    ("void im2col4d_kernel<float, int>(im2col4d_params, cudnnConvolutionStruct, cudnnTensor4dStruct, float const*, "
     "float*)", "im2col4d_kernel", "im2col4d_kernel<…>", (1, "library_internal_name")),  # synthetic
    ("void compute_gemm_pointers<float>(float**, float const*, int, float const*, int, float*, int, int)",
     "compute_gemm_pointers", "compute_gemm_pointers<…>", (1, "library_internal_name")),  # synthetic
    ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float "
     "const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, "
     "float const*, bool, int, int)", "implicit_convolve_sgemm", "implicit_convolve_sgemm<…>", (1, "cudnn_family")),
    # CUTLASS by its own name; flash-attention's CUTLASS trait types do not make it a library kernel
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>("
     "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)",
     "cutlass::Kernel2", "cutlass::Kernel2<…>", (1, "cutlass_name")),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, "
     "false, false, false, true, false>(pytorch_flash::Flash_fwd_params)",
     "pytorch_flash::flash_fwd_kernel", "pytorch_flash::flash_fwd_kernel<…>", (None, None)),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, "
     "cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)128, (int)64, (int)4, cutlass::bfloat16_t>>, (bool)0, "
     "(bool)0, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>(Flash_fwd_params)",
     "flash::flash_fwd_kernel", "flash::flash_fwd_kernel<…>", (None, None)),
    ("void moe::dev::finalize::finalizeKernelVecLoad<float, cutlass::bfloat16_t>(Params)",  # synthetic
     "moe::dev::finalize::finalizeKernelVecLoad", "moe::dev::finalize::finalizeKernelVecLoad<…>", (None, None)),
    ("void fbgemm_gpu::permute_2D_data_kernel<true, int, long, float>(int, int, int const*, long const*, float "
     "const*, int const*, int*, long*, float*)",
     "fbgemm_gpu::permute_2D_data_kernel", "fbgemm_gpu::permute_2D_data_kernel<…>", (0, "fbgemm_native")),
    # PyTorch's own kernels: lambdas and operator() inside the template arguments, both demanglers' spellings
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
     "at::native::vectorized_elementwise_kernel", "at::native::vectorized_elementwise_kernel<…>", (None, None)),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel"
     "_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(c10::BFloat16)#1}> >(int, T1)",
     "at::native::elementwise_kernel", "at::native::elementwise_kernel<…>", (None, None)),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::"
     "[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) "
     "(instance 1)], std::array<char *, (unsigned long)2>, (int)8, TrivialOffsetCalculator<(int)1, unsigned int>, "
     "TrivialOffsetCalculator<(int)1, unsigned int>, at::native::memory::LoadWithCast<(int)1>, "
     "at::native::memory::StoreWithCast<(int)1>>(int, T1, T2, T4, T5, T6, T7)",
     "at::native::unrolled_elementwise_kernel", "at::native::unrolled_elementwise_kernel<…>", (None, None)),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
     "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
     "unsigned int, float, 4>)", "at::native::reduce_kernel", "at::native::reduce_kernel<…>", (None, None)),
    # anonymous namespaces, both spellings
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, "
     "int, int, int, bool const*, int, bool)", "(anonymous namespace)::softmax_warp_forward",
     "(anonymous namespace)::softmax_warp_forward<…>", (None, None)),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, "
     "true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, int)",
     "at::native::(anonymous namespace)::indexSelectLargeIndex",
     "at::native::(anonymous namespace)::indexSelectLargeIndex<…>", (None, None)),
    ("void <unnamed>::softmax_warp_forward<float, float, float, (int)6, (bool)0, (bool)0>(T2 *, const T1 *, int, int, "
     "int, const bool *, int, bool)", "<unnamed>::softmax_warp_forward", "<unnamed>::softmax_warp_forward<…>",
     (None, None)),
    ("at::cuda::(anonymous namespace)::spin_kernel(long)", "at::cuda::(anonymous namespace)::spin_kernel",
     "at::cuda::(anonymous namespace)::spin_kernel", (None, None)),
    # the kernel itself an operator() (synthetic): its brackets are part of the name
    ("void at::native::foo_functor<float>::operator()<4>(int) const", "at::native::foo_functor::operator()",
     "at::native::foo_functor<…>::operator()<…>", (None, None)),
    # plain names: Triton, nvJet, cuBLAS xmma / arch GEMMs, ROCm Tensile and Composable Kernel, NCCL
    ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0",
     (None, None)),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN",
     "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", (0, "soda_native_nvjet")),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment"
     "_k_off_kernel__5x_cublas", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
     "execute_segment_k_off_kernel__5x_cublas", (1, "cublas_name")),
    ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn", (1, "cublas_arch_gemm")),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_AFC1",
     "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_AFC1",
     "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_AFC1", (1, "rocblas_tensile")),
    ("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass",
     "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass",
     "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass", (1, "composable_kernel")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "ncclKernel_AllReduce_RING_LL_Sum_float", "ncclKernel_AllReduce_RING_LL_Sum_float", (None, None)),
    ("k_with_clone [clone .kd]", "k_with_clone", "k_with_clone", (None, None)),  # AMD code-object suffix
]


@pytest.fixture(scope="module")
def sql_rows() -> dict[str, tuple]:
    """sql/int_kernel_names.sql over a stg_events holding the table's names, with the default rules."""
    con = duckdb.connect()
    names = [n for n, *_ in NAMES]
    con.register("_ev", pa.table({"kind": ["kernel"] * len(names) + ["runtime_api"],
                                  "name": [*names, "cudaLaunchKernel"]}))
    con.execute("CREATE TEMP TABLE stg_events AS SELECT * FROM _ev")
    con.register("_rules", settings_arrow(RunConfig())["lib_kernel_rules"])
    con.execute("CREATE TEMP TABLE lib_kernel_rules AS SELECT * FROM _rules")
    sf = next(f for f in sql_files() if f.name == "int_kernel_names")
    rows = con.execute(sf.text).fetchall()
    con.close()
    return {r[0]: r[1:] for r in rows}


@pytest.mark.parametrize(("name", "own", "short", "rule"), NAMES, ids=[n[1][:40] for n in NAMES])
def test_own_name_short_name_and_rule(sql_rows: dict[str, tuple], name: str, own: str, short: str,
                                      rule: tuple[int | None, str | None]) -> None:
    assert kernel_names.own_name(name) == own
    assert kernel_names.short_name(name) == short
    assert sql_rows[name] == (own, short, *rule)


def test_only_kernels_are_named(sql_rows: dict[str, tuple]) -> None:
    assert len(sql_rows) == len(NAMES) and "cudaLaunchKernel" not in sql_rows


def test_short_names_stay_distinguishable() -> None:
    names = [
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel"
        "_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(c10::BFloat16)#1}> >(int, T1)",
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
        "float, float, float, at::native::binary_internal::MulFunctor<float> > > >(int, T1)",
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel"
        "_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}> >(int, T1)",
        "gemv2N_kernel",
    ]
    out = kernel_names.short_names(names)  # identifiers all three share (gpu_kernel_impl_nocast) tell none apart
    assert out == {
        names[0]: "at::native::elementwise_kernel<…> [direct_copy_kernel_cuda · BFloat16]",
        names[1]: "at::native::elementwise_kernel<…> [BinaryFunctor]",
        names[2]: "at::native::elementwise_kernel<…> [direct_copy_kernel_cuda · float]",
        "gemv2N_kernel": "gemv2N_kernel",
    }
    same = ["k<1>(int)", "k<2>(int)"]  # only numbers differ: numbered
    assert kernel_names.short_names(same) == {"k<1>(int)": "k<…> #1", "k<2>(int)": "k<…> #2"}
