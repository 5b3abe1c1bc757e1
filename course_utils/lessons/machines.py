"""Notebook 06: a pretend machine, so that every branch of the hardware fallback chain runs on a laptop."""

from __future__ import annotations

from typing import Any, Optional

from ..errors import NoTPUError


class FakeMachine:
    """A pretend machine for tests and notebook 06: pass its methods where a chain asks the machine.

    ``FakeMachine(tpu=True)`` has a TPU; otherwise ``find_tpu`` raises ``tpu_error`` (default a
    :class:`NoTPUError`, as :func:`find_local_tpu` does). ``gpus`` and ``cpus`` are device counts.
    ``list_devices`` stands for ``tf.config.list_physical_devices`` (one physical CPU, as
    :func:`plan_hardware` expects) and ``list_logical_devices`` for ``tf.config.list_logical_devices``
    (``cpus`` virtual CPUs, as notebook 06's chain expects). ``calls`` records what was asked, in order.
    """

    def __init__(
        self,
        tpu: bool = False,
        gpus: int = 0,
        cpus: int = 1,
        tpu_error: Optional[BaseException] = None,
    ) -> None:
        self.tpu, self.gpus, self.cpus, self.tpu_error = tpu, gpus, cpus, tpu_error
        self.calls: list[str] = []

    def find_tpu(self) -> Any:
        self.calls.append("find_tpu")
        if self.tpu:
            return "fake TPU resolver"
        raise self.tpu_error if self.tpu_error is not None else NoTPUError("no TPU: a fake machine")

    def list_devices(self, device_type: str) -> list[str]:
        self.calls.append(f"list_devices({device_type!r})")
        count = {"GPU": self.gpus, "CPU": 1, "TPU": 8 if self.tpu else 0}.get(device_type.upper(), 0)
        return [f"/physical_device:{device_type.upper()}:{i}" for i in range(count)]

    def list_logical_devices(self, device_type: str) -> list[Any]:
        """``tf.config.LogicalDevice`` entries, as ``tf.config.list_logical_devices`` returns them."""
        import tensorflow as tf

        self.calls.append(f"list_logical_devices({device_type!r})")
        kind = device_type.upper()
        count = {"GPU": self.gpus, "CPU": self.cpus, "TPU": 8 if self.tpu else 0}.get(kind, 0)
        return [tf.config.LogicalDevice(name=f"/device:{kind}:{i}", device_type=kind) for i in range(count)]

    def __repr__(self) -> str:
        error = "" if self.tpu or self.tpu_error is None else f", tpu_error={type(self.tpu_error).__name__}"
        return f"FakeMachine(tpu={self.tpu}, gpus={self.gpus}, cpus={self.cpus}{error})"
