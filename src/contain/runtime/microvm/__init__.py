"""The microVM backend: a QEMU ``-M microvm`` guest kernel between the workload and the host."""

__all__: list[str] = []
