"""Compile the fused head's kernel to Triton IR for an H100 (sm_90) without a GPU, the kernel
compiled rather than interpreted (run without TRITON_INTERPRET): the front end checks what the
interpreter does not, such as globals that are not constexpr. Prints "TTIR ok" and its size."""

from triton._C.libtriton import ir
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource

from rbplab.extraction import fused_head

ARGS = {
    "H": "*bf16", "W": "*bf16", "B": "*fp32", "T": "*i32", "G": "*i32", "OUT_GREATER": "*i32",
    "OUT_EQUAL": "*i32", "OUT_NLL": "*fp32", "OUT_ZT": "*fp32", "OUT_BAD": "*i32", "OUT_MISMATCH": "*i32",
    "n": "i32", "V": "i32", "d": "i32", "stride_h": "i32", "stride_w": "i32", "softcap": "fp32",
}  # fmt: skip
CONSTS = {"HAS_BIAS": True, "HAS_CAP": True, "IEEE": False, "BLOCK_N": 128, "BLOCK_V": 128, "BLOCK_D": 64}

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
