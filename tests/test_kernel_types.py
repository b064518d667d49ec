"""Kernel taxonomy rules on kernel names taken from the real traces of every format."""

from __future__ import annotations

import pytest

from tracedb.kernel_types import classify

# (name as the trace writes it, kind) -> (kernel_type, kernel_category)
CASES = [
    # CUDA / PyTorch (kineto_h200_fp32, hta_alexnet_ext_eq_corr)
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
     "kernel", ("computation", "elementwise")),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>"
     "(int, float, float const*, float const*, float const*, float*, float*, float*)",
     "kernel", ("computation", "reduction")),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "kernel", ("computation", "attention")),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "kernel", ("computation", "gemm")),
    ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, true, true>(int, int, int, "
     "float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, "
     "int, float const*, float const*, bool, int, int)", "kernel", ("computation", "convolution")),
    ("Memcpy DtoD (Device -> Device)", "memcpy", ("memory", "memory")),
    ("Memset (Device)", "memset", ("memory", "memory")),
    # NCCL (hta_nccl_two_ranks)
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "kernel",
     ("communication", "communication")),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel",
     ("communication", "communication")),
    # ROCm (hta_rocm_mi250): Tensile GEMMs are named Cijk_...
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0", "kernel", ("computation", "gemm")),
    # Triton (hta_triton)
    ("triton_poi_fused_add_cos_sin_0", "kernel", ("computation", "elementwise")),
    ("triton_red_fused_native_layer_norm_0", "kernel", ("computation", "reduction")),
    ("triton_tem_fused_mm_0", "kernel", ("computation", "gemm")),
    # XLA fusions (xspace_jax_h200)
    ("gemm_fusion_dot_general_4", "kernel", ("computation", "gemm")),
    ("input_reduce_fusion_1", "kernel", ("computation", "reduction")),
    ("loop_add_fusion", "kernel", ("computation", "elementwise")),
    ("all-reduce-start", "kernel", ("communication", "communication")),
    # MegEngine operator kernels (megengine_graph_profile)
    ("ConvolutionForward", "kernel", ("computation", "convolution")),
    ("MatrixMul", "kernel", ("computation", "gemm")),
    ("Elemwise", "kernel", ("computation", "elementwise")),
    ("PoolingForward", "kernel", ("computation", "reduction")),
    ("ImmutableTensor", "kernel", ("computation", "other")),
    # TensorFlow stream rows (tf_stepstats_gpu_streams)
    ("MEMCPYDtoH", "memcpy", ("memory", "memory")),
    ("BiasAddGrad", "kernel", ("computation", "reduction")),
    ("MatMul", "kernel", ("computation", "gemm")),
    # MTIA (hta_mtia_inference)
    ("dma_request", "memcpy", ("memory", "memory")),
    ("pe_exe", "kernel", ("computation", "other")),
]


@pytest.mark.parametrize("name,kind,want", CASES, ids=[c[0][:40] for c in CASES])
def test_name_rules(name, kind, want):
    assert classify(name, kind) == want


def test_every_format_gets_the_columns(seed_warehouse):
    from tracedb import catalog

    con = catalog.connect(seed_warehouse)
    missing = con.execute("SELECT count(*) FROM kernels WHERE kernel_type IS NULL OR kernel_category IS NULL").fetchone()
    assert missing == (0,)
    formats = {r[0] for r in con.execute("SELECT DISTINCT source_format FROM kernels").fetchall()}
    assert {"kineto", "tf_stepstats", "megengine", "xspace"} <= formats
