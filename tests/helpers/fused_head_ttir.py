"""Compile the fused head's kernel for an H100 (sm_90) without a GPU, through Triton IR, GPU IR, LLVM IR
and PTX, the kernel compiled rather than interpreted (run without TRITON_INTERPRET): the compiler
checks what the interpreter does not, such as globals that are not constexpr or control flow the GPU
lowering refuses. Prints "TTIR ok" and "PTX ok" with their sizes (the cubin needs ptxas and a GPU
toolchain, so it stops at PTX)."""

from triton._C.libtriton import ir
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource

from rbplab.extraction import fused_head

ARGS = {
    "H": "*bf16", "W": "*bf16", "B": "*fp32", "T": "*i32", "G": "*i32", "M": "*fp32", "OUT_GREATER": "*i32",
    "OUT_BAND": "*i32", "OUT_CAND": "*i32", "OUT_NLL": "*fp32", "OUT_ZT": "*fp32", "OUT_BAD": "*i32",
    "OUT_MISMATCH": "*i32", "n": "i32", "V": "i32", "d": "i32", "stride_h": "i32", "stride_w": "i32",
    "softcap": "fp32",
}  # fmt: skip
CONSTS = {
    "HAS_BIAS": True, "HAS_CAP": True, "IEEE": False, "BLOCK_N": 128, "BLOCK_V": 256, "BLOCK_D": 64,
    "MAX_CAND": fused_head.MAX_CANDIDATES,
}  # fmt: skip

signature = ARGS | dict.fromkeys(CONSTS, "constexpr")
source = ASTSource(
    fused_head._rank_kernel,
    signature,
    constexprs={(list(signature).index(k),): v for k, v in CONSTS.items()},
)
target = GPUTarget("cuda", 90, 32)
backend = CUDABackend(target)
options = backend.parse_options({})
context = ir.context()
ir.load_dialects(context)
backend.load_dialects(context)
module = source.make_ir(
    target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context
)
print("TTIR ok", len(str(module)))
stages: dict = {}
backend.add_stages(stages, options, source.language)
metadata: dict = {}
for stage in ("ttir", "ttgir", "llir", "ptx"):
    module = stages[stage](module, metadata)
print("PTX ok", len(module))
