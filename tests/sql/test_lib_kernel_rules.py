"""The I_lib kernel-name rules (METHOD.md section 2) as DuckDB applies them: first match by priority, own-name rules
on the kernel's own name (taxbreak.read.kernel_names, equal to sql/int_kernel_names.sql's: test_kernel_names), signature
rules on the whole name."""

from __future__ import annotations

import duckdb
import pytest

from taxbreak.engine.rules import LIB_KERNEL_RULES
from taxbreak.read.kernel_names import own_name


def first_rule(name: str) -> tuple[int, str] | None:
    con = duckdb.connect()
    try:
        return con.execute(
            "SELECT i_lib, rule FROM (SELECT unnest($rules, recursive := true)) r "
            "WHERE regexp_matches(CASE match_on WHEN 'signature' THEN $name ELSE $own END, pattern, 'i') "
            "ORDER BY priority LIMIT 1",
            {"rules": [dict(zip(("priority", "pattern", "i_lib", "rule", "match_on"), r, strict=True))
                       for r in LIB_KERNEL_RULES],
             "name": name, "own": own_name(name)},
        ).fetchone()
    finally:
        con.close()


@pytest.mark.parametrize(("name", "expected"), [
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", (0, "soda_native_nvjet")),  # SODA: framework-native
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", (1, "cublas_xmma")),
    ("ampere_sgemm_128x64_tn", (1, "cublas_arch_gemm")),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2>", (1, "cutlass_name")),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>", (1, "cudnn_name")),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_AFC", (1, "rocblas_tensile")),
    ("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass", (1, "composable_kernel")),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", None),
    ("triton_poi_fused_add_cos_sin_0", None),
    # own names (sql/int_kernel_names.sql derives them; test_kernel_names and test_fidelity_rules run that)
    ("explicit_convolve_sgemm", (1, "cudnn_family")),
    ("fbgemm_gpu::jagged_dense_elementwise_kernel", (0, "fbgemm_native")),
    ("moe::dev::finalize::finalizeKernelVecLoad", None),
    ("wgrad_alg0_engine", (1, "library_internal_name")),
    ("at::native::im2col_kernel", None),  # PyTorch's own im2col is not cuDNN's im2col4d_kernel
    # signature rules (match_on 'signature') see the whole name: API types only, case-sensitive
    ("void epilogue::impl::globalKernel<float, true>(int, cublasLtEpilogue_t, float*)", (1, "library_api_type")),
    ("void k<(cudnnKernelDataType_t)0>(float*)", (1, "library_api_type")),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<64, cutlass::bfloat16_t>>(Flash_fwd_params)", None),
    ("void my_kernel<float>(mycublasParams, cublas_like*)", None),  # only a whole API type name counts
])
def test_first_matching_rule(name: str, expected: tuple[int, str] | None) -> None:
    assert first_rule(name) == expected
