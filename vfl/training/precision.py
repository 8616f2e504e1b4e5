"""train.precision: bf16 autocast with fp32 master weights (CPU and CUDA), and whether bf16 is native here.

Weights, optimizer state and the cut tensors on the wire stay fp32: autocast runs the matmuls of the
forward pass in bf16 and autograd returns fp32 gradients for the fp32 parameters. Native bf16 means
AMX or AVX512-BF16 on a CPU (read from /proc/cpuinfo), or a CUDA device that supports it; elsewhere
torch emulates bf16 and a run is slower than fp32, so it warns once.
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("fp32", "bf16")
NATIVE_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
_warned: set[str] = set()


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags of the first processor (empty where /proc/cpuinfo is absent)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def bf16_native(device: torch.device | str = "cpu") -> tuple[bool, str]:
    """(native?, why): AMX/AVX512-BF16 flags on a CPU, torch.cuda.is_bf16_supported() on CUDA."""
    device = torch.device(device)
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return ok, f"CUDA {torch.cuda.get_device_name(device)} {'supports' if ok else 'does not support'} bf16"
    have = sorted(cpu_flags() & set(NATIVE_CPU_FLAGS))
    if have:
        return True, f"CPU flags {', '.join(have)}"
    return False, f"CPU has none of {', '.join(NATIVE_CPU_FLAGS)}"


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The forward-pass context for train.precision: bf16 autocast on the device's type, or nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    raise ValueError(f"train.precision must be one of {PRECISIONS}, got {precision!r}")


def warn_if_emulated(precision: str, device: torch.device, log) -> bool:
    """Log once per process that bf16 will be slower than fp32 where it is not native; True when it warned."""
    if precision != "bf16":
        return False
    native, why = bf16_native(device)
    key = str(device)
    if native or key in _warned:
        return False
    _warned.add(key)
    log.warning(
        f"train.precision bf16: bf16 is not native on this machine ({why}); torch emulates it and "
        f"training will be slower than fp32 (use fp32 here)"
    )
    return True


NARROW_OUTPUTS = 16


def keep_narrow_layers_fp32(model: torch.nn.Module, precision: str) -> int:
    """Under bf16, run every Linear with at most NARROW_OUTPUTS outputs (the cut and the logits) in fp32.

    bf16 keeps 8 bits of mantissa: a cut or a logit rounded to it would tie scores that fp32 tells apart,
    and these layers cost well under 1% of the FLOPs. Returns how many layers it changed."""
    if precision != "bf16":
        return 0
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.out_features <= NARROW_OUTPUTS:
            module.forward = _fp32_forward(module)
            changed += 1
    return changed


def _fp32_forward(module: torch.nn.Linear):
    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            return torch.nn.functional.linear(x.float(), module.weight, module.bias)

    return forward
