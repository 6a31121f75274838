"""A small inference workload per precision for the AMX check (run under ONEDNN_VERBOSE=1).

``python -m socketlab.platform.amx_workload bf16|int8|fp32``: a Linear-GELU-Linear stack
(1024 -> 4096 -> 1024, batch 64, seeded weights, nothing downloaded) in FP32, under BF16
autocast, or dynamically quantized to INT8 on torch's ``onednn`` quantized engine (the default
x86/fbgemm engine never reaches oneDNN's matmul, so its trace could not show AMX either way).

Every run first applies an FP32 GELU: it goes through oneDNN's eltwise on every CPU, so the
trace always carries oneDNN's ISA line, and on an AMX host it is the ``jit:..._amx`` eltwise
the verdict must not count.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("bf16", "int8", "fp32"):
        print("usage: python -m socketlab.platform.amx_workload bf16|int8|fp32", file=sys.stderr)
        return 2
    import torch

    prec = argv[0]
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).eval()
    x = torch.randn(64, 1024)
    with torch.no_grad():
        torch.nn.functional.gelu(x)  # the ISA line, and the eltwise false positive on AMX
        if prec == "fp32":
            y = model(x)
        elif prec == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = model(x)
        else:
            if "onednn" not in torch.backends.quantized.supported_engines:
                print("torch has no onednn quantized engine", file=sys.stderr)
                return 3
            torch.backends.quantized.engine = "onednn"
            q = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            y = q(x)
    print(prec, float(y.float().abs().mean()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
