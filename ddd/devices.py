"""Reading a clock around work on a device. CUDA returns from a call once its kernels are queued, not run, so a clock
read straight after it would time the launch; every timing in ddd reads its clock through `clock_after`, which
first waits for the device."""
from __future__ import annotations

import time
from collections.abc import Callable

import torch


def is_cuda(device: torch.device) -> bool:
    return device.type == "cuda"


def clock_after(device: torch.device, clock: Callable[[], float] | None = None) -> float:
    """`clock()` (time.perf_counter by default) once the work queued on `device` has finished."""
    if is_cuda(device):
        torch.cuda.synchronize(device)
    return (clock or time.perf_counter)()
