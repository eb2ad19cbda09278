"""The environment section of PyTorch reports: the neutral basics plus torch's build and device."""

from __future__ import annotations

from ...environment import base_environment, nvml_gpus
from .devices import torch_cpu_view


def torch_environment(device=None) -> dict:
    import torch

    env = base_environment("torch", torch.__version__)
    env["torch_build"] = "rocm" if getattr(torch.version, "hip", None) else ("cuda" if torch.version.cuda else "cpu")
    env["cuda_runtime"] = torch.version.cuda
    env["cuda_available"] = torch.cuda.is_available()
    env["device"] = str(device) if device is not None else None
    view = torch_cpu_view()
    for key in ("avx512_bf16", "amx_tile", "amx_fp16"):  # either source saying yes is a yes
        view[key] = bool(env["cpu"].get(key) or view.get(key))
    env["cpu"].update(view)
    try:
        if torch.backends.cudnn.is_available():
            env["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            env["gpus"].append({
                "index": i,
                "name": props.name,
                "compute_capability": f"{props.major}.{props.minor}",
                "memory_total_bytes": int(props.total_memory),
                "multiprocessors": props.multi_processor_count,
            })
        env["nvml"] = nvml_gpus()
        if env["nvml"]:
            env["driver_version"] = env["nvml"][0].get("driver_version")
    if device is not None:
        if device.type == "cuda":
            idx = device.index or 0
            env["device_name"] = torch.cuda.get_device_name(idx)
            major, minor = torch.cuda.get_device_capability(idx)
            env["compute_capability"] = f"{major}.{minor}"
        else:
            env["device_name"] = env["cpu"]["model"]
    return env


class TorchEnvironment:
    """:class:`ampkit.backends.base.EnvironmentOps` for PyTorch."""

    name = "torch"

    def target(self, device: str):
        from ...target import Target
        from .devices import resolve_device

        d = resolve_device(device)
        return Target(device=str(d), accelerator=d.type == "cuda", label=str(d))

    @staticmethod
    def torch_device(target):
        import torch

        return torch.device(target.device)

    def environment(self, target) -> dict:
        return torch_environment(self.torch_device(target))

    def mode_support(self, mode: str, target) -> tuple[bool, str]:
        from .devices import mode_support

        return mode_support(mode, self.torch_device(target))

    def training_support(self, mode: str, target) -> tuple[bool, bool, str]:
        if mode == "fp8":  # torchao: real fp8 kernels where the hardware has them, else its emulation
            from .engine.fp8 import fp8_support

            return fp8_support(self.torch_device(target))
        ok, why = self.mode_support(mode, target)
        return ok, False, why

    def resolve_auto(self, target) -> tuple[str, str]:
        from .devices import resolve_auto

        return resolve_auto(self.torch_device(target))

    def default_workload(self, target) -> str:
        from .workloads import default_workload

        return default_workload(self.torch_device(target))

    def check_workload(self, name: str) -> str:
        from .workloads import check_builtin

        return check_builtin(name)
