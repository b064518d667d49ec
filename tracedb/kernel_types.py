"""Kernel taxonomy: `kernels.kernel_type` and `kernels.kernel_category` from name and kind.

One set of name rules for every format (CUDA/cuDNN/cuBLAS, ROCm/Tensile/RCCL, Triton,
XLA fusions, MegEngine kernels), so that one query compares frameworks. Rules are tried
in order; the first match wins. Names are matched case-insensitively, anywhere.

kernel_type (HTA's three buckets):
- `memory`: the activity is a copy or set (kind memcpy/memset), or the name says so
  (`Memcpy...`, `Memset...`, MTIA `dma_*`, TF `MEMCPYHtoD`).
- `communication`: collectives and point-to-point (`nccl`, `rccl`, `hccl`, XLA's
  `all-reduce`/`all-gather`/`reduce-scatter`/`all-to-all`/`collective-permute`,
  MegEngine `CollectiveComm`, `SendRecv`).
- `computation`: everything else.
HTA differs in two places, both on purpose: it calls any kernel whose name starts with
`hip` communication (its pattern `^hip`), and it leaves names matching neither pattern of
its compute list (e.g. `Stream Wait Event`, `runFunction...`) as OTHER.

kernel_category refines computation into gemm / convolution / attention / reduction /
elementwise / other (see `_RULES`); communication and memory are their own categories.
"""

from __future__ import annotations

import re
from functools import lru_cache

_MEMORY = re.compile(r"^(hip)?memcpy|^(hip)?memset|^dma|^memcpy|\bmemcpy|\bmemset", re.IGNORECASE)
_COMMUNICATION = re.compile(
    r"nccl|rccl|hccl|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|alltoall"
    r"|collective[-_]?permute|collectivecomm|sendrecv|send_recv|cross_device",
    re.IGNORECASE,
)
# Computation categories, first match wins (attention before gemm: flash kernels are
# GEMM-like; convolution before gemm: implicit-GEMM convolutions say "gemm" too).
_RULES: list[tuple[str, re.Pattern]] = [
    ("attention", re.compile(r"flash|fmha|attention|attn|sdpa|xformers|\bmha\b", re.IGNORECASE)),
    ("convolution", re.compile(
        r"conv|winograd|fft2d|implicit_gemm|\bdgrad|_dgrad|\bwgrad|_wgrad|fprop|im2col", re.IGNORECASE)),
    ("gemm", re.compile(
        r"gemm|gemv|matmul|cublas|cutlass|triton_mm|triton_tem|\bmm_|bmm|Cijk_|\bdot\b|dot_fusion"
        r"|sm\d+_xmma|xmma|MatrixMul|batched_matmul",
        re.IGNORECASE)),
    ("reduction", re.compile(
        r"reduce|reduction|softmax|norm|triton_red|triton_per|sum_|mean|argmax|argmin|pool|topk"
        r"|sort|scan|cumsum|welford|biasaddgrad|^(sum|max|min|prod|all|any)$",
        re.IGNORECASE)),
    ("elementwise", re.compile(
        r"elementwise|elemwise|vectorized|unrolled|triton_poi|loop_.*fusion|^fusion|fill|copy"
        r"|cast|dropout|multi_tensor_apply|relu|gelu|silu|tanh|sigmoid|add|mul|index|where"
        r"|clamp|neg|exp|sqrt|pow|foreach",
        re.IGNORECASE)),
]


@lru_cache(maxsize=65536)
def classify(name: str | None, kind: str | None = "kernel") -> tuple[str, str]:
    """(kernel_type, kernel_category) of one activity."""
    text = name or ""
    if kind in ("memcpy", "memset") or _MEMORY.search(text):
        return "memory", "memory"
    if _COMMUNICATION.search(text):
        return "communication", "communication"
    for category, pattern in _RULES:
        if pattern.search(text):
            return "computation", category
    return "computation", "other"
